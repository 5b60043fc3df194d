/* `sfb worker`, `sfb run` and `sfb eval`. */
#include "src/cli/cli.h"
#include "src/cli/opt.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *level_name[] = {"error", "warning", "info", "debug"};

static void log_stderr(void *user, enum sfb_log_level level, int rank, const char *msg)
{
    (void)user;
    if (rank >= 0)
        fprintf(stderr, "sfb[%d]: %s: %s\n", rank, level_name[level], msg);
    else
        fprintf(stderr, "sfb: %s: %s\n", level_name[level], msg);
}

void cli_log_init(enum sfb_log_level level)
{
    sfb_log_set(log_stderr, NULL, level);
}

void cli_error(int code, const char *what)
{
    fprintf(stderr, "sfb: error: %s: %s\n", what, sfb_error_message(code));
}

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

/* A worker stopped by a signal must die by it, so that its launcher (sfb
 * run, mpirun, a batch system) reports the signal. Libraries loaded with
 * libfabric (libpsm2, libinfinipath) install handlers in their
 * constructors, before main, that print a backtrace and exit(1) instead;
 * back to the default here, before the fabric opens: libfabric's shm
 * provider then installs its own, which removes its shared-memory regions
 * and re-raises with the disposition it found (this one). An ignored
 * signal (nohup) stays ignored. */
static void default_signal_dispositions(void)
{
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGSEGV,
                               SIGBUS,  SIGILL, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
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

/* Runs one worker in this process and prints where the results went. */
static int run_worker(struct cli_job *job)
{
    default_signal_dispositions();
    cli_log_init(job->log_level);
    /* the rank this worker will have, where the launcher says so already */
    const char *rs = getenv("SFB_RANK");
    unsigned rank = rs && cli_known_world(job, 0) ? (unsigned)strtoul(rs, NULL, 10) : 0;
    int r = cli_prepare_outputs(job, "worker", rank, rank);
    if (r) return r;
    struct progress_state ps = {.tty = isatty(STDERR_FILENO), .quiet = job->quiet};
    struct sfb_train_result res;
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
    return run_worker(&job);
}

/* The worker command line: our own executable, "worker", and every option
 * of `sfb run` except -n. */
static char **worker_argv(int argc, char **argv, char *self)
{
    char **out = calloc((size_t)argc + 2, sizeof *out);
    if (!out) return NULL;
    int n = 0;
    out[n++] = self;
    out[n++] = "worker";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-n") || !strcmp(a, "--nprocs")) {
            i++;
            continue;
        }
        if (!strncmp(a, "--nprocs=", 9) || (!strncmp(a, "-n", 2) && a[2] != '\0')) continue;
        if (!strcmp(a, "--")) break;
        out[n++] = argv[i];
    }
    out[n] = NULL;
    return out;
}

int cli_run(int argc, char **argv)
{
    /* getopt permutes argv: parse a copy, keep the original for the workers */
    char **copy = calloc((size_t)argc + 1, sizeof *copy);
    if (!copy) return 1;
    memcpy(copy, argv, sizeof *copy * (size_t)argc);
    struct cli_job job;
    int r = cli_parse_job(argc, copy, "run", 1, &job);
    free(copy);
    if (r) return r == 1 ? 0 : r;
    /* once, here, rather than after P workers have started */
    if ((r = cli_prepare_outputs(&job, "run", 0, (unsigned)job.nprocs - 1))) return r;
    cli_log_init(job.log_level);
    char self[4096];
    if ((r = sfb_launch_self_path(self, sizeof self))) {
        cli_error(r, "cannot find the sfb executable");
        return 1;
    }
    char **wargv = worker_argv(argc, argv, self);
    if (!wargv) return 1;
    r = sfb_launch_local_fork(job.nprocs, cli_forked_worker, wargv);
    free(wargv);
    if (r) {
        cli_error(r, "job failed");
        /* interrupted: the shell's convention for a death by that signal */
        int sig = sfb_launch_stop_signal();
        return sig ? 128 + sig : 1;
    }
    return 0;
}

static void eval_help(FILE *f)
{
    fprintf(f, "usage: sfb eval --model-file FILE --data NAME [options]\n\n"
               "Evaluates a saved model: prints mean loss and accuracy.\n\n"
               "  --model-file FILE      model written by sfb run/worker (required)\n"
               "  --data NAME            fashion-mnist | synth:... | FILE.libsvm | IDX dir\n"
               "  --test-data FILE       evaluate on this file instead\n"
               "  --split test|train     which part of NAME (default test where NAME has\n"
               "                         one, else the data itself)\n"
               "  --index-base auto|0|1  libsvm feature index base (default auto)\n"
               "  --patches P            evaluate on PxP patches (models trained with\n"
               "                         --patches)\n"
               "  -h, --help             this help\n");
}

enum { EV_MODEL_FILE = 1, EV_DATA, EV_TEST_DATA, EV_SPLIT, EV_PATCHES, EV_INDEX_BASE, EV_HELP };

static const struct cli_opt eval_opts[] = {
    {"model-file", 0, 1, EV_MODEL_FILE},
    {"data", 0, 1, EV_DATA},
    {"test-data", 0, 1, EV_TEST_DATA},
    {"split", 0, 1, EV_SPLIT},
    {"patches", 0, 1, EV_PATCHES},
    {"index-base", 0, 1, EV_INDEX_BASE},
    {"help", 'h', 0, EV_HELP},
    {0, 0, 0, 0},
};

