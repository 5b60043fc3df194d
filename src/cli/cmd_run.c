/* `sfb worker`, `sfb run` and `sfb eval`. */
#include "src/cli/cli.h"
#include "src/cli/opt.h"

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
    if (r) {
        cli_error(r, "job failed");
        /* interrupted: the shell's convention for a death by that signal */
        int sig = sfb_launch_stop_signal();
        return sig ? 128 + sig : sfb_launch_failed_exit() == 2 ? 2 : 1;
    }
    return 0;
}

/* `sfb eval`'s options. */
struct eval_opts {
    const char *model_file, *data, *test_data, *split;
    uint32_t patches;
    struct sfb_libsvm_settings ls;
};

#define EV(field) .off = offsetof(struct eval_opts, field), .size = sizeof(((struct eval_opts *)0)->field)

static const int eval_index_bases[] = {SFB_INDEX_AUTO, SFB_INDEX_0, SFB_INDEX_1};

static const struct cli_opt eval_table[] = {
    {.kind = CLI_STR, .name = "model-file", EV(model_file), "FILE",
     "model written by sfb run/worker (required)"},
    {.kind = CLI_STR, .name = "data", EV(data), "NAME",
     "fashion-mnist | synth:... | FILE.libsvm | IDX dir"},
    {.kind = CLI_STR, .name = "test-data", EV(test_data), "FILE", "evaluate on this file instead"},
    {.kind = CLI_CHOICE, .name = "split", EV(split), "test|train",
     "which part of NAME (default test where NAME has\none, else the data itself)",
     .choices = "test|train"},
    {.kind = CLI_ENUM, .name = "index-base", EV(ls.index_base), "auto|0|1",
     "libsvm feature index base (default auto)", .choices = "auto|0|1",
     .values = eval_index_bases},
    {.kind = CLI_UINT, .name = "patches", EV(patches), "P",
     "evaluate on PxP patches (models trained with\n--patches)", .umin = 1, .umax = 4096,
     .want = "a positive integer"},
    {.kind = CLI_HELP, .name = "help", .short_name = 'h', .size = 0, NULL, "this help"},
    {.kind = CLI_END},
};

/* Options into *o: 0, 1 (help printed) or 2 (usage error printed). */
static int eval_parse(int argc, char **argv, struct eval_opts *o)
{
    memset(o, 0, sizeof *o);
    sfb_libsvm_default_settings(&o->ls);
    struct cli_optparse p;
    cli_opt_init(&p, argc, argv, "eval");
    int r = cli_opt_parse(&p, eval_table, o, NULL);
    if (r == CLI_OPT_HELP) {
        printf("usage: sfb eval --model-file FILE --data NAME [options]\n\n"
               "Evaluates a saved model: prints mean loss and accuracy, and the\n"
               "model's own measures (k-NN accuracy, reconstruction error, ...).\n\n");
        cli_opt_help(stdout, eval_table);
        return 1;
    }
    if (r) return r;
    if (!o->model_file || !o->data) {
        fprintf(stderr, "sfb eval: --model-file and --data are required (see sfb eval --help)\n");
        return 2;
    }
    return 0;
}

/* The data set to evaluate on, loaded into *train / *test; *ds points at
 * the one chosen. 0, 1 (error printed) or 2 (usage). */
static int eval_data(const struct eval_opts *o, const struct sfb_model_settings *ms,
                     struct sfb_dataset *train, struct sfb_dataset *test,
                     struct sfb_dataset **ds)
{
    struct sfb_libsvm_settings ls = o->ls;
    if (!o->patches) {
        ls.dim = ms->d;
        ls.classes = ms->k;
    }
    int ret = sfb_data_load(o->data, o->test_data, &ls, train, test);
    if (ret) {
        cli_error(ret, "cannot load data");
        return 1;
    }
    int use_test = test->n > 0 && !(o->split && !strcmp(o->split, "train"));
    if (o->split && !strcmp(o->split, "test") && test->n == 0) {
        fprintf(stderr, "sfb eval: %s has no test split; use --test-data or --split train\n",
                o->data);
        return 2;
    }
    *ds = use_test ? test : train;
    if (o->patches) {
        struct sfb_patch_settings pset;
        sfb_patch_default_settings(&pset);
        pset.p = o->patches;
        pset.max_patches = 20000;
        struct sfb_dataset pd = {0};
        if ((ret = sfb_data_patches(*ds, &pset, &pd))) {
            cli_error(ret, "cannot cut patches");
            return 1;
        }
        sfb_dataset_free(*ds);
        **ds = pd;
    }
    if ((*ds)->d != ms->d) {
        fprintf(stderr, "sfb eval: %s has %u features, the model was trained on %u\n", o->data,
                (*ds)->d, ms->d);
        return 1;
    }
    return 0;
}

static void eval_print(const struct eval_opts *o, struct sfb_model *m, int64_t clock,
                       int use_test, int has_test, const struct sfb_eval *ev)
{
    const struct sfb_model_settings *ms = sfb_model_get_settings(m);
    printf("model %s (%s, %u features, %u classes, clock %lld)\n", o->model_file, ms->kind, ms->d,
           ms->k, (long long)clock);
    /* Name what was evaluated: a data set given as one file has no split. */
    if (use_test && o->test_data)
        printf("%s: %llu samples  loss %.6f", o->test_data, (unsigned long long)ev->n, ev->loss);
    else if (use_test || has_test)
        printf("%s split of %s: %llu samples  loss %.6f", use_test ? "test" : "train", o->data,
               (unsigned long long)ev->n, ev->loss);
    else
        printf("%s: %llu samples  loss %.6f", o->data, (unsigned long long)ev->n, ev->loss);
    if (isfinite(ev->accuracy)) printf("  accuracy %.2f%%", 100 * ev->accuracy);
    printf("\n");
    const struct sfb_model_ops *ops = sfb_model_get_ops(m);
    char text[1024];
    if (ops->eval_text && ops->eval_text(ev, text, sizeof text) > 0) fputs(text, stdout);
}

int cli_eval(int argc, char **argv)
{
    struct eval_opts o;
    int ret = eval_parse(argc, argv, &o);
    if (ret) return ret == 1 ? 0 : ret;
    cli_log_init(SFB_LOG_WARN);
    cli_blas_reserve("eval");
    struct sfb_model *m = NULL;
    int64_t clock = 0;
    if ((ret = sfb_model_load(&m, o.model_file, &clock))) {
        cli_error(ret, "cannot load model");
        return 1;
    }
    struct sfb_dataset train = {0}, test = {0}, *ds = NULL;
    ret = eval_data(&o, sfb_model_get_settings(m), &train, &test, &ds);
    struct sfb_eval ev = {.size = sizeof ev};
    if (!ret && (ret = sfb_model_evaluate(m, ds, &ev))) {
        cli_error(ret, "evaluation failed");
        ret = 1;
    }
    if (!ret) eval_print(&o, m, clock, ds == &test, test.n > 0, &ev);
    sfb_dataset_free(&train);
    sfb_dataset_free(&test);
    sfb_model_close(&m);
    return ret;
}
