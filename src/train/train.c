/* One worker's training loop:
 *
 *     join the job (src/comm) → load data, build the replica
 *     for t in clocks:
 *         engine.wait(t)        SSP: every origin's updates ≤ t−s−1 applied
 *         model.apply_local     of clock t−1: regularizer / projection, every
 *                               replica itself, once SSP's updates are in
 *         SFs of this worker's minibatch of clock t
 *         engine.publish(t)     to the peers; own update applied at once
 *     engine.drain(last)        all replicas end identical
 *
 * The step is per global minibatch: each worker's SFs carry 1/world of it,
 * so under BSP P workers with batch S follow exactly one worker with batch
 * P·S that reads the same samples (each worker reads its own data shard:
 * SFB_DEBUG_SAMPLE_AS makes one worker read the P shards' union). */
#include "config.h"
#include <sfb/model.h>
#include "sfb/sync.h"
#include <sfb/train.h>
#include "src/net/agree.h"
#include "src/net/bootstrap.h"
#include "src/train/checkpoint.h"
#include "src/net/comm.h"
#include "src/base/common.h"
#include "src/data/data.h"
#include "src/train/metrics.h"
#include "src/base/rng.h"
#include "src/net/ssp.h"
#include "src/base/timeline.h"
#include "src/train/train_settings.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

struct worker {
    const struct sfb_train_settings *s;
    struct sfb__comm *comm;
    uint32_t rank, world;
    uint32_t batch; /* samples per clock on this worker */
    struct sfb_dataset train, test; /* train: this rank's shard; test: rank 0 only */
    uint64_t train_rows;            /* rows of the whole training set */
    struct sfb_model *model;
    struct sfb_sampler *sampler;
    struct sfb_sf sf[SFB_MODEL_MAX_MATRICES];
    uint64_t *idx;
    struct sfb__ssp ssp;
    const struct sfb__sync_ops *engine;
    void *engine_priv;
    struct sfb__metrics metrics;
    struct sfb__rng debug_rng;
    /* checkpoints */
    int64_t start;            /* first clock (> 0 when resumed) */
    const char *ckpt_dir;     /* where checkpoints go (NULL: none) */
    char ckpt_config[SFB__CKPT_CONFIG_MAX + 1];
    struct sfb__rng resume_rng;
};

static void worker_close(struct worker *w)
{
    if (w->engine_priv) w->engine->close(w->engine_priv);
    free(w->engine_priv);
    sfb__ssp_fini(&w->ssp);
    for (int i = 0; i < SFB_MODEL_MAX_MATRICES; i++) sfb_sf_free(&w->sf[i]);
    free(w->idx);
    sfb_sampler_close(&w->sampler);
    sfb_model_close(&w->model);
    sfb_dataset_free(&w->train);
    sfb_dataset_free(&w->test);
    sfb__comm_close(&w->comm);
}

/* Replaces train and test images by their p×p patches (sparse coding on
 * image data), a deterministic subsample of at most 200 000 training and
 * 20 000 test patches (all 8×8 patches of Fashion-MNIST would be 26 M). With
 * P workers each cuts its share of the 200 000 from its own shard, and all
 * cut the same count (what its smallest shard allows), so the sampler's
 * clocks per epoch agree; *n_common receives that count. */
static int to_patches(struct worker *w, uint32_t p, uint64_t *n_common)
{
    struct sfb_dataset *sets[2] = {&w->train, &w->test};
    uint32_t d = w->train.d, side = 0;
    while ((uint64_t)(side + 1) * (side + 1) <= d) side++;
    /* patches per image; sfb_data_patches refuses what does not fit */
    uint64_t per = side >= p && (uint64_t)side * side == d && p
                       ? (uint64_t)(side - p + 1) * (side - p + 1)
                       : 1;
    uint64_t share = SFB_MAX(200000 / w->world, 1), least = w->train_rows / w->world * per;
    *n_common = SFB_MIN(share, least);
    for (int i = 0; i < 2; i++) {
        if (sets[i]->n == 0) continue;
        struct sfb_patch_settings ps;
        sfb_patch_default_settings(&ps);
        ps.p = p;
        ps.seed = w->s->seed + (uint64_t)i + (i ? 0 : (uint64_t)w->rank * 2);
        ps.max_patches = i ? 20000 : *n_common;
        struct sfb_dataset out = {0};
        int ret = sfb_data_patches(sets[i], &ps, &out);
        if (ret) return ret;
        sfb_dataset_free(sets[i]);
        *sets[i] = out;
    }
    return 0;
}

