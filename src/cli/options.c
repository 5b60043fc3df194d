/* Option parsing shared by `sfb run` and `sfb worker`. */
#include "src/cli/cli.h"
#include "src/cli/opt.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    OPT_MODEL = 256, OPT_DATA, OPT_TEST_DATA, OPT_INDEX_BASE, OPT_DIM, OPT_CLASSES, OPT_BATCH,
    OPT_EPOCHS, OPT_CLOCKS, OPT_LR, OPT_LR_SCHEDULE, OPT_LR_PERIOD, OPT_LR_DECAY, OPT_LAMBDA,
    OPT_SEED, OPT_THREADS, OPT_EVAL_EVERY, OPT_OUT_DIR, OPT_MODEL_OUT, OPT_METRICS_OUT,
    OPT_SYNC, OPT_STALENESS, OPT_TOPOLOGY, OPT_DEGREE, OPT_PROVIDER, OPT_CHECKPOINT_EVERY,
    OPT_RESUME, OPT_LOG_LEVEL, OPT_FLUSH, OPT_APPLY_EARLY, OPT_PEER_TIMEOUT, OPT_PROGRESS, OPT_DEBUG_DELAY,
    OPT_DEBUG_SLOW_RANK, OPT_DEBUG_SLOW_FACTOR, OPT_DATA_LAYOUT, OPT_RANK, OPT_KNN_K,
    OPT_DICT_SIZE, OPT_CODE_STEPS, OPT_SIMI_PAIRS, OPT_DIFF_PAIRS, OPT_PATCHES,
    OPT_CHECKPOINT_DIR,
};

static const struct cli_opt job_opts[] = {
    {"nprocs", 'n', 1, 'n'},
    {"model", 0, 1, OPT_MODEL},
    {"data", 0, 1, OPT_DATA},
    {"test-data", 0, 1, OPT_TEST_DATA},
    {"index-base", 0, 1, OPT_INDEX_BASE},
    {"data-layout", 0, 1, OPT_DATA_LAYOUT},
    {"dim", 0, 1, OPT_DIM},
    {"classes", 0, 1, OPT_CLASSES},
    {"batch", 0, 1, OPT_BATCH},
    {"epochs", 0, 1, OPT_EPOCHS},
    {"clocks", 0, 1, OPT_CLOCKS},
    {"lr", 0, 1, OPT_LR},
    {"lr-schedule", 0, 1, OPT_LR_SCHEDULE},
    {"lr-period", 0, 1, OPT_LR_PERIOD},
    {"lr-decay", 0, 1, OPT_LR_DECAY},
    {"lambda", 0, 1, OPT_LAMBDA},
    {"rank", 0, 1, OPT_RANK},
    {"knn-k", 0, 1, OPT_KNN_K},
    {"dict-size", 0, 1, OPT_DICT_SIZE},
    {"code-steps", 0, 1, OPT_CODE_STEPS},
    {"simi-pairs", 0, 1, OPT_SIMI_PAIRS},
    {"diff-pairs", 0, 1, OPT_DIFF_PAIRS},
    {"patches", 0, 1, OPT_PATCHES},
    {"seed", 0, 1, OPT_SEED},
    {"threads", 0, 1, OPT_THREADS},
    {"eval-every", 0, 1, OPT_EVAL_EVERY},
    {"out-dir", 0, 1, OPT_OUT_DIR},
    {"model-out", 0, 1, OPT_MODEL_OUT},
    {"metrics-out", 0, 1, OPT_METRICS_OUT},
    {"sync", 0, 1, OPT_SYNC},
    {"staleness", 0, 1, OPT_STALENESS},
    {"topology", 0, 1, OPT_TOPOLOGY},
    {"degree", 0, 1, OPT_DEGREE},
    {"flush", 0, 1, OPT_FLUSH},
    {"provider", 0, 1, OPT_PROVIDER},
    {"apply-early", 0, 1, OPT_APPLY_EARLY},
    {"peer-timeout", 0, 1, OPT_PEER_TIMEOUT},
    {"progress", 0, 1, OPT_PROGRESS},
    {"debug-delay-ms", 0, 1, OPT_DEBUG_DELAY},
    {"debug-slow-rank", 0, 1, OPT_DEBUG_SLOW_RANK},
    {"debug-slow-factor", 0, 1, OPT_DEBUG_SLOW_FACTOR},
    {"checkpoint-every", 0, 1, OPT_CHECKPOINT_EVERY},
    {"resume", 0, 1, OPT_RESUME},
    {"checkpoint-dir", 0, 1, OPT_CHECKPOINT_DIR},
    {"log-level", 0, 1, OPT_LOG_LEVEL},
    {"quiet", 'q', 0, 'q'},
    {"verbose", 'v', 0, 'v'},
    {"help", 'h', 0, 'h'},
    {0, 0, 0, 0},
};