int cli_eval(int argc, char **argv)
{
    const char *model_file = NULL, *data = NULL, *test_data = NULL, *split = NULL;
    const char *patches = NULL;
    struct sfb_libsvm_settings ls;
    sfb_libsvm_default_settings(&ls);
    struct cli_optparse op;
    cli_opt_init(&op, argc, argv, "eval");
    int c;
    while ((c = cli_opt_next(&op, eval_opts)) > 0) {
        const char *v = op.arg;
        switch (c) {
        case EV_HELP: eval_help(stdout); return 0;
        case EV_MODEL_FILE: model_file = v; break;
        case EV_DATA: data = v; break;
        case EV_TEST_DATA: test_data = v; break;
        case EV_SPLIT: split = v; break;
        case EV_PATCHES: patches = v; break;
        case EV_INDEX_BASE:
            if (!strcmp(v, "auto")) ls.index_base = SFB_INDEX_AUTO;
            else if (!strcmp(v, "0")) ls.index_base = SFB_INDEX_0;
            else if (!strcmp(v, "1")) ls.index_base = SFB_INDEX_1;
            else {
                fprintf(stderr, "sfb eval: --index-base: \"%s\" is not auto, 0 or 1\n", v);
                return 2;
            }
            break;
        }
    }
    if (c == CLI_OPT_ERR) return 2;
    if (!model_file || !data) {
        fprintf(stderr, "sfb eval: --model-file and --data are required (see sfb eval --help)\n");
        return 2;
    }
    if (split && strcmp(split, "test") && strcmp(split, "train")) {
        fprintf(stderr, "sfb eval: --split: \"%s\" is not test or train\n", split);
        return 2;
    }
    cli_log_init(SFB_LOG_WARN);
    struct sfb_model *m = NULL;
    int64_t clock = 0;
    int ret = sfb_model_load(&m, model_file, &clock);
    if (ret) {
        cli_error(ret, "cannot load model");
        return 1;
    }
    const struct sfb_model_settings *ms = sfb_model_get_settings(m);
    if (!patches) {
        ls.dim = ms->d;
        ls.classes = ms->k;
    }
    struct sfb_dataset train = {0}, test = {0};
    ret = sfb_data_load(data, test_data, &ls, &train, &test);
    if (ret) {
        cli_error(ret, "cannot load data");
        sfb_model_close(&m);
        return 1;
    }
    int use_test = test.n > 0 && !(split && !strcmp(split, "train"));
    if (split && !strcmp(split, "test") && test.n == 0) {
        fprintf(stderr, "sfb eval: %s has no test split; use --test-data or --split train\n",
                data);
        ret = 2;
        goto out;
    }
    struct sfb_dataset *ds = use_test ? &test : &train;
    if (patches) {
        char *end;
        unsigned long p = strtoul(patches, &end, 10);
        if (*end || p == 0 || p > 4096) {
            fprintf(stderr, "sfb eval: --patches: \"%s\" is not a positive integer\n", patches);
            ret = 2;
            goto out;
        }
        struct sfb_patch_settings pset;
        sfb_patch_default_settings(&pset);
        pset.p = (uint32_t)p;
        pset.max_patches = 20000;
        struct sfb_dataset pd = {0};
        if ((ret = sfb_data_patches(ds, &pset, &pd))) {
            cli_error(ret, "cannot cut patches");
            ret = 1;
            goto out;
        }
        sfb_dataset_free(ds);
        *ds = pd;
    }
    if (ds->d != ms->d) {
        fprintf(stderr, "sfb eval: %s has %u features, the model was trained on %u\n", data,
                ds->d, ms->d);
        ret = 1;
        goto out;
    }
    struct sfb_eval ev;
    ret = sfb_model_evaluate(m, ds, &ev);
    if (ret) {
        cli_error(ret, "evaluation failed");
        ret = 1;
        goto out;
    }
    printf("model %s (%s, %u features, %u classes, clock %lld)\n", model_file, ms->kind, ms->d,
           ms->k, (long long)clock);
    /* Name what was evaluated: a data set given as one file has no split. */
    if (use_test && test_data)
        printf("%s: %llu samples  loss %.6f", test_data, (unsigned long long)ev.n, ev.loss);
    else if (use_test || test.n > 0)
        printf("%s split of %s: %llu samples  loss %.6f", use_test ? "test" : "train", data,
               (unsigned long long)ev.n, ev.loss);
    else
        printf("%s: %llu samples  loss %.6f", data, (unsigned long long)ev.n, ev.loss);
    if (isfinite(ev.accuracy)) printf("  accuracy %.2f%%", 100 * ev.accuracy);
    printf("\n");
    if (isfinite(ev.knn_accuracy))
        printf("k-NN accuracy: learned metric %.2f%%, Euclidean %.2f%%\n",
               100 * ev.knn_accuracy, 100 * ev.knn_accuracy_euclid);
    if (isfinite(ev.recon_error))
        printf("reconstruction error %.4f, code sparsity %.2f%%\n", ev.recon_error,
               100 * ev.sparsity);
    if (isfinite(ev.recon_error_sparse))
        printf("reconstruction error at %u nonzeros per code (OMP) %.4f\n", ev.sparse_nonzeros,
               ev.recon_error_sparse);
    ret = 0;
out:
    sfb_dataset_free(&train);
    sfb_dataset_free(&test);
    sfb_model_close(&m);
    return ret;
}
