/* The one option-table parser of every `sfb` subcommand (house rule 14).
 *
 * A table row names an option, says what kind of value it takes, where the
 * value goes (an offset into the caller's struct), its accepted range or
 * choices and its help text; cli_opt_parse checks and stores every value
 * and cli_opt_help prints --help from the same rows, so the two cannot
 * drift apart.
 *
 * Long options match their exact name only: no abbreviations, so a
 * misspelt `--stalenes 2` is a usage error that names the closest valid
 * option instead of silently meaning `--staleness`. Accepted forms:
 * `--name VALUE`, `--name=VALUE`, `-x VALUE`, `-xVALUE`, clusters of short
 * flags (`-qv`, `-qvn3`); `--` ends the options. A required value is the
 * next argument whatever it looks like (`--staleness -1`). A positional
 * argument is a usage error, unless the caller collects them (`pos`, as
 * `sfb timeline FILE...` does): then they may come before, between and
 * after the options, and everything after `--` is one. */
#ifndef SFB_CLI_OPTPARSE_H
#define SFB_CLI_OPTPARSE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum cli_kind {
    CLI_END = 0, /* ends the table (name NULL) */
    CLI_SECTION, /* a heading in --help (help only) */
    CLI_HELP,    /* -h/--help: cli_opt_parse returns CLI_OPT_HELP */
    CLI_FLAG,    /* no value: stores `ival` into an int */
    CLI_STR,     /* a string (pointer into argv); umin = 1: must not be empty */
    CLI_UINT,    /* decimal integer in [umin, umax] into a uint32_t or uint64_t (size) */
    CLI_UINT_LIST, /* "a,b,c": 1 … (size/4 − 1) decimal integers in [umin, umax]
                      into a uint32_t count followed by that many uint32_t
                      (struct sfb_model_u32_list) */
    CLI_INT,     /* decimal integer in [imin, imax] into an int or int64_t (size) */
    CLI_REAL,    /* finite number in the range lo..hi (open ends per `open`) into a double */
    CLI_ENUM,    /* one of `choices` ("a|b|c"): stores values[i] into an int */
    CLI_CHOICE,  /* one of `choices`: stores the string itself */
    CLI_CALL,    /* call(): checks and stores the value itself */
};

enum { CLI_OPEN_LO = 1, CLI_OPEN_HI = 2 };

struct cli_opt;

/* Checks and stores `v` into `base`; on a bad value prints the message
 * (cli_opt_bad) and returns 2, else 0. `ctx` is cli_opt_parse's. */
typedef int (*cli_opt_fn)(void *base, void *ctx, const struct cli_opt *o, const char *spelled,
                          const char *v);

struct cli_opt {
    enum cli_kind kind;
    const char *name;    /* long name without "--" */
    char short_name;     /* 0: none */
    size_t off;          /* destination: offset in the caller's struct */
    size_t size;         /* and its width (sizeof the field) */
    const char *metavar; /* the value in --help ("P", "auto|0|1") */
    const char *help;    /* one line per '\n'; a CLI_SECTION's heading */
    uint64_t umin, umax; /* CLI_UINT (CLI_STR: umin = 1, non-empty) */
    int64_t imin, imax;  /* CLI_INT */
    double lo, hi;       /* CLI_REAL */
    int open;            /* CLI_REAL: CLI_OPEN_LO | CLI_OPEN_HI */
    const char *choices; /* CLI_ENUM, CLI_CHOICE: "a|b|c" */
    const int *values;   /* CLI_ENUM: the value of each choice */
    int ival;            /* CLI_FLAG */
    const char *want;    /* "a positive number": how a bad value is described;
                            NULL: from the range or the choices */
    cli_opt_fn call;     /* CLI_CALL */
};

#define CLI_OPT_MAX 128 /* rows of one table at most */