static int setup_model(struct worker *w)
{
    const struct sfb_train_settings *s = w->s;
    /* this rank's shard of the training set; the test set on rank 0 only,
     * which evaluates (docs/design.md, "Data"). DML pair files name rows of
     * the whole set: with them every rank keeps the whole set. */
    int whole = s->simi_pairs || s->diff_pairs;
    struct sfb_shard shard = {whole ? 0 : w->rank, whole ? 1 : w->world, s->seed};
    int ret = sfb_data_load_shard(s->data, s->test_data, &s->libsvm, &shard, &w->train,
                                  w->rank == 0 ? &w->test : NULL, &w->train_rows);
    if (ret) return ret;
    uint64_t n_common = w->train_rows / w->world; /* the smallest shard's rows */
    if (s->patch && (ret = to_patches(w, s->patch, &n_common))) return ret;
    if ((ret = sfb_dataset_set_layout(&w->train, s->layout))) return ret;
    if ((ret = sfb_dataset_set_layout(&w->test, s->layout))) return ret;
    if (w->rank == 0)
        SFB_LOG_I("data %s: %llu samples (%llu in rank 0's shard), %u features, %u classes%s; "
                  "test set %llu samples",
                  s->data, (unsigned long long)w->train_rows, (unsigned long long)w->train.n,
                  w->train.d, w->train.k, w->train.sparse ? " (sparse)" : "",
                  (unsigned long long)w->test.n);
    struct sfb_model_settings ms;
    sfb_model_default_settings(&ms);
    ms.kind = s->model;
    ms.d = w->train.d;
    ms.k = w->train.k;
    ms.lambda = s->lambda >= 0 ? s->lambda : sfb_model_find(s->model)->default_lambda;
    ms.seed = s->seed;
    if (s->rank) ms.rank = s->rank;
    if (s->knn_k) ms.knn_k = s->knn_k;
    if (s->dict_size) ms.dict_size = s->dict_size;
    if (s->code_steps) ms.code_steps = s->code_steps;
    ms.simi_pairs = s->simi_pairs;
    ms.diff_pairs = s->diff_pairs;
    if ((ret = sfb_model_open(&w->model, &ms))) return ret;
    if (w->world > 1 && sfb_model_n_matrices(w->model) != 1)
        return sfb__error(-SFB_ENOTIMPL, "model %s has %u matrices; distributed runs support one",
                          s->model, sfb_model_n_matrices(w->model));
    if (n_common < w->batch)
        return sfb__error(-SFB_EUSAGE, "data %s: %llu samples over %u workers leave %llu per "
                          "worker, fewer than one clock's batch of %u", s->data,
                          (unsigned long long)w->train_rows, w->world,
                          (unsigned long long)n_common, w->batch);
    /* Test knob: one worker reads exactly what Q sharded workers of batch
     * S/Q read (BSP-equivalence tests compare the two). */
    const char *as = getenv("SFB_DEBUG_SAMPLE_AS");
    if (as && *as && w->world == 1) {
        char *end;
        unsigned long q = strtoul(as, &end, 10);
        if (*end || q == 0 || q > UINT32_MAX || s->patch)
            return sfb__error(-SFB_EUSAGE, "SFB_DEBUG_SAMPLE_AS=%s: expected a worker count "
                              "(and no --patches)", as);
        SFB_LOG_W("SFB_DEBUG_SAMPLE_AS=%lu: this worker reads what %lu workers read from their "
                  "shards", q, q);
        ret = sfb__sampler_open_union(&w->sampler, w->train_rows, (uint32_t)q, w->batch, s->seed);
    } else {
        if (as && *as && w->rank == 0)
            SFB_LOG_W("SFB_DEBUG_SAMPLE_AS=%s ignored: it applies to a single worker", as);
        ret = sfb__sampler_open_rows(&w->sampler, w->train.n, n_common, w->rank, w->world,
                                     w->batch, s->seed);
    }
    if (ret) return ret;
    w->idx = malloc(sizeof *w->idx * w->batch);
    if (!w->idx) return sfb__error(-ENOMEM, "out of memory");
    return 0;
}

/* Every setting that must agree across ranks (src/net/agree.h): the
 * checkpoint's configuration text (whatever changes the math: model and its
 * options, data name and shape, batch, lr and schedule, seed, sync,
 * staleness, topology, degree, flush), plus what a resume may change but
 * the ranks of one job may not: the run's length in clocks and the
 * collective checkpoint schedule. Ranks that disagree would hang (frames of
 * another shape, a peer that stops early) or train a model nobody asked
 * for. The provider is compared earlier, in sfb__comm_open. Called once the
 * data is loaded, so the shapes and the clock count are known.
 * SFB_DEBUG_SKIP_AGREE=1 skips it (tests of the runtime's own bounds). */
