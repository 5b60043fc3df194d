/* The `sfb` command line: shared option parsing and the subcommands. */
#ifndef SFB_CLI_H
#define SFB_CLI_H

#include "sfb/sfb.h"
#include "sfb/train.h"

#include <stdio.h>

/* Options of `sfb run` and `sfb worker` beyond the training settings. */
struct cli_job {
    struct sfb_train_settings train;
    int nprocs;           /* run: -n */
    const char *out_dir;  /* where the model and metrics go by default */
    const char *sync;     /* "sfb" | "fms" */
    long staleness;       /* SSP s; -1 = asynchronous */
    const char *topology; /* "full" | "halton" | "halton-classic" */
    int degree;           /* overlay out-degree, 0 = default */
    const char *provider; /* libfabric provider, NULL = auto */
    int quiet;
    enum sfb_log_level log_level;
    char model_out_buf[4096], metrics_out_buf[4096];
};

/* Parses argv (after the subcommand name) into *job. `with_n` allows -n.
 * Prints the error and returns 2 on bad usage, returns 1 after printing
 * help, 0 on success. */
int cli_parse_job(int argc, char **argv, const char *cmd, int with_n, struct cli_job *job);
/* Creates the output directory and fills default model/metrics paths. */
int cli_prepare_outputs(struct cli_job *job);

int cli_run(int argc, char **argv);
int cli_worker(int argc, char **argv);
int cli_eval(int argc, char **argv);

/* Installs the stderr log sink. */
void cli_log_init(enum sfb_log_level level);
/* Prints "sfb: error: WHAT: ..." with the detail of `code` (sfb_error_message). */
void cli_error(int code, const char *what);

extern const char *cli_prog;

#endif
