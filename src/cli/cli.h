/* The `sfb` command line: shared option parsing and the subcommands. */
#ifndef SFB_CLI_H
#define SFB_CLI_H

#include <sfb/model.h>
#include <sfb/sfb.h>
#include <sfb/train.h>

#include <stdint.h>
#include <stdio.h>

/* Options of `sfb run` and `sfb worker` beyond the training settings. */
struct cli_job {
    struct sfb_train_settings train;
    /* the models' own options (sfb_model_ops.options), zero where not
     * given; copied into `train` after parsing */
    struct sfb_model_settings model;
    int nprocs;           /* run: -n */
    uint32_t respawn;     /* run: --respawn (the launcher's; SFB_RESPAWN) */
    int with_n;           /* `sfb run`: -n allowed */
    const char *out_dir;  /* where the model and metrics go by default */
    const char *timeline; /* --timeline: SFB_TIMELINE for the workers (NULL: as set) */
    /* --debug-delay-ms, --debug-slow-rank, --debug-slow-factor: the
     * trainer's SFB_DEBUG_DELAY_MS, _SLOW_RANK, _SLOW_FACTOR, set in the
     * environment when given (docs/environment.md) */
    double debug_delay_ms;
    int debug_slow_rank;
    double debug_slow_factor;
    int quiet;
    enum sfb_log_level log_level;
    int out_dir_used;     /* a default path lies in out_dir */
    /* `sfb worker` of the environment rendezvous (SFB_RANK set): its rank
     * and world, read into their ranges by cli_parse_job; else 0, 0 */
    uint32_t env_rank, env_world;
    char model_out_buf[4096], metrics_out_buf[4096];
};

/* Parses argv (after the subcommand name) into *job, and checks every
 * setting, combination of settings and output path that can be judged
 * before the job starts (sfb_train_check_settings, cli_paths_build).
 * `with_n` allows -n. Prints the error and returns 2 on bad usage, returns
 * 1 after printing help, 0 on success. Touches no file. */
int cli_parse_job(int argc, char **argv, const char *cmd, int with_n, struct cli_job *job);
/* The number of workers known before the job starts: -n for `sfb run`,
 * SFB_WORLD_SIZE for a worker of the environment rendezvous (as
 * cli_parse_job read it), else 0. */
uint32_t cli_known_world(const struct cli_job *job, int with_n);
/* The command line of the workers `sfb run` forks: `self worker` and every
 * option of the run's argv (accepted by cli_parse_job) but -n, each in
 * its canonical form (cli_opt_canonical). NULL-terminated; free with
 * cli_free_argv. NULL when out of memory. */
char **cli_worker_argv(int argc, char **argv, char *self);
void cli_free_argv(char **argv);

/* src/cli/paths.c. Fills the default model/metrics paths from --out-dir
 * and refuses (2, message printed) paths that would not fit PATH_MAX once
 * expanded for `world` workers (0: unknown), and a metrics path without %r
 * when world > 1. */
int cli_paths_build(struct cli_job *job, const char *cmd, uint32_t world);
/* Creates the output directory and checks, for ranks rank_lo..rank_hi, that
 * every output location (model, metrics, checkpoint directory) can be
 * written. 0, or 2 with the option at fault printed. */
int cli_prepare_outputs(struct cli_job *job, const char *cmd, unsigned rank_lo, unsigned rank_hi);
/* Expands every "%r" of pattern to rank. 0 or -ENAMETOOLONG. */
int cli_path_for_rank(char *buf, size_t cap, const char *pattern, unsigned rank);

int cli_run(int argc, char **argv);
int cli_worker(int argc, char **argv);
/* main() for a worker that `sfb run` forked instead of executing: main.c
 * sets it (in cli.c) before it runs a command, as the command table lies
 * above the commands. */
extern int (*cli_forked_worker)(int argc, char **argv);
int cli_eval(int argc, char **argv);
/* `sfb timeline` (cmd_timeline.c): merges a training timeline's per-rank
 * files and accounts each step. */
int cli_timeline(int argc, char **argv);
/* `sfb launch` (src/cli/cmd_launch.c) */
int cli_launch(int argc, char **argv);

/* cli.c. Installs the stderr log sink. */
void cli_log_init(enum sfb_log_level level);
/* Prints "sfb: error: WHAT: ..." with the detail of `code` (sfb_error_message). */
void cli_error(int code, const char *what);
/* A local launch (sfb run, sfb launch) that failed with `code`: its error
 * line, and the exit status: 128 + N when signal N stopped it, 2 for a usage
 * error (a copy's exit 2, settings refused before any started), else 1. */
int cli_launch_failed(int code, const char *what);
/* OpenBLAS's generic kernels ran in this process when main() set
 * OPENBLAS_CORETYPE to better ones (their name), else NULL; main's argv. */
extern const char *cli_blas_generic;
extern char **cli_main_argv;
/* A command about to compute (run, worker, eval, topo's measurement) calls
 * this first, before anything it started would be lost: where main() set
 * OPENBLAS_CORETYPE, the process starts itself again with the same
 * arguments, on those kernels (SFB_BLAS_FOUND: OpenBLAS's own choice, for
 * rank 0's report). A process started again never comes back here with
 * cli_blas_generic set: OPENBLAS_CORETYPE is set by then. */
void cli_blas_kernels(void);
/* sfb_blas_reserve for `cmd`: returns when BLAS has its working memory;
 * else prints why and leaves at once with _exit(1), for OpenBLAS's own
 * threads may be stuck allocating and exit() would wait for them. */
void cli_blas_reserve(const char *cmd);

extern const char *cli_prog;

#endif
