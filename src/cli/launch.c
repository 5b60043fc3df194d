/* `sfb launch -n P [--] CMD ARGS...`: P local copies of any command, wired
 * by the environment rendezvous (as torchrun starts its workers), through
 * sfb_launch_local. */
#include "src/cli/cli.h"
#include "src/cli/opt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            "Every line a copy prints is written as \"[RANK] line\"; stdin is /dev/null.\n"
            "SIGINT, SIGTERM and SIGHUP are forwarded to every copy (a second one kills).\n"
            "When one copy fails (non-zero exit or a signal) the others get SIGTERM and,\n"
            "3 s later, SIGKILL; sfb launch waits for all of them.\n"
            "\n"
            "options:\n"
            "  -n, --nprocs P   copies to start, 1..1024 (required)\n"
            "  -h, --help       this text\n"
            "\n"
            "exit status: 0 when every copy exited 0; 1 naming the first failed copy\n"
            "(\"rank 2 exited with status 1; pid 12345\"); 128+N when signal N stopped\n"
            "the job; 2 for a usage error.\n"
            "\n"
            "example:\n"
            "  sfb launch -n 4 -- python3 examples/mlr_numpy.py --epochs 5\n");
}

/* Where CMD starts: after "--", else at the first argument that is neither
 * an option nor the value of -n. */
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
        if (!strcmp(a, "-n") || !strcmp(a, "--nprocs")) i++;
    }
    *opts_end = argc;
    return argc;
}

static int parse_nprocs(const char *v, int *n)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 1 || x > 1024) {
        fprintf(stderr, "sfb launch: -n \"%s\": expected an integer in 1..1024\n", v);
        return 2;
    }
    *n = (int)x;
    return 0;
}

int cli_launch(int argc, char **argv)
{
    static const struct cli_opt table[] = {
        {"nprocs", 'n', 1, 'n'}, {"help", 'h', 0, 'h'}, {NULL, 0, 0, 0}};
    int opts_end, cmd = command_start(argc, argv, &opts_end), nprocs = 0, id, r;
    struct cli_optparse p;
    cli_opt_init(&p, opts_end, argv, "launch");
    while ((id = cli_opt_next(&p, table)) != CLI_OPT_END) {
        if (id == CLI_OPT_ERR) return 2;
        if (id == 'h') {
            launch_help(stdout);
            return 0;
        }
        if ((r = parse_nprocs(p.arg, &nprocs))) return r;
    }
    if (!nprocs || cmd >= argc) {
        fprintf(stderr, "sfb launch: %s (usage: sfb launch -n P [--] CMD [ARGS...]; see "
                        "sfb launch --help)\n", !nprocs ? "-n P is required" : "no command given");
        return 2;
    }
    cli_log_init(SFB_LOG_WARN);
    r = sfb_launch_local(nprocs, argv + cmd);
    if (r) {
        cli_error(r, "launch failed");
        /* interrupted: the shell's convention for a death by that signal */
        int sig = sfb_launch_stop_signal();
        return sig ? 128 + sig : 1;
    }
    return 0;
}
