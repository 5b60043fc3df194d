/* Setting a worker up (src/train/worker.h): join the job, load this rank's
 * data shard, build the replica, compare settings across ranks, resume from
 * a checkpoint, attach the replica to the job. */
#include "config.h"
#include <sfb/job.h>
#include <sfb/model.h>
#include "src/base/util.h"
#include "src/base/timeline.h"
#include "models/model_internal.h"
#include "src/job/job_internal.h"
#include "src/train/worker.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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

/* This rank's shard of the training set (and on rank 0 the test set),
 * its sampler and index buffer: at set-up, and again after an elastic
 * job lost a rank (new rank and world, so a new shard). */
static int load_data(struct worker *w)
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
    if (n_common < w->batch)
        return sfb__error(-SFB_EUSAGE, "data %s: %llu samples over %u workers leave %llu per "
                          "worker, fewer than one clock's batch of %u", s->data,
                          (unsigned long long)w->train_rows, w->world,
                          (unsigned long long)n_common, w->batch);
    /* Test knob: one worker reads exactly what Q sharded workers of batch
     * S/Q read (BSP-equivalence tests compare the two). */
    const char *as = getenv("SFB_DEBUG_SAMPLE_AS");
    if (as && *as && w->world == 1 && !w->reshards) {
        uint64_t q;
        if ((ret = sfb__parse_env_u64("SFB_DEBUG_SAMPLE_AS", as, 1, UINT32_MAX, &q))) return ret;
        if (s->patch)
            return sfb__error(-SFB_EUSAGE, "SFB_DEBUG_SAMPLE_AS=%s: not with --patches", as);
        SFB_LOG_W("SFB_DEBUG_SAMPLE_AS=%llu: this worker reads what %llu workers read from "
                  "their shards", (unsigned long long)q, (unsigned long long)q);
        ret = sfb__sampler_open_union(&w->sampler, w->train_rows, (uint32_t)q, w->batch, s->seed);
    } else {
        if (as && *as && w->rank == 0 && !w->reshards)
            SFB_LOG_W("SFB_DEBUG_SAMPLE_AS=%s ignored: it applies to a single worker", as);
        ret = sfb__sampler_open_rows(&w->sampler, w->train.n, n_common, w->rank, w->world,
                                     w->batch, s->seed);
    }
    if (ret) return ret;
    if (!w->idx && !(w->idx = malloc(sizeof *w->idx * w->batch)))
        return sfb__error(-ENOMEM, "out of memory");
    return 0;
}

/* The checkpoints' configuration text (it names the world). */
static int ckpt_config(struct worker *w)
{
    int ret = sfb__ckpt_config(w->s, w->world, w->batch, w->train_rows, w->train.d, w->train.k,
                               w->ckpt_config, sizeof w->ckpt_config);
    return ret ? sfb__error(ret, "checkpoint: the configuration text is too long") : 0;
}

int sfb__worker_new_world(struct worker *w)
{
    w->rank = sfb_job_rank(w->job);
    w->world = sfb_job_world(w->job);
    sfb_sampler_close(&w->sampler);
    sfb_dataset_free(&w->train);
    sfb_dataset_free(&w->test);
    w->reshards++;
    int ret = load_data(w);
    return ret ? ret : ckpt_config(w);
}

static int setup_model(struct worker *w)
{
    const struct sfb_train_settings *s = w->s;
    int ret = load_data(w);
    if (ret) return ret;
    struct sfb_model_settings ms;
    sfb_model_default_settings(&ms);
    ms.kind = s->model;
    ms.d = w->train.d;
    ms.k = w->train.k;
    ms.lambda = s->lambda >= 0 ? s->lambda : sfb_model_find(s->model)->default_lambda;
    ms.seed = s->seed;
    if (s->proj_dim) ms.proj_dim = s->proj_dim;
    if (s->knn_k) ms.knn_k = s->knn_k;
    if (s->dict_size) ms.dict_size = s->dict_size;
    if (s->code_steps) ms.code_steps = s->code_steps;
    ms.simi_pairs = s->simi_pairs;
    ms.diff_pairs = s->diff_pairs;
    if (s->hidden.n) ms.hidden = s->hidden;
    return sfb_model_open(&w->model, &ms);
}

