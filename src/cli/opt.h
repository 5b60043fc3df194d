/* The one option-table parser of every `sfb` subcommand (house rule 14).
 *
 * Long options match their exact name only: no abbreviations, so a
 * misspelt `--stalenes 2` is a usage error that names the closest valid
 * option instead of silently meaning `--staleness`. Accepted forms:
 * `--name VALUE`, `--name=VALUE`, `-x VALUE`, `-xVALUE`, clusters of short
 * flags (`-qv`, `-qvn3`); `--` ends the options. A required value is the
 * next argument whatever it looks like (`--staleness -1`). No subcommand
 * takes positional arguments, so any is a usage error. */
#ifndef SFB_CLI_OPT_H
#define SFB_CLI_OPT_H

#include <stdint.h>

struct cli_opt {
    const char *name; /* long name without "--"; NULL ends the table */
    char short_name;  /* 0: none */
    int has_arg;      /* 1: takes a value */
    int id;           /* returned by cli_opt_next; must be > 0 */
};

struct cli_optparse {
    int argc;
    char **argv;
    const char *cmd;     /* "run", "topo", ... for messages */
    int i;               /* next argv element */
    const char *cluster; /* rest of a short-option cluster, or NULL */
    const char *arg;     /* the value of the option just returned */
    char spelled[64];    /* how to name it in messages: "--lr" or "-n" */
};

enum { CLI_OPT_END = 0, CLI_OPT_ERR = -1 };

/* argv[0] is the subcommand name and is skipped. */
void cli_opt_init(struct cli_optparse *p, int argc, char **argv, const char *cmd);

/* Returns the next option's id (its value in p->arg, its name in
 * p->spelled), CLI_OPT_END when argv is used up, or CLI_OPT_ERR after
 * printing a usage error to stderr ("sfb CMD: ..."). */
int cli_opt_next(struct cli_optparse *p, const struct cli_opt *table);

/* The table entry whose name is closest to `name` (edit distance), or NULL
 * when none is close enough to be a likely misspelling. */
const struct cli_opt *cli_opt_closest(const struct cli_opt *table, const char *name);

/* Option values: a decimal integer in [min, max] (no sign, no spaces), a
 * finite number. 0, or -1 when `s` is no such value (the caller names the
 * option and what it wants). */
int cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int cli_parse_double(const char *s, double *out);

#endif