static void job_help(FILE *f, const char *cmd, int with_n)
{
    if (with_n)
        fprintf(f, "usage: sfb run -n P [options]\n\n"
                   "Starts P workers on this machine (shared-memory transport) and trains.\n"
                   "Each line of worker output is prefixed with its rank.\n\n"
                   "  -n, --nprocs P         number of local workers (default 1)\n");
    else
        fprintf(f, "usage: sfb worker [options]\n\n"
                   "One worker of a job. Started by a launcher: `mpirun -n P sfb worker ...`,\n"
                   "`srun --mpi=pmix sfb worker ...`, or with SFB_RANK, SFB_WORLD_SIZE,\n"
                   "SFB_RENDEZVOUS=host:port and SFB_JOB_KEY set (see README). Without any\n"
                   "of these it runs as a job of one worker, with a warning that says so.\n\n");
    fprintf(f,
            "model and data:\n"
            "  --model NAME           model: %s (default mlr)\n"
            "  --data NAME            fashion-mnist | synth:k=..,d=..,n=..,density=..,seed=..\n"
            "                         | FILE.libsvm | IDX directory (default fashion-mnist)\n"
            "  --test-data FILE       held-out set (libsvm, or IDX images file)\n"
            "  --index-base auto|0|1  libsvm feature index base (default auto)\n"
            "  --data-layout auto|dense|sparse  feature storage (default: as loaded)\n"
            "  --dim D                libsvm feature dimension (default: inferred)\n"
            "  --classes K            number of classes (default: inferred)\n"
            "  --lambda L             regularizer: mlr L2 (default 0), dml hinge weight\n"
            "                         (default 30), sc L1 weight (default 0.1)\n"
            "  --rank K               dml: projection dimension (default 64)\n"
            "  --knn-k K              dml: neighbours of the k-NN evaluation (default 5)\n"
            "  --simi-pairs FILE      dml: similar pairs, lines \"i j\" (default: sampled\n"
            "  --diff-pairs FILE      from the labels by seed)\n"
            "  --dict-size K          sc: dictionary atoms (default 128)\n"
            "  --code-steps N         sc: FISTA steps per code (default 20)\n"
            "  --patches P            train on PxP patches of square images (e.g. 8)\n"
            "training:\n"
            "  --batch S              samples per worker per clock (default 32/P: a\n"
            "                         global minibatch of 32 samples)\n"
            "  --epochs E             passes over the data (default 10)\n"
            "  --clocks T             run exactly T clocks instead of --epochs\n"
            "  --lr ETA               step size per global minibatch (default 1.0; dml 0.01)\n"
            "  --lr-schedule NAME     constant | invsqrt | step (default invsqrt:\n"
            "                         eta/sqrt(1+t/T))\n"
            "  --lr-period T          schedule period in clocks (default: 1%% of an epoch)\n"
            "  --lr-decay F           factor per period for step (default 0.5)\n"
            "  --seed N               data order and initialisation (default 1)\n"
            "  --threads N            OpenBLAS threads per worker (default 1)\n"
            "  --eval-every E         test-set evaluation every E epochs (default 1; 0 = end)\n"
            "synchronization:\n"
            "  --sync sfb|fms         sufficient factors (default) or full matrices\n"
            "  --staleness S          SSP bound; 0 = BSP, -1 = asynchronous (default 0)\n"
            "  --topology NAME        full | halton | halton-classic (default full)\n"
            "  --degree Q             overlay out-degree (default ceil(log2 P))\n"
            "  --flush eager|clock    overlay forwarding (default eager)\n"
            "  --apply-early auto|on|off  apply peers' updates as soon as they arrive,\n"
            "                         before SSP requires them (auto: on unless BSP)\n"
            "  --provider NAME        libfabric provider: shm, tcp, verbs, ... (default:\n"
            "                         FI_PROVIDER, else shm on one host, tcp across hosts)\n"
            "  --peer-timeout SEC     a silent peer has failed after SEC seconds (default 5)\n"
            "  --progress auto|spin|block  how a rank waits for messages: spin (poll,\n"
            "                         lowest latency) or block (sleep until woken; for\n"
            "                         more ranks than cores); auto: block when the host\n"
            "                         runs more ranks than it has CPUs (default auto)\n",
            sfb_model_names());
    fprintf(f,
            "debugging:\n"
            "  --debug-delay-ms MS    add a random delay in [0, MS] ms to every clock\n"
            "  --debug-slow-rank R    make rank R compute --debug-slow-factor times slower\n"
            "  --debug-slow-factor F  (default 1)\n"
            "outputs:\n"
            "  --out-dir DIR          model and metrics directory (default sfb-out)\n"
            "  --model-out FILE       model file (default DIR/model.sfb)\n"
            "  --metrics-out PATTERN  JSON-lines metrics, %%r = rank (required with\n"
            "                         more than one worker; default DIR/metrics.%%r.jsonl)\n"
            "checkpoints:\n"
            "  --checkpoint-every N   every N clocks each worker writes a checkpoint\n"
            "                         (all drained to the same clock, files checksummed)\n"
            "  --checkpoint-dir DIR   where (default: the --resume DIR, else sfb-ckpt);\n"
            "                         a fresh run refuses a DIR holding checkpoints\n"
            "  --resume DIR           continue from the newest checkpoint valid on every\n"
            "                         rank (same settings and -n; --clocks/--epochs may grow)\n"
            "  -q, --quiet            no progress output\n"
            "  -v, --verbose          debug logging (same as --log-level debug)\n"
            "  --log-level LEVEL      error | warn | info | debug (default info)\n"
            "  -h, --help             this help\n"
            "Options are matched by their full names only. Output directories are\n"
            "checked writable before training starts.\n");
    (void)cmd;
}