/* Every setting that must agree across ranks (src/boot/agree.h): the
 * checkpoint's configuration text (whatever changes the math: model and its
 * options, data name and shape, batch, lr and schedule, seed, sync,
 * staleness, topology, degree, flush), plus what a resume may change but
 * the ranks of one job may not: the run's length in clocks, the
 * collective checkpoint and replica-check schedules and the link model of --sync auto. Ranks that disagree would hang (frames of
 * another shape, a peer that stops early) or train a model nobody asked
 * for. The provider is compared earlier, in sfb_job_open. Called once the
 * data is loaded, so the shapes and the clock count are known.
 * SFB_DEBUG_SKIP_AGREE=1 skips it and the job's attach agreement (tests of
 * the runtime's own bounds). */
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
             "\nresume=%s\nlink_gbps=%.17g\nlatency_us=%.17g\ncheck_every=%" PRIu64
             "\nordered=%d\nfactor_dtype=%s\ndense_dtype=%s\ntrial_clocks=%u\n", total,
             s->checkpoint_every, s->resume_dir ? "yes" : "no", s->link_gbps, s->latency_us,
             s->check_every, s->ordered, s->factor_dtype ? s->factor_dtype : "f32",
             s->dense_dtype ? s->dense_dtype : "f32", s->trial_clocks);
    /* a verdict is every rank's; a broken collective may be a rank that
     * failed to load its data and aborted instead of coming */
    return sfb_job_agree(w->job, text);
}

/* What a process joining the running job (SFB_JOINING=1) must share with
 * it, checked by the job's rank 0 at the handshake (a mismatch refuses the
 * joiner, naming the line, and the job goes on): the settings agree_settings
 * compares, less what only the job knows (its world, the data's size and
 * shape: the data name stands for them; a clock count from --epochs). */
static int join_text(const struct sfb_train_settings *s, char *text, size_t cap)
{
    int ret = sfb__ckpt_config(s, 0, s->batch, 0, 0, 0, text, cap);
    if (ret) return sfb__error(ret, "the settings text is too long");
    size_t off = strlen(text);
    snprintf(text + off, cap - off, "clocks=%" PRIu64 "\nepochs=%u\ncheckpoint_every=%" PRIu64
             "\ncheck_every=%" PRIu64 "\nordered=%d\nfactor_dtype=%s\nelastic=%u\n",
             s->clocks, s->epochs, s->checkpoint_every, s->check_every, s->ordered,
             s->factor_dtype ? s->factor_dtype : "f32", s->elastic);
    return 0;
}

/* The configuration text checkpoints carry, and for a fresh run with
 * checkpoints the check that no older run's files are in the way (mixing
 * them would let --resume pick a clock of another run). */
static int checkpoint_setup(struct worker *w)
{
    const struct sfb_train_settings *s = w->s;
    int ret = ckpt_config(w);
    if (ret) return ret;
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
    return sfb__ckpt_resume(w->job, w->s->resume_dir, w->rank, w->world, w->batch,
                            w->ckpt_config, w->model, &w->start, &w->resume_rng,
                            w->resume_engines);
}

void sfb__worker_close(struct worker *w)
{
    /* the job first: its engine updates the model's matrices */
    sfb_job_close(&w->job);
    sfb__trials_close(&w->trials);
    for (int i = 0; i < SFB_MODEL_MAX_MATRICES; i++) sfb_sf_free(&w->sf[i]);
    free(w->idx);
    sfb_sampler_close(&w->sampler);
    sfb_model_close(&w->model);
    sfb_dataset_free(&w->train);
    sfb_dataset_free(&w->test);
}

/* Joins the job first, so a rank that fails to load its data can tell the
 * others instead of leaving them waiting. */
