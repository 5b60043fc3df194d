/* `sfb launch -n P [--] CMD ARGS...`: P local copies of any command, wired
 * by the environment rendezvous (as torchrun starts its workers), through
 * sfb_launch_local. */
#include "src/cli/cli.h"
#include "src/cli/optparse.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

struct launch_opts {
    uint32_t nprocs;
    int elastic;
    uint32_t respawn;
};

static const struct cli_opt launch_table[] = {
    {.kind = CLI_UINT, .name = "nprocs", .short_name = 'n', .off = offsetof(struct launch_opts, nprocs),
     .size = sizeof(uint32_t), .metavar = "P", .help = "copies to start, 1..1024 (required)",
     .umin = 1, .umax = 1024},
    {.kind = CLI_FLAG, .name = "elastic", .off = offsetof(struct launch_opts, elastic),
     .size = sizeof(int), .ival = 1,
     .help = "a copy's death does not stop the others: they\n"
             "go on without it (sets SFB_ELASTIC=1 for them)"},
    {.kind = CLI_UINT, .name = "respawn", .off = offsetof(struct launch_opts, respawn),
     .size = sizeof(uint32_t), .metavar = "N", .umin = 0, .umax = 1024,
     .help = "with --elastic: restart a copy that died, at most\n"
             "N times; it joins the running job (SFB_JOINING=1)"},
    {.kind = CLI_HELP, .name = "help", .short_name = 'h', .help = "this text"},
    {.kind = CLI_END},
};

static void launch_help(FILE *f)
{
    fprintf(f,
            "usage: sfb launch -n P [--] CMD [ARGS...]\n"
            "\n"
            "Starts P copies of CMD on this machine as ranks 0..P-1 of one job, each with\n"
            "the rendezvous environment that sfb_job_open (C), sfb.Job (Python) and\n"
            "`sfb worker` read:\n"
            "  SFB_RANK, SFB_WORLD_SIZE   this copy's rank and the job's size\n"
            "  SFB_RENDEZVOUS             127.0.0.1:PORT (a free port) where rank 0 listens\n"
            "  SFB_JOB_KEY                a random key shared by the job's ranks\n"
            "  PYTHONHASHSEED             where unset, a random seed shared by the copies:\n"
            "                             Python's str hash() (a set's order, hashed\n"
            "                             features) the same on every rank\n"
            "Every line a copy prints is written as \"[RANK] line\"; stdin is /dev/null.\n"
            "SIGINT, SIGTERM and SIGHUP are forwarded to every copy (a second one kills).\n"
            "When one copy fails (non-zero exit or a signal) the others get SIGTERM and,\n"
            "3 s later, SIGKILL; sfb launch waits for all of them. With --elastic they\n"
            "go on without it (an elastic job: docs/robustness.md), and the job succeeded\n"
            "when a copy exited 0.\n"
            "\n"
            "options:\n");
    cli_opt_help(f, launch_table);
    fprintf(f,
            "\n"
            "exit status: 0 when every copy exited 0; 1 naming the first failed copy\n"
            "(\"rank 2 exited with status 1; pid 12345\"), 2 when a copy exited 2\n"
            "(a usage error); 128+N when signal N stopped the job; 2 for a usage error.\n"
            "\n"
            "example:\n"
            "  sfb launch -n 4 -- python3 examples/mlr_numpy.py --epochs 5\n");
}

/* Where CMD starts: after "--", else at the first argument that is neither
 * an option nor the value of -n or --respawn. */
static int command_start(int argc, char **argv, int *opts_end)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            *opts_end = i + 1;
            return i + 1;
        }
        if (a[0] != '-' || !a[1]) {
            *opts_end = i;
            return i;
        }
        if (!strcmp(a, "-n") || !strcmp(a, "--nprocs") || !strcmp(a, "--respawn")) i++;
    }
    *opts_end = argc;
    return argc;
}

/* Python salts str's hash() per process: one seed for the job's copies, so
 * that a vocabulary built from a set, or features hashed from strings, are
 * the same on every rank as in one process (the user's own value kept). */
static int share_hash_seed(void)
{
    const char *set = getenv("PYTHONHASHSEED");
    if (set && *set) return 0;
    uint32_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed) seed = (uint32_t)getpid();
    char v[16];
    snprintf(v, sizeof v, "%u", (unsigned)seed);
    if (setenv("PYTHONHASHSEED", v, 1)) {
        fprintf(stderr, "sfb launch: PYTHONHASHSEED: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

int cli_launch(int argc, char **argv)
{
    int opts_end, cmd = command_start(argc, argv, &opts_end), r;
    struct launch_opts o = {0};
    struct cli_optparse p;
    cli_opt_init(&p, opts_end, argv, "launch");
    r = cli_opt_parse(&p, launch_table, &o, NULL);
    if (r == CLI_OPT_HELP) {
        launch_help(stdout);
        return 0;
    }
    if (r) return 2;
    int nprocs = (int)o.nprocs;
    if (!nprocs || cmd >= argc) {
        fprintf(stderr, "sfb launch: %s (usage: sfb launch -n P [--] CMD [ARGS...]; see "
                        "sfb launch --help)\n", !nprocs ? "-n P is required" : "no command given");
        return 2;
    }
    if (o.elastic && setenv("SFB_ELASTIC", "1", 1)) {
        fprintf(stderr, "sfb launch: --elastic: %s\n", strerror(errno));
        return 1;
    }
    if (o.respawn && !o.elastic) {
        fprintf(stderr, "sfb launch: --respawn restarts the copies of an elastic job: add "
                        "--elastic\n");
        return 2;
    }
    char rv[16];
    snprintf(rv, sizeof rv, "%u", o.respawn);
    if (o.respawn && setenv("SFB_RESPAWN", rv, 1)) {
        fprintf(stderr, "sfb launch: --respawn: %s\n", strerror(errno));
        return 1;
    }
    if (share_hash_seed()) return 1;
    cli_log_init(SFB_LOG_WARN);
    /* fork waits for OpenBLAS's threads, which may be stuck allocating */
    cli_blas_reserve("launch");
    r = sfb_launch_local(nprocs, argv + cmd);
    return r ? cli_launch_failed(r, "launch failed") : 0;
}
