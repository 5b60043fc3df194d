/* `sfb run` (P local workers) and `sfb worker` (one rank of a launched job):
 * both train through sfb_train_run. `sfb eval` is cmd_eval.c. */
#include "src/cli/cli.h"
#include "src/cli/optparse.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct progress_state {
    int tty;
    int quiet;
    int open_line; /* a \r line is on screen */
};

static void progress_print(void *user, const struct sfb_progress *p)
{
    struct progress_state *ps = user;
    if (ps->quiet || p->rank != 0) return;
    if (ps->tty) {
        fprintf(stderr, "\r\033[Kepoch %u  clock %llu/%llu  train loss %.4f  %.0f samples/s",
                p->epoch, (unsigned long long)p->clock, (unsigned long long)p->clocks,
                p->train_loss, p->samples_per_s);
        ps->open_line = 1;
        if (p->has_eval) {
            if (isfinite(p->test_accuracy))
                fprintf(stderr, "  test acc %.2f%% loss %.4f\n", 100 * p->test_accuracy,
                        p->test_loss);
            else
                fprintf(stderr, "  test loss %.4f\n", p->test_loss);
            ps->open_line = 0;
        } else if (p->done) {
            fputc('\n', stderr);
            ps->open_line = 0;
        }
    } else {
        fprintf(stderr, "epoch %u clock %llu/%llu train_loss %.4f samples/s %.0f", p->epoch,
                (unsigned long long)p->clock, (unsigned long long)p->clocks, p->train_loss,
                p->samples_per_s);
        if (p->has_eval && isfinite(p->test_accuracy))
            fprintf(stderr, " test_accuracy %.2f%% test_loss %.4f", 100 * p->test_accuracy,
                    p->test_loss);
        else if (p->has_eval)
            fprintf(stderr, " test_loss %.4f", p->test_loss);
        fputc('\n', stderr);
    }
    fflush(stderr);
}

/* Prints a path pattern as rank 0's path ("%r" → "0"). */
static void print_path(const char *label, const char *pattern)
{
    const char *r = strstr(pattern, "%r");
    if (r)
        printf("%s %.*s0%s\n", label, (int)(r - pattern), pattern, r + 2);
    else
        printf("%s %s\n", label, pattern);
}

/* Runs one worker in this process and prints where the results went. */
static int run_worker(struct cli_job *job)
{
    cli_log_init(job->log_level);
    /* the rank this worker will have, where the launcher says so already */
    int r = cli_prepare_outputs(job, "worker", job->env_rank, job->env_rank);
    if (r) return r;
    struct progress_state ps = {.tty = isatty(STDERR_FILENO), .quiet = job->quiet};
    struct sfb_train_result res = {.size = sizeof res};
    int ret = sfb_train_run(&job->train, progress_print, &ps, ps.tty ? 0.25 : 5.0, &res);
    if (ps.open_line) fputc('\n', stderr);
    if (ret) {
        cli_error(ret, "training failed");
        return ret == -SFB_EUSAGE ? 2 : 1;
    }
    if (res.rank == 0) {
        printf("trained %s on %s with %u worker%s: %llu clocks", job->train.model,
               job->train.data, res.world, res.world == 1 ? "" : "s",
               (unsigned long long)res.clocks);
        if (res.start_clock)
            printf(" (resumed at clock %llu, now at %llu)", (unsigned long long)res.start_clock,
                   (unsigned long long)(res.start_clock + res.clocks));
        printf(", %llu samples/worker in %.1f s", (unsigned long long)res.samples, res.wall);
        if (res.peak_rss_bytes)
            printf(", peak RSS %.1f MiB (rank 0)", (double)res.peak_rss_bytes / (1 << 20));
        putchar('\n');
        if (job->train.bandwidth > 0)
            printf("bandwidth budget %.4g Mbit/s per worker: it held rank 0's sends back "
                   "%.1f s of %.1f s; rank 0 waited %.1f s for peers, %.1f s of it while its "
                   "own sends waited for the budget%s\n",
                   8 * job->train.bandwidth / 1e6, res.budget_held_s, res.wall, res.wait_s,
                   res.budget_wait_s,
                   res.budget_held_s > 0.5 * res.wall ? " (the budget bound the run)" : "");
        if (isfinite(res.test_accuracy))
            printf("test accuracy %.2f%%, test loss %.4f\n", 100 * res.test_accuracy,
                   res.test_loss);
        else if (isfinite(res.test_loss))
            printf("test loss %.4f\n", res.test_loss);
        print_path("model:  ", job->train.model_out);
        print_path("metrics:", job->train.metrics_out);
    }
    return 0;
}

int cli_worker(int argc, char **argv)
{
    struct cli_job job;
    int r = cli_parse_job(argc, argv, "worker", 0, &job);
    if (r) return r == 1 ? 0 : r;
    cli_blas_kernels();
    cli_blas_reserve("worker"); /* forked by sfb run: done there already */
    return run_worker(&job);
}

int cli_run(int argc, char **argv)
{
    struct cli_job job;
    int r = cli_parse_job(argc, argv, "run", 1, &job);
    if (r) return r == 1 ? 0 : r;
    /* The workers are forks of this process: BLAS's working memory taken
     * here is theirs (each trainer sets its own thread count; this process
     * computes nothing). */
    cli_blas_kernels();
    cli_blas_reserve("run");
    sfb_set_blas_threads(1);
    /* once, here, rather than after P workers have started */
    if ((r = cli_prepare_outputs(&job, "run", 0, (unsigned)job.nprocs - 1))) return r;
    cli_log_init(job.log_level);
    char self[4096];
    if ((r = sfb_launch_self_path(self, sizeof self))) {
        cli_error(r, "cannot find the sfb executable");
        return 1;
    }
    char **wargv = cli_worker_argv(argc, argv, self);
    if (!wargv) return 1;
    r = sfb_launch_local_fork(job.nprocs, cli_forked_worker, wargv);
    cli_free_argv(wargv);
    return r ? cli_launch_failed(r, "job failed") : 0;
}
