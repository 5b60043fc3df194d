/* `sfb` — entry point and subcommand dispatch. */
#include "src/cli/cli.h"
#include "src/cli/topo.h"

#include <stdio.h>
#include <errno.h>
#include <string.h>

const char *cli_prog = "sfb";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sfb <command> [options]\n"
            "\n"
            "Train matrix-parameterized models (MLR, ...) across workers by sufficient\n"
            "factor broadcasting.\n"
            "\n"
            "commands:\n"
            "  run      start P local workers and train (the embedded default)\n"
            "  worker   one worker of a job started by mpirun/srun (PMIx) or by the\n"
            "           SFB_RANK/SFB_WORLD_SIZE/SFB_RENDEZVOUS environment\n"
            "  eval     evaluate a saved model file on a dataset\n"
            "  topo     analyse and simulate overlay topologies\n"
            "\n"
            "  sfb <command> --help   options of a command\n"
            "  sfb --version          version\n"
            "\n"
            "example:\n"
            "  sfb run -n 1 --model mlr --data fashion-mnist\n");
}

/* What a command printed on stdout (results, the final line) is output
 * like any file: a failed write is an error, not exit 0. */
static int finish(int rc)
{
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc != 2) {
        int e = errno ? errno : EIO;
        fprintf(stderr, "sfb: error: cannot write the standard output: %s\n", strerror(e));
        return 1;
    }
    return rc;
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("sfb %s\n", sfb_version());
        return 0;
    }
    if (!strcmp(cmd, "run")) return cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "worker")) return cli_worker(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return cli_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "launch")) return cli_launch(argc - 1, argv + 1);
    if (!strcmp(cmd, "topo")) return sfb_cli_topo(argc - 1, argv + 1);
    fprintf(stderr, "sfb: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return 2;
}

/* A worker forked by `sfb run` (sfb_launch_local_fork): what main() would
 * do with the worker command line. */
int cli_forked_worker(int argc, char **argv)
{
    return finish(dispatch(argc, argv));
}

int main(int argc, char **argv)
{
    return finish(dispatch(argc, argv));
}