struct cli_optparse {
    int argc;
    char **argv;
    const char *cmd;                  /* "run", "topo", ... for messages */
    int i;                            /* next argv element */
    const char *cluster;              /* rest of a short-option cluster, or NULL */
    const char *arg;                  /* the value of the option just returned */
    char spelled[64];                 /* how to name it in messages: "--lr" or "-n" */
    unsigned char given[CLI_OPT_MAX]; /* rows seen by cli_opt_parse */
    const char **pos;                 /* NULL: positional arguments are usage errors;
                                         else they go here (room for argc) */
    int npos;                         /* how many went there */
};

enum { CLI_OPT_END = 0, CLI_OPT_ERR = -1 };

/* argv[0] is the subcommand name and is skipped. Positional arguments
 * are usage errors unless the caller sets p->pos afterwards. */
void cli_opt_init(struct cli_optparse *p, int argc, char **argv, const char *cmd);

/* Returns the next option's row index + 1 (its value in p->arg, its name
 * in p->spelled), CLI_OPT_END when argv is used up, or CLI_OPT_ERR after
 * printing a usage error to stderr ("sfb CMD: ..."). */
int cli_opt_next(struct cli_optparse *p, const struct cli_opt *table);

enum { CLI_OPT_OK = 0, CLI_OPT_HELP = 1, CLI_OPT_USAGE = 2 };

/* Parses every option of p's argv into `base` by the table: CLI_OPT_OK,
 * CLI_OPT_HELP (help asked for; the caller prints it) or CLI_OPT_USAGE
 * (message printed: the option and the bad value). p->given says which
 * rows were seen. `ctx` is handed to CLI_CALL rows. */
int cli_opt_parse(struct cli_optparse *p, const struct cli_opt *table, void *base, void *ctx);

/* 1 if the option named `name` was given to cli_opt_parse. */
int cli_opt_given(const struct cli_optparse *p, const struct cli_opt *table, const char *name);

/* Rewrites the options of p's argv (already accepted by cli_opt_parse
 * with the same table) one per element in the canonical form "--name" or
 * "--name=VALUE" into out (room for `cap` elements), leaving out the row
 * named `drop`: `-qn2` becomes "--quiet" when -n is dropped, exactly as
 * this parser read it. A cluster of k short options becomes k elements,
 * so a cap of the arguments' total length always suffices. Each element
 * is allocated (the caller frees them). Returns the count, or -1 (out of
 * room or memory, or argv not accepted; nothing left allocated). */
int cli_opt_canonical(struct cli_optparse *p, const struct cli_opt *table, const char *drop,
                      char **out, size_t cap);

/* Prints the table's rows as --help lines ("  -n, --nprocs P   help..."). */
void cli_opt_help(FILE *f, const struct cli_opt *table);

/* Prints "sfb CMD: OPT: "VALUE" is not WANT" and returns CLI_OPT_USAGE. */
int cli_opt_bad(const char *cmd, const char *spelled, const char *v, const char *want);

/* The table entry whose name is closest to `name` (edit distance), or NULL
 * when none is close enough to be a likely misspelling. */
const struct cli_opt *cli_opt_closest(const struct cli_opt *table, const char *name);

/* The same over n words (a command's names): the closest to `name`, or NULL. */
const char *cli_closest_word(const char *const *words, size_t n, const char *name);

/* Strict number parsing for CLI_CALL rows and files: the whole string,
 * no sign for the unsigned one, finite doubles only. 0 or -1. */
int cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int cli_parse_double(const char *s, double *out);
/* A rate with its unit, as tc(8) writes bits: "200mbit", "1.5gbit", "800kbit",
 * "64bit"; or bytes: "25MB/s", "512KiB/s", "1GB/s" (k/M/G = 10^3.., Ki/Mi/Gi
 * = 2^10..; the "/s" may be left out). *bytes_s: bytes per second. 0, or
 * -1 with why (a static phrase) set: no number, unknown or ambiguous unit
 * ("mbps": tc reads it as megabytes), not positive. */
int cli_parse_rate(const char *s, double *bytes_s, const char **why);

#endif