static int bad(const char *cmd, const char *opt, const char *val, const char *want)
{
    fprintf(stderr, "sfb %s: %s: \"%s\" is not %s\n", cmd, opt, val, want);
    return 2;
}

static int parse_long(const char *s, long min, long max, long *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int cli_parse_job(int argc, char **argv, const char *cmd, int with_n, struct cli_job *job)
{
    memset(job, 0, sizeof *job);
    sfb_train_default_settings(&job->train);
    job->nprocs = 1;
    job->out_dir = "sfb-out";
    job->sync = "sfb";
    job->staleness = 0;
    job->topology = "full";
    job->log_level = SFB_LOG_INFO;
    struct sfb_train_settings *t = &job->train;
    int have_epochs = 0, have_clocks = 0, have_flush = 0;
    uint64_t u;
    long l;
    double d;

    struct cli_optparse p;
    cli_opt_init(&p, argc, argv, cmd);
    int c;
    while ((c = cli_opt_next(&p, job_opts)) > 0) {
        const char *v = p.arg;
        switch (c) {
        case 'n':
            if (!with_n) {
                fprintf(stderr, "sfb %s: -n is an option of `sfb run`; the launcher sets the "
                                "world size of `sfb worker`\n", cmd);
                return 2;
            }
            if (cli_parse_u64(v, 1, 4096, &u)) return bad(cmd, "-n", v, "an integer in 1..4096");
            job->nprocs = (int)u;
            break;
        case OPT_MODEL:
            if (!sfb_model_find(v)) {
                fprintf(stderr, "sfb %s: --model: unknown model \"%s\" (known: %s)\n", cmd,
                        v, sfb_model_names());
                return 2;
            }
            t->model = v;
            break;
        case OPT_DATA: t->data = v; break;
        case OPT_TEST_DATA: t->test_data = v; break;
        case OPT_INDEX_BASE:
            if (!strcmp(v, "auto")) t->libsvm.index_base = SFB_INDEX_AUTO;
            else if (!strcmp(v, "0")) t->libsvm.index_base = SFB_INDEX_0;
            else if (!strcmp(v, "1")) t->libsvm.index_base = SFB_INDEX_1;
            else return bad(cmd, p.spelled, v, "auto, 0 or 1");
            break;
        case OPT_DATA_LAYOUT:
            if (!strcmp(v, "auto")) t->layout = SFB_LAYOUT_AUTO;
            else if (!strcmp(v, "dense")) t->layout = SFB_LAYOUT_DENSE;
            else if (!strcmp(v, "sparse")) t->layout = SFB_LAYOUT_SPARSE;
            else return bad(cmd, p.spelled, v, "auto, dense or sparse");
            break;
        case OPT_DIM:
            if (cli_parse_u64(v, 1, UINT32_MAX - 1, &u)) return bad(cmd, p.spelled, v, "a positive integer");
            t->libsvm.dim = (uint32_t)u;
            break;
        case OPT_CLASSES:
            if (cli_parse_u64(v, 2, 1u << 24, &u)) return bad(cmd, p.spelled, v, "an integer >= 2");
            t->libsvm.classes = (uint32_t)u;
            break;
        case OPT_BATCH:
            if (cli_parse_u64(v, 1, 1u << 20, &u)) return bad(cmd, p.spelled, v, "an integer in 1..1048576");
            t->batch = (uint32_t)u;
            break;
        case OPT_EPOCHS:
            if (cli_parse_u64(v, 1, 1u << 20, &u)) return bad(cmd, p.spelled, v, "a positive integer");
            t->epochs = (uint32_t)u;
            have_epochs = 1;
            break;
        case OPT_CLOCKS:
            if (cli_parse_u64(v, 1, UINT64_MAX >> 2, &u)) return bad(cmd, p.spelled, v, "a positive integer");
            t->clocks = u;
            have_clocks = 1;
            break;
        case OPT_LR:
            if (cli_parse_double(v, &d) || !(d > 0)) return bad(cmd, p.spelled, v, "a positive number");
            t->lr = d;
            break;
        case OPT_LR_SCHEDULE:
            if (!strcmp(v, "constant")) t->lr_schedule = SFB_LR_CONSTANT;
            else if (!strcmp(v, "invsqrt")) t->lr_schedule = SFB_LR_INVSQRT;
            else if (!strcmp(v, "step")) t->lr_schedule = SFB_LR_STEP;
            else return bad(cmd, p.spelled, v, "constant, invsqrt or step");
            break;
        case OPT_LR_PERIOD:
            if (cli_parse_u64(v, 1, UINT64_MAX >> 2, &u)) return bad(cmd, p.spelled, v, "a positive integer");
            t->lr_period = u;
            break;
        case OPT_LR_DECAY:
            if (cli_parse_double(v, &d) || !(d > 0 && d <= 1)) return bad(cmd, p.spelled, v, "a number in (0, 1]");
            t->lr_decay = d;
            break;
        case OPT_LAMBDA:
            if (cli_parse_double(v, &d) || d < 0) return bad(cmd, p.spelled, v, "a number >= 0");
            t->lambda = d;
            break;
        case OPT_RANK:
        case OPT_KNN_K:
        case OPT_DICT_SIZE:
        case OPT_CODE_STEPS:
        case OPT_PATCHES:
            if (cli_parse_u64(v, 1, 1u << 20, &u)) return bad(cmd, p.spelled, v, "a positive integer");
            if (c == OPT_RANK) t->rank = (uint32_t)u;
            else if (c == OPT_KNN_K) t->knn_k = (uint32_t)u;
            else if (c == OPT_DICT_SIZE) t->dict_size = (uint32_t)u;
            else if (c == OPT_CODE_STEPS) t->code_steps = (uint32_t)u;
            else t->patch = (uint32_t)u;
            break;
        case OPT_SIMI_PAIRS: t->simi_pairs = v; break;
        case OPT_DIFF_PAIRS: t->diff_pairs = v; break;
        case OPT_SEED:
            if (cli_parse_u64(v, 0, UINT64_MAX, &u)) return bad(cmd, p.spelled, v, "a non-negative integer");
            t->seed = u;
            break;
        case OPT_THREADS:
            if (cli_parse_u64(v, 1, 1024, &u)) return bad(cmd, p.spelled, v, "an integer in 1..1024");
            t->threads = (int)u;
            break;
        case OPT_EVAL_EVERY:
            if (cli_parse_u64(v, 0, 1u << 20, &u)) return bad(cmd, p.spelled, v, "a non-negative integer");
            t->eval_every = (uint32_t)u;
            break;
        case OPT_OUT_DIR: job->out_dir = v; break;
        case OPT_MODEL_OUT: t->model_out = v; break;
        case OPT_METRICS_OUT: t->metrics_out = v; break;
        case OPT_SYNC:
            if (strcmp(v, "sfb") && strcmp(v, "fms")) return bad(cmd, p.spelled, v, "sfb or fms");
            job->sync = v;
            t->sync = v;
            break;
        case OPT_STALENESS:
            if (parse_long(v, -1, 1000000, &l)) return bad(cmd, p.spelled, v, "an integer >= -1");
            job->staleness = l;
            t->staleness = l;
            break;
        case OPT_TOPOLOGY:
            if (strcmp(v, "full") && strcmp(v, "halton") && strcmp(v, "halton-classic"))
                return bad(cmd, p.spelled, v, "full, halton or halton-classic");
            job->topology = v;
            t->topology = v;
            break;
        case OPT_DEGREE:
            if (cli_parse_u64(v, 1, 64, &u)) return bad(cmd, p.spelled, v, "an integer in 1..64");
            job->degree = (int)u;
            t->degree = (uint32_t)u;
            break;
        case OPT_FLUSH:
            if (strcmp(v, "eager") && strcmp(v, "clock")) return bad(cmd, p.spelled, v, "eager or clock");
            t->flush_clock = strcmp(v, "clock") == 0;
            have_flush = 1;
            break;
        case OPT_PROVIDER: job->provider = v; t->provider = v; break;
        case OPT_APPLY_EARLY:
            if (!strcmp(v, "auto")) t->apply_early = -1;
            else if (!strcmp(v, "on")) t->apply_early = 1;
            else if (!strcmp(v, "off")) t->apply_early = 0;
            else return bad(cmd, p.spelled, v, "auto, on or off");
            break;
        case OPT_PEER_TIMEOUT:
            if (cli_parse_double(v, &d) || !(d > 0)) return bad(cmd, p.spelled, v, "a positive number of seconds");
            t->peer_timeout = d;
            break;
        case OPT_PROGRESS:
            if (strcmp(v, "auto") && strcmp(v, "spin") && strcmp(v, "block"))
                return bad(cmd, p.spelled, v, "auto, spin or block");
            t->progress = v;
            break;
        case OPT_DEBUG_DELAY:
            if (cli_parse_double(v, &d) || d < 0) return bad(cmd, p.spelled, v, "a number >= 0");
            t->debug_delay_ms = d;
            break;
        case OPT_DEBUG_SLOW_RANK:
            if (parse_long(v, 0, 1 << 24, &l)) return bad(cmd, p.spelled, v, "a rank");
            t->debug_slow_rank = (int)l;
            break;
        case OPT_DEBUG_SLOW_FACTOR:
            if (cli_parse_double(v, &d) || d < 1) return bad(cmd, p.spelled, v, "a number >= 1");
            t->debug_slow_factor = d;
            break;
        case OPT_CHECKPOINT_EVERY:
            if (cli_parse_u64(v, 1, UINT64_MAX >> 2, &u)) return bad(cmd, p.spelled, v, "a positive number of clocks");
            t->checkpoint_every = u;
            break;
        case OPT_CHECKPOINT_DIR:
            if (!*v) return bad(cmd, p.spelled, v, "a directory");
            t->checkpoint_dir = v;
            break;
        case OPT_RESUME:
            if (!*v) return bad(cmd, p.spelled, v, "a directory");
            t->resume_dir = v;
            break;
        case OPT_LOG_LEVEL:
            if (!strcmp(v, "error")) job->log_level = SFB_LOG_ERROR;
            else if (!strcmp(v, "warn")) job->log_level = SFB_LOG_WARN;
            else if (!strcmp(v, "info")) job->log_level = SFB_LOG_INFO;
            else if (!strcmp(v, "debug")) job->log_level = SFB_LOG_DEBUG;
            else return bad(cmd, p.spelled, v, "error, warn, info or debug");
            break;
        case 'q': job->quiet = 1; break;
        case 'v': job->log_level = SFB_LOG_DEBUG; break;
        case 'h':
            job_help(stdout, cmd, with_n);
            return 1;
        }
    }
    if (c == CLI_OPT_ERR) return 2;
    if (have_epochs && have_clocks) {
        fprintf(stderr, "sfb %s: --epochs and --clocks contradict each other: give one\n", cmd);
        return 2;
    }
    /* --flush eager given explicitly: the settings cannot tell it from the default */
    if (have_flush && !strcmp(job->topology, "full")) {
        fprintf(stderr, "sfb %s: --flush applies to an overlay; add --topology halton\n", cmd);
        return 2;
    }
    uint32_t world = cli_known_world(job, with_n);
    if (sfb_train_check_settings(t, world)) {
        fprintf(stderr, "sfb %s: %s\n", cmd, sfb_last_error());
        return 2;
    }
    return cli_paths_build(job, cmd, world);
}

uint32_t cli_known_world(const struct cli_job *job, int with_n)
{
    if (with_n) return (uint32_t)job->nprocs;
    const char *rank = getenv("SFB_RANK"), *size = getenv("SFB_WORLD_SIZE");
    uint64_t u;
    if (rank && size && !cli_parse_u64(size, 1, UINT32_MAX, &u)) return (uint32_t)u;
    return 0;
}
