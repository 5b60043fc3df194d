/* `sfb` — entry point and subcommand dispatch. */
#include "src/base/util.h"
#include "src/cli/cli.h"
#include "src/cli/cmd_topo.h"
#include "src/cli/optparse.h"

#include <sfb/sf.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cli_prog = "sfb";

/* The subcommands: `sfb --help` lists this table and dispatch() runs from
 * it, so a command cannot be reachable and unlisted. */
static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help; /* lines after the first are indented under it */
} commands[] = {
    {"run", cli_run, "start P local workers and train (the embedded default)"},
    {"worker", cli_worker,
     "one worker of a job started by mpirun/srun (PMIx) or by the\n"
     "SFB_RANK/SFB_WORLD_SIZE/SFB_RENDEZVOUS environment"},
    {"launch", cli_launch,
     "start N local processes of any program (e.g. python3) as one job's\n"
     "ranks: sfb launch -n 4 -- python3 examples/mlr_numpy.py"},
    {"eval", cli_eval, "evaluate a saved model file on a dataset"},
    {"topo", sfb_cli_topo, "analyse and simulate overlay topologies"},
    {"timeline", cli_timeline,
     "merge a training timeline's files (SFB_TIMELINE=FILE) and account\n"
     "each step: compute, apply, network, wait"},
};

static const struct command *find(const char *name)
{
    for (size_t i = 0; i < SFB_ARRAY_LEN(commands); i++)
        if (!strcmp(name, commands[i].name)) return &commands[i];
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: sfb <command> [options]\n"
               "\n"
               "Train matrix-parameterized models (MLR, DML, sparse coding, MLPs) across\n"
               "workers by sufficient factor broadcasting.\n"
               "\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        fprintf(f, "  %-8s ", commands[i].name);
        for (const char *h = commands[i].help; *h; h++) {
            fputc(*h, f);
            if (*h == '\n') fprintf(f, "  %-8s ", "");
        }
        fputc('\n', f);
    }
    fprintf(f, "\n"
               "  sfb <command> --help   options of a command (or sfb help <command>)\n"
               "  sfb --help, -h, help   this help\n"
               "  sfb --version, -V      version\n"
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

/* A process of sfb stopped by a signal must die by it. A library loaded
 * before main may have installed a handler that reports and exits instead
 * (a sanitizer's runtime; libpsm2 and libinfinipath did when libfabric was
 * loaded with libsfb, and src/transport/fi_lazy.c keeps their handlers
 * out now):
 * a worker's launcher (sfb run, mpirun, a batch system) would not hear of
 * the signal, and exit() run from a signal handler deadlocks where the
 * signal interrupted a holder of a lock an exit handler takes (SIGTERM to
 * `sfb run` inside libfabric's fi_getinfo: its destructor waits for its own
 * lock forever; one taken by OpenBLAS's thread while the launcher forks:
 * OpenBLAS's destructor waits for the fork's handler). Back to the default
 * here, for every command, before the fabric opens: libfabric's shm
 * provider then installs its own, which removes its shared-memory regions
 * and re-raises with the disposition it found (this one). An ignored
 * signal (nohup) stays ignored. */
static void default_signal_dispositions(void)
{
    static const int sigs[] = SFB_TAKEN_SIGNALS;
    for (size_t i = 0; i < SFB_ARRAY_LEN(sigs); i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) != 0) continue;
        if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sigs[i], &dfl, NULL);
    }
}

static int dispatch(int argc, char **argv)
{
    default_signal_dispositions();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") && argc >= 3) {
        /* `sfb help run`: as `sfb run --help` */
        const struct command *c = find(argv[2]);
        char *help[] = {argv[2], "--help", NULL};
        if (c) return c->run(2, help);
        cmd = argv[2];
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("sfb %s\n", sfb_version());
        return 0;
    }
    const struct command *c = cmd == argv[1] ? find(cmd) : NULL;
    if (c) return c->run(argc - 1, argv + 1);
    const char *words[SFB_ARRAY_LEN(commands) + 3] = {"help", "--help", "--version"};
    for (size_t i = 0; i < SFB_ARRAY_LEN(commands); i++) words[3 + i] = commands[i].name;
    const char *near = cli_closest_word(words, SFB_ARRAY_LEN(words), cmd);
    if (near)
        fprintf(stderr, "sfb: unknown command \"%s\"; did you mean %s?\n\n", cmd, near);
    else
        fprintf(stderr, "sfb: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return 2;
}

/* A worker forked by `sfb run` (sfb_launch_local_fork): what main() would
 * do with the worker command line. */
static int forked_worker(int argc, char **argv)
{
    return finish(dispatch(argc, argv));
}

/* OpenBLAS chose its kernels as it loaded, and on a processor it does not
 * know it chose its generic ones (sfb_blas_better_core): OPENBLAS_CORETYPE
 * names those the processor runs from here on, so every program `sfb launch`
 * starts and every process started later inherits it; a command about to
 * compute starts itself again to run them too (cli_blas_kernels). Not under
 * valgrind, whose child would run outside it. */
static void choose_blas_kernels(char **argv)
{
    const char *core = sfb_blas_better_core(), *preload = getenv("LD_PRELOAD");
    if (!core || (preload && strstr(preload, "vgpreload"))) return;
    cli_blas_generic = sfb_blas_core(); /* (before the variable is set: OpenBLAS's choice) */
    if (setenv("OPENBLAS_CORETYPE", core, 1)) cli_blas_generic = NULL;
    cli_main_argv = argv;
}

int main(int argc, char **argv)
{
    choose_blas_kernels(argv);
    cli_forked_worker = forked_worker;
    return finish(dispatch(argc, argv));
}
