/* sfb — the training job: one worker's loop, configured by settings.
 *
 * sfb_train_run() is what `sfb worker` (and `sfb run`, in each child) calls:
 * it loads the data, shards it, builds the model replica, runs the clocks and
 * writes metrics and the model. Progress is reported through a callback;
 * warnings and errors go to the log sink (sfb_log_set: stderr by default). */
#ifndef SFB_TRAIN_H
#define SFB_TRAIN_H

#include <sfb/common.h>
#include <sfb/data.h>
#include <sfb/model.h>

#ifdef __cplusplus
extern "C" {
#endif

enum sfb_lr_schedule {
    SFB_LR_CONSTANT = 0, /* η_t = η₀ */
    SFB_LR_INVSQRT = 1,  /* η_t = η₀ / sqrt(1 + t / T), T = lr_period clocks */
                         /* (default T: 1 % of an epoch) */
    SFB_LR_STEP = 2,     /* η_t = η₀ · lr_decay^⌊t / T⌋ */
};

/* The version of struct sfb_train_settings (docs/api.md, "Versions of the
 * structures"): a later release that adds a field (in `reserved`, zero
 * meaning its default) raises it. */
#define SFB_TRAIN_SETTINGS_VERSION 1

/* A run's settings. Fill with sfb_train_default_settings, then set what you
 * need; `version` and `reserved` are the library's (an unknown version or a
 * reserved byte set is -SFB_EVERSION). Debugging knobs (an extra delay per
 * clock, one slowed rank) are not here: SFB_DEBUG_DELAY_MS,
 * SFB_DEBUG_SLOW_RANK and SFB_DEBUG_SLOW_FACTOR in the environment
 * (docs/environment.md; `sfb run --debug-*` sets them). */
struct sfb_train_settings {
    uint32_t version;      /* SFB_TRAIN_SETTINGS_VERSION */
    const char *model;     /* "mlr" */
    const char *data;      /* data name, see sfb_data_load */
    const char *test_data; /* optional test set override */
    struct sfb_libsvm_settings libsvm;
    enum sfb_layout layout; /* feature storage (default as loaded) */
    uint32_t batch;        /* samples per worker per clock (S); 0 (default):
                              max(1, 32 / world), a global minibatch of 32 */
    uint32_t epochs;       /* passes over the data (ignored if clocks > 0) */
    uint64_t clocks;       /* total clocks; 0 = epochs · clocks_per_epoch */
    double lr;             /* η₀, per global minibatch (world · batch samples); 0 (default):
                              the model's default (sfb_model_ops.default_lr: dml 0.01,
                              mlr and sc 1.0) */
    enum sfb_lr_schedule lr_schedule;
    uint64_t lr_period;    /* T in clocks; 0 = 1 % of an epoch (at least 1) */
    double lr_decay;       /* factor of SFB_LR_STEP */
    double lambda;         /* regularizer: mlr L2, dml hinge weight, sc L1; < 0 (default):
                              the model's default (sfb_model_ops.default_lambda: mlr 0,
                              dml 30, sc 0.1) */
    /* model-specific settings (sfb/model.h; sfb_train_set_model_options
     * copies them from a struct sfb_model_settings); 0 / NULL: the model's
     * default */
    uint32_t proj_dim;     /* dml: projection dimension */
    uint32_t knn_k;        /* dml: neighbours of the k-NN evaluation */
    uint32_t dict_size;    /* sc: dictionary atoms */
    uint32_t code_steps;   /* sc: FISTA steps per code */
    const char *simi_pairs, *diff_pairs; /* dml: pair files ("i j" per line) */
    struct sfb_model_u32_list hidden; /* mlp: hidden layer sizes (n = 0: default) */
    uint32_t patch;        /* train on p×p patches of square images (0: whole samples) */
    uint64_t seed;
    int threads;           /* OpenBLAS threads */
    uint32_t eval_every;   /* evaluate on the test set every N epochs (0: only at end) */
    const char *model_out;   /* model file; "%r" = rank makes every rank write its
                                replica, else rank 0 writes it; NULL: none */
    const char *metrics_out; /* JSON-lines path; "%r" is replaced by the rank; NULL: none */
    /* synchronization */
    const char *sync;        /* "sfb" (default) */
    int64_t staleness;       /* SSP bound s: 0 = BSP (default), -1 = asynchronous */
    int apply_early;         /* apply updates before SSP needs them: -1 auto (on when
                                s != 0), 0 off, 1 on */
    const char *provider;    /* libfabric provider; NULL: FI_PROVIDER, else shm on one host */
    double peer_timeout;     /* a silent peer has failed after this many seconds (5) */
    double stall_timeout;    /* an update published this many seconds ago and not
                                arrived fails the job (300; 0: never); see
                                sfb_job_settings.stall_timeout_s */
    const char *progress;    /* how a rank waits for messages: "auto" (NULL, default:
                                "block" when its host runs more ranks than it has
                                CPUs, else "spin"), "spin" or "block" */
    const char *cpu_bind;    /* where a worker's threads run: "auto" (NULL, default),
                                "cpu" or "none"; see sfb_job_settings.cpu_bind */
    const char *topology;    /* "full" (default), "halton", "halton-classic": the
                                overlay SFs travel over (relays forward them) */
    uint32_t degree;         /* overlay out-degree; 0 = ceil(log2 P) */
    int flush_clock;         /* overlay forwarding: 0 eager (default), 1 at clock
                                boundaries (a frame h hops away is h clocks late) */
    double bandwidth;        /* egress budget of each worker's data messages, bytes/s
                                (0, default: none); sfb_job_settings.bandwidth */
    const char *priority;    /* what leaves first under the budget: "fifo" (NULL,
                                default), "magnitude", "relative" (sfb_job_attach) */
    /* the link model of --sync auto's per-matrix choice (sfb/cost.h):
     * given, they replace the start-up ping-pong's measurement of that
     * term; 0 (default): measured */
    double link_gbps;        /* per-worker bandwidth, Gbit/s (beta = 8 / (G·1e9) s/byte) */
    double latency_us;       /* per-message latency alpha, microseconds */
    /* checkpoints (src/train/checkpoint.h, docs/robustness.md) */
    uint64_t checkpoint_every;  /* write one every N clocks (0: never) */
    const char *checkpoint_dir; /* where (NULL: "sfb-ckpt") */
    const char *resume_dir;     /* continue from the newest checkpoint every rank has there */
    /* replica checks (docs/robustness.md): with `ordered` (BSP), every N
     * clocks the ranks compare each matrix's fingerprint and repair a
     * replica that differs from the majority's (default 100; 0: only at the
     * end); otherwise the end of a run measures the replicas' drift */
    uint64_t check_every;
    int ordered;             /* BSP: every replica applies a clock's updates in rank
                                order, the own one among them, so all hold the same
                                bits after every clock (sfb_job_attach.ordered; costs
                                the own update's early apply). Default 0 */
    const char *factor_dtype; /* the precision SFB's factors travel in: "f32" (NULL,
                                default) or "bf16" (half the bytes, rounded to
                                nearest even; sfb_job_attach.factor_dtype) */
    const char *dense_dtype;  /* the precision FMS's rows travel in: "f32" (NULL,
                                default) or "bf16" (half the bytes; every replica
                                applies the rounded sums; sfb_job_attach.dense_dtype) */
    /* --sync auto, measured (--trial-clocks): where a matrix's two
     * predictions are within 4x, time this many clocks under each engine
     * (per group of one shape, after 3 warm-up clocks) and keep the faster;
     * 0 (default): the start-up plan, unmeasured, so that runs (and a run
     * and its resumption) choose alike */
    uint32_t trial_clocks;
    /* 1: an elastic job (sfb_job_settings.elastic; --elastic, SFB_ELASTIC=1):
     * when a worker dies the others go on without it, from the most
     * advanced replica, their data resharded (docs/robustness.md). Needs
     * --sync sfb at --staleness 0; implies --ordered. Default 0 */
    uint32_t elastic;
    uint8_t reserved[64 - 2 * sizeof(const char *) - 2 * sizeof(uint32_t)]; /* for fields of
                                                                later versions: zero */
};

/* Fills defaults (version included). NULL is a no-op. */
SFB_API void sfb_train_default_settings(struct sfb_train_settings *s);

/* Checks every combination of settings that can be judged from the settings
 * alone, before anything starts: unknown names, options that contradict
 * each other, and, when `world` (the number of workers) is known (> 0), the
 * bounds that depend on it (--flush clock needs --staleness >= the overlay's
 * diameter − 1, the overlay must exist for that many workers). `world` 0:
 * those are left to sfb_train_run. Returns 0, -EINVAL, -SFB_EVERSION (the
 * settings' or their libsvm settings' version unknown, reserved bytes set)
 * or -SFB_EUSAGE with the setting at fault named in sfb_last_error(). Also
 * checks the debugging variables of the environment (SFB_DEBUG_SLOW_RANK
 * against `world`). Any thread. */
SFB_API int sfb_train_check_settings(const struct sfb_train_settings *s, uint32_t world);

struct sfb_model_settings;
/* Copies the model-specific fields `ms` sets (non-zero: rank, knn_k,
 * dict_size, code_steps, the pair files, hidden.n) into `t`, which hands them to the
 * model when it opens: how a model's own command-line options
 * (sfb_model_ops.options, stored by offset in a struct sfb_model_settings)
 * reach it: the CLI zeroes `ms`, sets its version and has the option table
 * write the options given into it. Pointers are copied, not the strings.
 * Returns 0, -EINVAL (NULL) or -SFB_EVERSION (either structure's version
 * unknown: nothing copied). Any thread. */
SFB_API int sfb_train_set_model_options(struct sfb_train_settings *t,
                                        const struct sfb_model_settings *ms);

/* The registered synchronization engines (--sync) in registry order, the
 * first being the default, and a one-line description of each; NULL past
 * the end. */
SFB_API const char *sfb_sync_registry_name(size_t i);
SFB_API const char *sfb_sync_registry_summary(size_t i);
/* The registry index of the engine named `name`, or -1. */
SFB_API int sfb_sync_registry_find(const char *name);

/* η₀: the settings' lr, or the model's default when it is 0 (NaN, with
 * -EINVAL or -SFB_EVERSION recorded, for NULL or unknown settings). */
SFB_API double sfb_train_lr0(const struct sfb_train_settings *s);

/* The learning rate at a clock under the settings' schedule. */
SFB_API double sfb_train_lr(const struct sfb_train_settings *s, uint64_t clock,
                            uint64_t clocks_per_epoch);

/* What the progress callback sees. The library sets `size` (its sizeof):
 * a later version may add fields at the end, and a callback built against
 * newer headers reads those only when `size` covers them. */
struct sfb_progress {
    uint32_t size;                /* sizeof the library's struct sfb_progress */
    uint32_t rank;
    uint64_t clock, clocks;       /* done so far / total */
    uint32_t epoch;               /* 1-based epoch the last clock done belongs to:
                                     ceil(clock / clocks per epoch) */
    double wall;                  /* seconds since training started */
    double train_loss;            /* mean minibatch loss since the last report */
    double samples_per_s;         /* this worker's throughput so far */
    int has_eval;                 /* the fields below are valid */
    double test_loss, test_accuracy;
    int done;                     /* last report of the run */
};

typedef void (*sfb_progress_fn)(void *user, const struct sfb_progress *p);

/* What a run did. The caller sets size (sizeof); sfb_train_run fills the
 * fields that fit in it (a later version may add fields at the end). */
struct sfb_train_result {
    uint32_t size;         /* sizeof(struct sfb_train_result), set by the caller */
    uint32_t rank, world;  /* this worker's identity in the job */
    uint64_t start_clock; /* first clock this run computed (> 0 when resumed) */
    uint64_t clocks;      /* clocks this run computed: [start_clock, start_clock + clocks) */
    uint64_t samples;     /* processed by this worker in this run */
    double wall;          /* seconds of training */
    double test_loss, test_accuracy; /* final evaluation on rank 0, which alone holds
                                        the test set (NaN elsewhere, or without one) */
    double train_loss;    /* mean minibatch loss over the last epoch (this rank's) */
    uint64_t peak_rss_bytes; /* this process's peak resident memory (VmHWM), 0 if unknown */
    double wait_s;        /* waiting for peers (SSP) over the run */
    double budget_wait_s; /* of which while this worker's bandwidth budget held its sends */
    double budget_held_s; /* seconds the bandwidth budget held this worker's sends back */
};

/* Runs one worker of a job: joins the job (PMIx, the SFB_* environment
 * rendezvous, or alone), trains, drains every outstanding update so all
 * replicas end identical, and writes the outputs. `progress` (may be NULL) is called from the calling thread
 * about every `progress_interval` seconds and at each evaluation.
 * Returns 0 or a negative code with the detail in sfb_last_error():
 * -EINVAL (NULL, res->size below this version's: nothing happened) and
 * -SFB_EVERSION (settings of an unknown version) among them. */
SFB_API int sfb_train_run(const struct sfb_train_settings *s, sfb_progress_fn progress,
                          void *user, double progress_interval, struct sfb_train_result *res);

#ifdef __cplusplus
}
#endif
#endif