static int agree_settings(struct worker *w)
{
    const struct sfb_train_settings *s = w->s;
    if (w->world == 1) return 0;
    const char *skip = getenv("SFB_DEBUG_SKIP_AGREE");
    if (skip && !strcmp(skip, "1")) {
        SFB_LOG_W("SFB_DEBUG_SKIP_AGREE=1: settings are not compared across ranks");
        return 0;
    }
    char text[SFB__CKPT_CONFIG_MAX + 128];
    int ret = sfb__ckpt_config(s, w->world, w->batch, w->train_rows, w->train.d, w->train.k, text,
                               SFB__CKPT_CONFIG_MAX + 1);
    if (ret) return sfb__error(ret, "the settings text is too long");
    size_t off = strlen(text);
    uint64_t total = s->clocks ? s->clocks
                               : (uint64_t)s->epochs * sfb_sampler_clocks_per_epoch(w->sampler);
    snprintf(text + off, sizeof text - off, "clocks=%" PRIu64 "\ncheckpoint_every=%" PRIu64
             "\nresume=%s\n", total, s->checkpoint_every, s->resume_dir ? "yes" : "no");
    ret = sfb__agree(w->comm->bs, w->world, text);
    /* a verdict is every rank's; a broken collective may be a rank that
     * failed to load its data and aborted instead of coming */
    return ret == -SFB_ECONFIG ? ret : sfb__comm_explain(w->comm, ret);
}

/* The configuration text checkpoints carry, and for a fresh run with
 * checkpoints the check that no older run's files are in the way (mixing
 * them would let --resume pick a clock of another run). */
static int checkpoint_setup(struct worker *w)
{
    const struct sfb_train_settings *s = w->s;
    int ret = sfb__ckpt_config(s, w->world, w->batch, w->train_rows, w->train.d, w->train.k,
                               w->ckpt_config, sizeof w->ckpt_config);
    if (ret) return sfb__error(ret, "checkpoint: the configuration text is too long");
    if (!s->checkpoint_every) return 0;
    w->ckpt_dir = s->checkpoint_dir ? s->checkpoint_dir : s->resume_dir ? s->resume_dir
                                                                         : "sfb-ckpt";
    int64_t c;
    int n = s->resume_dir && !strcmp(s->resume_dir, w->ckpt_dir)
                ? 0
                : sfb__ckpt_list(w->ckpt_dir, w->rank, &c, 1);
    if (n < 0) return n;
    if (n > 0)
        return sfb__error(-SFB_EUSAGE,
                          "%s already holds checkpoints of rank %u (clock %lld): continue them "
                          "with --resume %s, or remove them or pick another --checkpoint-dir",
                          w->ckpt_dir, w->rank, (long long)c, w->ckpt_dir);
    return 0;
}

/* --resume: the newest checkpoint every rank holds valid, restored. */
static int resume(struct worker *w)
{
    return sfb__ckpt_resume(w->comm->bs, w->s->resume_dir, w->rank, w->world, w->batch,
                            w->ckpt_config, w->model, &w->start, &w->resume_rng);
}

