/* What the subcommands share (src/cli/cli.h): the log sink, the error
 * line, BLAS's working memory, and the entry a forked worker runs. Below the
 * subcommands and main.c, so none of them calls back into another. */
#include "src/cli/cli.h"

#include <stdio.h>
#include <unistd.h>

int (*cli_forked_worker)(int argc, char **argv);

void cli_log_init(enum sfb_log_level level)
{
    sfb_log_set(sfb_log_stderr, NULL, level);
}

void cli_error(int code, const char *what)
{
    fprintf(stderr, "sfb: error: %s: %s\n", what, sfb_error_message(code));
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