static int join(struct worker *w)
{
    const struct sfb_train_settings *s = w->s;
    struct sfb_job_settings js;
    sfb_job_default_settings(&js);
    js.provider = s->provider;
    js.peer_timeout_s = s->peer_timeout;
    js.stall_timeout_s = s->stall_timeout;
    js.progress = s->progress;
    js.cpu_bind = s->cpu_bind;
    js.bandwidth = s->bandwidth;
    js.elastic = s->elastic;
    int ret = s->elastic ? join_text(s, w->join_text, sizeof w->join_text) : 0;
    if (ret) return ret;
    js.join_text = w->join_text;
    if ((ret = sfb_job_open(&w->job, &js))) return ret;
    w->rank = w->first_rank = sfb_job_rank(w->job);
    w->world = sfb_job_world(w->job);
    /* default: a global minibatch of 32 samples, split over the workers */
    w->batch = s->batch ? s->batch : SFB_MAX(32u / w->world, 1u);
    /* started later, into a running elastic job: its clock, batch and end */
    uint32_t max_s;
    if (sfb_job_joined(w->job, &w->start, &max_s, NULL)) {
        if (s->resume_dir)
            return sfb__error(-SFB_EUSAGE, "a joining worker does not --resume: it takes the "
                              "running job's replicas");
        w->joined = 1;
        w->batch = max_s;
        w->skip_local = w->skip_check = w->start;
    }
    /* SFB_DEBUG_SLOW_RANK is checked against the world only now, known */
    return sfb__train_debug_read(&w->debug, w->world);
}

/* A failure of this rank's set-up told to the peers (sfb_job_abort: not
 * when they know already), so they stop naming it instead of its exit. */
static int tell_peers(struct worker *w, int ret)
{
    char why[600];
    snprintf(why, sizeof why, "rank %u: %s", w->rank, sfb_error_message(ret));
    sfb_job_abort(w->job, why);
    return sfb__error(ret, "%s", why + 0);
}

/* Data, model, agreement and resume, once joined. A failure that is not
 * collective is told to the peers. */
static int prepare(struct worker *w)
{
    const struct sfb_train_settings *s = w->s;
    int ret;
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
    /* every rank reaches the comparison, or hears the failed rank's abort
     * (a joiner's settings were compared when it joined) */
    if (!ret && !w->joined && (ret = agree_settings(w))) return ret;
    sfb__phase_mark(SFB__PH_AGREE);
    if (!ret && (s->checkpoint_every || s->resume_dir)) ret = checkpoint_setup(w);
    if (!ret && s->resume_dir) {
        /* collective: every rank learns the same outcome, no abort needed */
        if ((ret = resume(w))) return ret;
    }
    return ret ? tell_peers(w, ret) : 0;
}

/* --sync auto: the bytes of each matrix's SF frame as the codec would send
 * them, from the factors of the shard's first minibatch (a probe: the
 * model's private state, dml's pair stream, is put back). */
static void probe_sf_bytes(struct worker *w, uint32_t n, uint32_t *sf_bytes)
{
    const struct sfb_model_ops *ops = sfb_model_get_ops(w->model);
    uint8_t state[SFB_MODEL_STATE_MAX];
    size_t len = ops->state_save ? ops->state_save(sfb__model_priv(w->model), state, sizeof state)
                                 : 0;
    uint32_t s = (uint32_t)SFB_MIN((uint64_t)w->batch, w->train.n);
    uint64_t *idx = calloc(s ? s : 1, sizeof *idx);
    double loss = 0;
    for (uint32_t i = 0; i < s && idx; i++) idx[i] = i;
    if (idx && s && !sfb_model_factors(w->model, &w->train, idx, s, 1e-3f, w->sf, &loss))
        for (uint32_t m = 0; m < n; m++)
            sf_bytes[m] =
                (uint32_t)SFB_MIN(sfb__job_sf_frame_size(&w->sf[m], w->s->factor_dtype),
                                  (size_t)UINT32_MAX);
    free(idx);
    if (len) ops->state_load(sfb__model_priv(w->model), state, len);
}

/* The model's matrices become the job's replica. Frame validation needs
 * their shapes, known only now: attach is a barrier, so no data frame is
 * sent before every rank can check it. */