static int worker_open(struct worker *w, const struct sfb_train_settings *s)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    /* Join the job first, so a rank that fails to load its data can tell
     * the others instead of leaving them waiting. Frame validation needs the
     * model's shapes, which are set once the data is loaded, before any
     * data frame can be sent (a barrier separates the two). */
    struct sfb__comm_settings cs;
    sfb__comm_default_settings(&cs);
    cs.provider = s->provider;
    cs.peer_timeout_s = s->peer_timeout;
    cs.progress = !s->progress || !strcmp(s->progress, "auto") ? SFB__PROGRESS_AUTO
                  : !strcmp(s->progress, "spin")                ? SFB__PROGRESS_SPIN
                                                                : SFB__PROGRESS_BLOCK;
    int ret = sfb__comm_open(&w->comm, &cs);
    if (ret) return ret;
    w->rank = w->comm->rank;
    w->world = w->comm->world;
    /* default: a global minibatch of 32 samples, split over the workers */
    w->batch = s->batch ? s->batch : SFB_MAX(32u / w->world, 1u);

    /* Every rank opens its metrics file for writing: one name for all would
     * interleave and truncate it. The CLI refuses this at parse time where
     * it knows the world (sfb run, the env rendezvous); under PMIx the
     * world is known only here. */
    if (w->world > 1 && s->metrics_out && !strstr(s->metrics_out, "%r"))
        ret = sfb__error(-SFB_EUSAGE,
                         "metrics_out \"%s\" has no %%r, so all %u workers would write this one "
                         "file; add %%r (it becomes the rank)",
                         s->metrics_out, w->world);
    else
        ret = setup_model(w);
    sfb__phase_mark(SFB__PH_DATA);
    /* every rank reaches the comparison, or hears the failed rank's abort */
    if (!ret && (ret = agree_settings(w))) return ret;
    sfb__phase_mark(SFB__PH_AGREE);
    if (!ret && (s->checkpoint_every || s->resume_dir)) ret = checkpoint_setup(w);
    if (!ret && s->resume_dir) {
        /* collective: every rank learns the same outcome, no abort needed */
        if ((ret = resume(w))) return ret;
    }
    if (ret) {
        char why[600];
        snprintf(why, sizeof why, "rank %u: %s", w->rank, sfb_error_message(ret));
        sfb__comm_abort(w->comm, why);
        return sfb__error(ret, "%s", why + 0);
    }
    uint32_t nm = sfb_model_n_matrices(w->model);
    struct sfb__wire_shape shapes[SFB_MODEL_MAX_MATRICES];
    for (uint32_t m = 0; m < nm; m++) {
        shapes[m].k = sfb_model_matrix(w->model, m)->rows;
        shapes[m].d = sfb_model_matrix(w->model, m)->cols;
    }
    if ((ret = sfb__comm_set_shapes(w->comm, shapes, nm, w->batch))) return ret;
    sfb__phase_mark(SFB__PH_SHAPES);

    if ((ret = sfb__ssp_init(&w->ssp, w->world, s->staleness, w->start))) return ret;
    w->engine = sfb__sync_find(s->sync);
    w->engine_priv = calloc(1, w->engine->priv_size);
    if (!w->engine_priv) return -ENOMEM;
    struct sfb__sync_env env = {
        .comm = w->comm,
        .model = w->model,
        .ssp = &w->ssp,
        .apply_early = s->apply_early < 0 ? s->staleness != 0 : s->apply_early,
        .staleness = s->staleness,
        .topology = s->topology,
        .degree = s->degree,
        .flush_clock = s->flush_clock,
        .start_clock = w->start,
    };
    if ((ret = w->engine->open(w->engine_priv, &env))) {
        free(w->engine_priv);
        w->engine_priv = NULL;
        return ret;
    }
    sfb__rng_seed2(&w->debug_rng, s->seed, 0x5eed0000u + w->rank);
    if (w->start) w->debug_rng = w->resume_rng;
    ret = sfb__metrics_open(&w->metrics, s->metrics_out, w->rank);
    sfb__phase_mark(SFB__PH_ENGINE);
    return ret;
}

/* The "setup" metrics event (docs/formats.md), once the first clock began. */
static void setup_event(struct worker *w)
{
    char ph[1024];
    sfb__phase_json(SFB__PH_EXEC, SFB__PH_FIRST_CLOCK, ph, sizeof ph);
    sfb__metrics_event(&w->metrics, "setup",
                       "\"launch_s\":%.6f,\"origin\":\"%s\",\"t_launch\":%.6f,\"phases\":{%s}",
                       sfb__phase_span(SFB__PH_LAUNCH, SFB__PH_FIRST_CLOCK),
                       sfb__phase_from_launcher() ? "launcher" : "process",
                       sfb__phase_at(SFB__PH_LAUNCH), ph);
}

/* The "teardown" metrics event, the last line, once everything but the
 * metrics file is closed. */
static void teardown_event(struct sfb__metrics *m)
{
    if (sfb__phase_at(SFB__PH_LAST_CLOCK) == 0) return;
    char ph[1024];
    sfb__phase_json(SFB__PH_DRAINED, SFB__PH_CLOSED, ph, sizeof ph);
    sfb__metrics_event(m, "teardown", "\"teardown_s\":%.6f,\"t_last_clock\":%.6f,\"phases\":{%s}",
                       sfb__phase_span(SFB__PH_LAST_CLOCK, SFB__PH_CLOSED),
                       sfb__phase_at(SFB__PH_LAST_CLOCK), ph);
}

