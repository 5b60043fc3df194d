/* What the subcommands share (src/cli/cli.h): the log sink, the error
 * line, BLAS's working memory, and the entry a forked worker runs. Below the
 * subcommands and main.c, so none of them calls back into another. */
#include "src/cli/cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int (*cli_forked_worker)(int argc, char **argv);
const char *cli_blas_generic;
char **cli_main_argv;

void cli_log_init(enum sfb_log_level level)
{
    sfb_log_set(sfb_log_stderr, NULL, level);
}

void cli_error(int code, const char *what)
{
    fprintf(stderr, "sfb: error: %s: %s\n", what, sfb_error_message(code));
}

int cli_launch_failed(int code, const char *what)
{
    cli_error(code, what);
    /* interrupted: the shell's convention for a death by that signal */
    int sig = sfb_launch_stop_signal();
    if (sig) return 128 + sig;
    /* 2: a copy exited 2, or the launch refused its settings before any
     * started (a bad SFB_JOB_KEY) */
    return sfb_launch_failed_exit() == 2 || code == -SFB_EUSAGE ? 2 : 1;
}

void cli_blas_kernels(void)
{
    if (!cli_blas_generic) return;
    char self[PATH_MAX];
    if (sfb_launch_self_path(self, sizeof self) || setenv("SFB_BLAS_FOUND", cli_blas_generic, 1))
        return;
    fflush(stdout);
    fflush(stderr);
    execv(self, cli_main_argv);
    unsetenv("SFB_BLAS_FOUND"); /* not started again: OpenBLAS's choice stays */
}

void cli_blas_reserve(const char *cmd)
{
    int ret = sfb_blas_reserve();
    if (!ret) return;
    fprintf(stderr, "sfb %s: error: %s\n", cmd, sfb_error_message(ret));
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}