static int attach(struct worker *w)
{
    const struct sfb_train_settings *s = w->s;
    struct sfb_job_attach a;
    sfb_job_default_attach(&a);
    struct sfb_matrix mats[SFB_MODEL_MAX_MATRICES];
    uint32_t sf_bytes[SFB_MODEL_MAX_MATRICES] = {0};
    a.n = sfb_model_n_matrices(w->model);
    for (uint32_t m = 0; m < a.n; m++) mats[m] = *sfb_model_matrix(w->model, m);
    a.mats = mats;
    a.max_s = w->batch;
    a.engine = s->sync;
    a.staleness = s->staleness;
    a.apply_early = s->apply_early;
    a.topology = s->topology;
    a.degree = s->degree;
    a.flush_clock = s->flush_clock;
    a.start_clock = w->start;
    a.link_gbps = s->link_gbps;
    a.latency_us = s->latency_us;
    a.priority = s->priority;
    /* --ordered: every replica applies a clock's updates in rank order, so
     * all hold the same bits after every clock (replica checks compare them
     * exactly) */
    a.ordered = s->ordered || s->elastic; /* elastic: forced by the job too */
    a.factor_dtype = s->factor_dtype; /* --factor-dtype: f32 (NULL) or bf16 */
    a.dense_dtype = s->dense_dtype;   /* --dense-dtype: f32 (NULL) or bf16 */
    int auto_sync = sfb__job_sync_is_auto(s->sync);
    if (auto_sync && w->resume_engines[0]) {
        /* the resumed run goes on with the engines the run chose */
        a.engine = w->resume_engines;
        if (w->rank == 0)
            SFB_LOG_I("--sync auto: the checkpoint's engines %s", w->resume_engines);
    } else if (auto_sync) {
        probe_sf_bytes(w, a.n, sf_bytes);
        a.sf_bytes = sf_bytes;
    }
    int ret = sfb_job_attach(w->job, &a);
    /* the checkpoints of an auto run carry its choice */
    size_t len = strlen(w->ckpt_config);
    if (!ret && auto_sync && w->ckpt_config[0])
        snprintf(w->ckpt_config + len, sizeof w->ckpt_config - len, "engines=%s\n",
                 sfb__job_engine_name(w->job));
    const char *plan = sfb_job_plan(w->job);
    if (!ret && w->rank == 0 && plan && *plan)
        SFB_LOG_I("--sync auto:\n%.*s", (int)strcspn(plan, "") - 1, plan); /* no final newline */
    return ret;
}

void sfb__worker_engines_changed(struct worker *w)
{
    char *at = strstr(w->ckpt_config, "\nengines=");
    if (!at++) return;
    snprintf(at, sizeof w->ckpt_config - (size_t)(at - w->ckpt_config), "engines=%s\n",
             sfb__job_engine_name(w->job));
}

int sfb__worker_open(struct worker *w, const struct sfb_train_settings *s)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    w->skip_local = w->skip_check = -1;
    int ret = sfb__replicas_open(&w->replicas);
    if (!ret) ret = join(w);
    if (!ret) ret = prepare(w);
    if (ret) return ret;
    /* attach marks SFB__PH_SHAPES between the shapes' barrier and the engine */
    /* a peer's frame this rank cannot apply may come during attach's
     * barrier: the peer must hear why (else it names this rank's exit) */
    if ((ret = attach(w))) return tell_peers(w, ret);
    /* a joiner: the run's end and clocks per epoch, as the grow's members
     * send them right after the replicas (train.c, grow) */
    if (w->joined && (ret = sfb_job_broadcast(w->job, 0, w->joined_run, sizeof w->joined_run)))
        return ret;
    /* a resumed auto run attached the checkpoint's engines: no predictions */
    if ((ret = sfb__trials_open(&w->trials, w->job, s->trial_clocks, w->start))) return ret;
    sfb__rng_seed2(&w->debug_rng, s->seed, 0x5eed0000u + w->rank);
    if (w->start) w->debug_rng = w->resume_rng;
    /* a joiner's file is its own: its rank may be a live worker's first one */
    ret = w->joined ? sfb__metrics_open_joined(&w->metrics, s->metrics_out, w->rank, w->start)
                    : sfb__metrics_open(&w->metrics, s->metrics_out, w->rank);
    if (!ret) sfb__engines_event(w);
    sfb__phase_mark(SFB__PH_ENGINE);
    return ret;
}