static void sleep_s(double sec)
{
    if (sec <= 0) return;
    struct timespec ts = {(time_t)sec, (long)((sec - floor(sec)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Debug knobs: a random delay and one slowed rank, applied after the real
 * compute so the SSP machinery sees genuine stragglers. */
static void debug_delay(struct worker *w, double compute_s)
{
    const struct sfb_train_settings *s = w->s;
    double extra = 0;
    if (s->debug_delay_ms > 0) extra += sfb__rng_uniform(&w->debug_rng) * s->debug_delay_ms * 1e-3;
    if (s->debug_slow_rank == (int)w->rank && s->debug_slow_factor > 1)
        extra += (s->debug_slow_factor - 1) * compute_s;
    sleep_s(extra);
}

static void traffic(const struct worker *w, uint64_t v[6])
{
    memset(v, 0, 6 * sizeof *v);
    if (w->engine->report) {
        struct sfb__sync_report rep;
        w->engine->report(w->engine_priv, &rep);
        v[4] = rep.data_msgs;
        v[5] = rep.data_bytes;
    }
    if (!w->comm->t) return;
    const struct sfb__transport_stats *st = sfb__transport_stats(w->comm->t);
    v[0] = atomic_load(&st->bytes_sent);
    v[1] = atomic_load(&st->bytes_recv);
    v[2] = atomic_load(&st->frames_sent);
    v[3] = atomic_load(&st->frames_recv);
}

static int evaluate(struct worker *w, struct sfb_eval *ev)
{
    ev->loss = ev->accuracy = NAN;
    ev->n = 0;
    if (w->test.n == 0) return 0;
    return sfb_model_evaluate(w->model, &w->test, ev);
}

static int write_model(struct worker *w, int64_t clock)
{
    const char *out = w->s->model_out;
    if (!out) return 0;
    int per_rank = strstr(out, "%r") != NULL;
    if (!per_rank && w->rank != 0) return 0;
    char *path = sfb__path_for_rank(out, w->rank);
    if (!path) return -ENOMEM;
    int ret = sfb_model_save(w->model, path, clock);
    free(path);
    return ret;
}

/* A consistent checkpoint of `clock`: every rank drains to clock − 1 and
 * passes a barrier, so no rank starts `clock` before every replica holds
 * exactly the updates of clocks < clock; then each rank writes its file. */
static int checkpoint(struct worker *w, int64_t clock, int drained)
{
    double t0 = sfb__now();
    struct sfb__sync_clock acct = {0};
    int ret = 0;
    if (!drained && clock > 0) ret = w->engine->drain(w->engine_priv, clock - 1, &acct);
    if (!ret && !drained && w->world > 1) ret = sfb__bootstrap_barrier(w->comm->bs);
    /* after comm_finish (drained) peers may already be gone: no check */
    if (!ret && !drained) ret = sfb__comm_check(w->comm);
    if (ret) return ret;
    struct sfb__ckpt_state st;
    memset(&st, 0, sizeof st);
    st.rank = w->rank;
    st.world = w->world;
    st.clock = clock;
    st.cursor = (uint64_t)clock * w->batch;
    st.rng = w->debug_rng;
    sfb__ckpt_save_model_state(w->model, &st);
    if ((ret = sfb__ckpt_write(w->ckpt_dir, &st, w->ckpt_config, w->model))) return ret;
    double dt = sfb__now() - t0;
    sfb__metrics_event(&w->metrics, "checkpoint", "\"clock\":%lld,\"seconds\":%.6g",
                       (long long)clock, dt);
    if (w->rank == 0)
        SFB_LOG_I("checkpoint of clock %lld written to %s (%.2f s)", (long long)clock,
                  w->ckpt_dir, dt);
    return 0;
}

/* The epoch of the progress line and of every metrics line (docs/formats.md):
 * 1-based, the epoch the last of `done` clocks belongs to, ⌈done / cpe⌉ —
 * clock t (0-based) is in epoch ⌊t / cpe⌋ + 1; 0 only before any clock. */
static uint32_t epoch_after(uint64_t done, uint64_t cpe)
{
    return (uint32_t)((done + cpe - 1) / cpe);
}

/* The "eval" metrics event; NaN (e.g. sc has no accuracy) is written null. */
static void eval_event(struct worker *w, uint64_t clock, uint64_t epoch, double wall,
                       const struct sfb_eval *ev, double train_loss)
{
    char a[32], b[32], c[32];
    sfb__metrics_event(&w->metrics, "eval",
                       "\"clock\":%llu,\"epoch\":%llu,\"wall\":%.6g,\"test_loss\":%s,"
                       "\"test_accuracy\":%s,\"train_loss\":%s",
                       (unsigned long long)clock, (unsigned long long)epoch, wall,
                       sfb__json_num(a, ev->loss), sfb__json_num(b, ev->accuracy),
                       sfb__json_num(c, train_loss));
}

static int run(struct worker *w, sfb_progress_fn progress, void *user, double interval,
               struct sfb_train_result *res)
{
    const struct sfb_train_settings *s = w->s;
    uint64_t cpe = sfb_sampler_clocks_per_epoch(w->sampler);
    uint64_t total = s->clocks ? s->clocks : (uint64_t)s->epochs * cpe;
    uint32_t nm = sfb_model_n_matrices(w->model);
    double t_start = sfb__now(), last_report = t_start;
    double loss_sum = 0, epoch_loss = 0;
    uint64_t loss_n = 0, epoch_n = 0, prev[6], now_tr[6];
    traffic(w, prev);
    /* this run's traffic: a resumed run's counters start after the resume */
    uint64_t bytes_sent0 = prev[0], msgs_sent0 = prev[2], data_msgs0 = prev[4],
             data_bytes0 = prev[5];
    struct sfb_progress pr;
    memset(&pr, 0, sizeof pr);
    pr.rank = w->rank;
    pr.clocks = total;
    int ret = 0;

    uint64_t every = s->checkpoint_every, start = (uint64_t)w->start;
    if (start > total)
        return sfb__error(-SFB_EUSAGE, "resumed at clock %llu, beyond the %llu clocks of this run",
                          (unsigned long long)start, (unsigned long long)total);
    if (total) sfb__comm_set_last_clock(w->comm, (int64_t)total - 1);
    for (uint64_t t = start; t < total; t++) {
        if (every && t > start && t % every == 0 && (ret = checkpoint(w, (int64_t)t, 0)))
            return ret;
        uint32_t epoch = epoch_after(t + 1, cpe);
        double eta = sfb_train_lr(s, t, cpe);
        struct sfb__clock_metrics cm;
        memset(&cm, 0, sizeof cm);
        cm.clock = (int64_t)t;
        cm.epoch = epoch;
        cm.lr = eta;

        if (t == start) {
            sfb__phase_mark(SFB__PH_FIRST_CLOCK);
            setup_event(w);
        }
        struct sfb__sync_clock acct = {0};
        if ((ret = w->engine->wait(w->engine_priv, (int64_t)t, &acct))) return ret;
        if ((ret = sfb__ssp_record(&w->ssp, (int64_t)t))) return ret;
        cm.min_applied = w->ssp.record[t];
        /* The previous clock's regularizer / projection, now that the wait
         * applied every update the SSP bound requires: under BSP every
         * replica decays / projects the same matrix. (A checkpoint of clock
         * t holds the replica before this step; a resumed run redoes it.) */
        if (t > 0) sfb_model_apply_local(w->model, (float)sfb_train_lr(s, t - 1, cpe));

        double t0 = sfb__now();
        cm.t_begin = t0;
        if ((ret = sfb_sampler_batch(w->sampler, t, w->idx))) return ret;
        double loss = 0;
        ret = sfb_model_factors(w->model, &w->train, w->idx, w->batch, (float)(eta / w->world),
                                w->sf, &loss);
        if (ret) return ret;
        for (uint32_t m = 0; m < nm; m++) {
            w->sf[m].origin = w->rank;
            w->sf[m].clock = (int64_t)t;
        }
        debug_delay(w, sfb__now() - t0);
        double t1 = sfb__now();
        cm.t_publish = t1;
        if ((ret = w->engine->publish(w->engine_priv, (int64_t)t, w->sf, nm))) return ret;
        double t2 = sfb__now();
        if (t + 1 == total) sfb__phase_mark(SFB__PH_LAST_CLOCK);

        if (!isfinite(loss))
            return sfb__error(-ERANGE,
                              "training diverged at clock %llu (loss is %g): lower --lr "
                              "(now %g)",
                              (unsigned long long)t, loss, sfb_train_lr0(s));
        traffic(w, now_tr);
        cm.bytes_sent = now_tr[0] - prev[0];
        cm.bytes_recv = now_tr[1] - prev[1];
        cm.msgs_sent = now_tr[2] - prev[2];
        cm.msgs_recv = now_tr[3] - prev[3];
        cm.data_msgs = now_tr[4] - prev[4];
        cm.data_bytes = now_tr[5] - prev[5];
        memcpy(prev, now_tr, sizeof prev);
        cm.compute_s = t1 - t0;
        cm.wait_s = acct.wait_s;
        cm.apply_s = acct.apply_s + (t2 - t1);
        cm.staleness = acct.staleness;
        cm.applied_early = acct.applied_early;
        cm.wall = t2 - t_start;
        cm.objective = loss / w->batch;
        cm.samples_per_s = (double)(t + 1 - start) * w->batch / (t2 - t_start);
        sfb__metrics_clock(&w->metrics, &cm);
        loss_sum += loss;
        loss_n += w->batch;
        epoch_loss += loss;
        epoch_n += w->batch;

        int epoch_end = (t + 1) % cpe == 0 || t + 1 == total;
        int do_eval = w->rank == 0 && epoch_end && t + 1 < total && s->eval_every &&
                      epoch % s->eval_every == 0;
        pr.has_eval = 0;
        if (do_eval) {
            struct sfb_eval ev;
            if ((ret = evaluate(w, &ev))) return ret;
            pr.has_eval = ev.n > 0;
            pr.test_loss = ev.loss;
            pr.test_accuracy = ev.accuracy;
            if (ev.n)
                eval_event(w, t + 1, epoch, sfb__now() - t_start, &ev,
                           epoch_n ? epoch_loss / epoch_n : NAN);
        }
        if (epoch_end) {
            res->train_loss = epoch_n ? epoch_loss / epoch_n : NAN;
            epoch_loss = 0;
            epoch_n = 0;
        }
        double now = sfb__now();
        if (progress && t + 1 < total && (pr.has_eval || now - last_report >= interval)) {
            pr.clock = t + 1;
            pr.epoch = epoch;
            pr.wall = now - t_start;
            pr.train_loss = loss_n ? loss_sum / loss_n : NAN;
            pr.samples_per_s = cm.samples_per_s;
            progress(user, &pr);
            last_report = now;
            loss_sum = 0;
            loss_n = 0;
        }
    }

    /* Every replica applies every update before anyone evaluates or writes. */
    struct sfb__sync_clock acct = {0};
    if (total && (ret = w->engine->drain(w->engine_priv, (int64_t)total - 1, &acct))) return ret;
    sfb__phase_mark(SFB__PH_DRAINED);
    if ((ret = sfb__comm_finish(w->comm, (int64_t)total - 1))) return ret;
    /* drained, and comm_finish's barrier stands for the checkpoint's */
    if (every && total > start && total % every == 0 && (ret = checkpoint(w, (int64_t)total, 1)))
        return ret;
    /* the last clock's local step, after the checkpoint as for every clock */
    if (total > 0) sfb_model_apply_local(w->model, (float)sfb_train_lr(s, total - 1, cpe));
    /* what this run did: a resumed run computed clocks [start, total) */
    res->start_clock = start;
    res->clocks = total - start;
    res->samples = res->clocks * w->batch;
    res->wall = sfb__now() - t_start;

    struct sfb_eval ev;
    if ((ret = evaluate(w, &ev))) return ret;
    res->peak_rss_bytes = sfb__peak_rss_bytes();
    res->test_loss = ev.loss;
    res->test_accuracy = ev.accuracy;
    if (ev.n) eval_event(w, total, epoch_after(total, cpe), res->wall, &ev, res->train_loss);
    traffic(w, now_tr);
    const struct sfb_matrix *a = sfb_model_matrix(w->model, 0);
    double formula = w->engine->formula_bytes(a->rows, a->cols, w->world, w->batch);
    const uint64_t *hist = w->engine->staleness_hist(w->engine_priv);
    char hs[SFB_STALENESS_BINS * 24] = "", *hp = hs;
    for (int i = 0; i < SFB_STALENESS_BINS; i++)
        hp += sprintf(hp, "%s%llu", i ? "," : "", (unsigned long long)hist[i]);
    char acc[32], launch[32] = "null"; /* as the setup event writes it */
    double launch_s = sfb__phase_span(SFB__PH_LAUNCH, SFB__PH_FIRST_CLOCK);
    if (launch_s >= 0) snprintf(launch, sizeof launch, "%.6f", launch_s);
    sfb__metrics_event(
        &w->metrics, "summary",
        "\"world\":%u,\"start_clock\":%llu,\"clocks\":%llu,\"samples\":%llu,\"wall\":%.6g,"
        "\"samples_per_s\":%.6g,\"test_accuracy\":%s,\"bytes_sent\":%llu,\"bytes_sent_per_clock\":%.6g,"
        "\"formula_bytes_per_clock\":%.6g,\"staleness_hist\":[%s],\"rejected_frames\":%llu,"
        "\"msgs_sent\":%llu,\"data_msgs\":%llu,\"data_bytes\":%llu,\"train_rows\":%llu,"
        "\"peak_rss_bytes\":%llu,\"launch_s\":%s",
        w->world, (unsigned long long)start, (unsigned long long)res->clocks,
        (unsigned long long)res->samples, res->wall,
        res->wall > 0 ? (double)res->samples / res->wall : 0.0,
        sfb__json_num(acc, res->test_accuracy),
        (unsigned long long)(now_tr[0] - bytes_sent0),
        res->clocks ? (double)(now_tr[0] - bytes_sent0) / (double)res->clocks : 0.0, formula, hs,
        (unsigned long long)sfb__comm_rejected(w->comm),
        (unsigned long long)(now_tr[2] - msgs_sent0), (unsigned long long)(now_tr[4] - data_msgs0),
        (unsigned long long)(now_tr[5] - data_bytes0), (unsigned long long)w->train.n,
        (unsigned long long)res->peak_rss_bytes, launch);
    struct sfb__sync_report rep = {0};
    if (w->engine->report) w->engine->report(w->engine_priv, &rep);
    if (rep.relays) {
        char *po = malloc((size_t)w->world * 24 + 8), *pp = po;
        if (po) {
            *pp = 0;
            for (uint32_t i = 0; i < w->world && rep.per_origin; i++)
                pp += sprintf(pp, "%s%llu", i ? "," : "", (unsigned long long)rep.per_origin[i]);
        }
        sfb__metrics_event(&w->metrics, "relay",
                           "\"topology\":\"%s\",\"flush\":\"%s\",\"data_msgs\":%llu,"
                           "\"data_bytes\":%llu,\"bundles\":%llu,\"forwarded\":%llu,"
                           "\"mean_hops\":%.6g,\"max_hops\":%u,\"applied_per_origin\":[%s]",
                           s->topology ? s->topology : "full", s->flush_clock ? "clock" : "eager",
                           (unsigned long long)rep.data_msgs, (unsigned long long)rep.data_bytes,
                           (unsigned long long)rep.bundles, (unsigned long long)rep.forwarded,
                           rep.mean_hops, rep.max_hops, po ? po : "");
        free(po);
    }
    if (progress) {
        pr.clock = total;
        pr.epoch = epoch_after(total, cpe);
        pr.wall = res->wall;
        pr.train_loss = loss_n ? loss_sum / loss_n : NAN;
        pr.samples_per_s = res->wall > 0 ? (double)res->samples / res->wall : 0;
        pr.has_eval = ev.n > 0;
        pr.test_loss = ev.loss;
        pr.test_accuracy = ev.accuracy;
        pr.done = 1;
        progress(user, &pr);
    }
    ret = write_model(w, (int64_t)total);
    sfb__phase_mark(SFB__PH_REPORTED);
    return ret;
}

int sfb_train_run(const struct sfb_train_settings *s, sfb_progress_fn progress, void *user,
                  double progress_interval, struct sfb_train_result *res)
{
    SFB_ENTER();
    SFB_ARG(res);
    SFB_ARG(s);
    memset(res, 0, sizeof *res);
    res->test_loss = res->test_accuracy = res->train_loss = NAN;
    int ret = sfb__train_validate(s);
    if (ret) return ret;
    sfb_set_blas_threads(s->threads);
    sfb__phase_reset();
    sfb__phase_mark(SFB__PH_MAIN);
    struct worker w;
    ret = worker_open(&w, s);
    if (ret == 0) {
        res->rank = w.rank;
        res->world = w.world;
        ret = run(&w, progress, user, progress_interval, res);
        if (ret && w.comm) {
            /* tell the others why, so they stop at once naming this rank */
            char why[600];
            const char *e = sfb_error_message(ret);
            if (!strncmp(e, "rank ", 5))
                snprintf(why, sizeof why, "%s", e);
            else
                snprintf(why, sizeof why, "rank %u: %s", w.rank, e);
            if (!sfb__comm_peers_know(w.comm)) sfb__comm_abort(w.comm, why);
            sfb__error(ret, "%s", why);
        }
    }
    /* metrics last, so that the teardown event sees the transport closed */
    worker_close(&w);
    sfb__phase_mark(SFB__PH_CLOSED);
    if (ret == 0) teardown_event(&w.metrics);
    if (ret == 0)
        ret = sfb__metrics_close(&w.metrics);
    else
        sfb__metrics_close(&w.metrics);
    return ret;
}
