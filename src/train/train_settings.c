/* Training settings: defaults, the step-size schedules, and the checks a
 * run's settings pass before anything starts (src/train/train.c runs the loop). */
#include "config.h"
#include <sfb/model.h>
#include <sfb/topo.h>
#include <sfb/train.h>
#include "src/base/util.h"
#include "src/job/job_internal.h"
#include "src/train/train_settings.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void sfb_train_default_settings(struct sfb_train_settings *s)
{
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->version = SFB_TRAIN_SETTINGS_VERSION;
    s->model = "mlr";
    s->data = "fashion-mnist";
    sfb_libsvm_default_settings(&s->libsvm);
    s->batch = 0;
    s->epochs = 10;
    s->lr = 0; /* the model's default */
    s->lr_schedule = SFB_LR_INVSQRT;
    s->lr_decay = 0.5;
    s->lambda = -1;
    s->seed = 1;
    s->threads = 1;
    s->eval_every = 1;
    s->sync = "sfb";
    s->staleness = 0;
    s->apply_early = -1;
    s->peer_timeout = 5.0;
    s->stall_timeout = 300.0;
    s->topology = "full";
    s->check_every = 100;
}

static int check_version(const char *fn, const struct sfb_train_settings *s)
{
    return sfb__check_version(fn, "sfb_train_settings", "sfb_train_default_settings", s->version,
                              SFB_TRAIN_SETTINGS_VERSION, s->reserved, sizeof s->reserved);
}

double sfb_train_lr0(const struct sfb_train_settings *s)
{
    SFB_ARG_OR(s, NAN);
    if (check_version(__func__, s)) return NAN;
    if (s->lr > 0) return s->lr;
    const struct sfb_model_ops *ops = s->model ? sfb_model_find(s->model) : NULL;
    return ops ? ops->default_lr : 1.0;
}

double sfb_train_lr(const struct sfb_train_settings *s, uint64_t clock, uint64_t cpe)
{
    SFB_ARG_OR(s, NAN);
    if (check_version(__func__, s)) return NAN;
    double lr = sfb_train_lr0(s);
    /* Default period: the model's (mlp: an epoch), else 1 % of an epoch, so
     * the step decays like 1/sqrt(t) early on whatever the batch size. */
    const struct sfb_model_ops *ops = s->model ? sfb_model_find(s->model) : NULL;
    double epochs = ops && ops->default_lr_period_epochs > 0 ? ops->default_lr_period_epochs : 0;
    double period = (double)(s->lr_period ? s->lr_period
                             : epochs > 0 ? SFB_MAX((uint64_t)llround(epochs * (double)cpe), (uint64_t)1)
                                          : SFB_MAX(cpe / 100, (uint64_t)1));
    switch (s->lr_schedule) {
    case SFB_LR_INVSQRT:
        return lr / sqrt(1.0 + (double)clock / period);
    case SFB_LR_STEP:
        return lr * pow(s->lr_decay, floor((double)clock / period));
    case SFB_LR_CONSTANT:
    default:
        return lr;
    }
}

/* How the workers talk: progress, bandwidth budget, priority, factor precision. */
static int check_network(const struct sfb_train_settings *s)
{
    if (s->progress && strcmp(s->progress, "auto") && strcmp(s->progress, "spin") &&
        strcmp(s->progress, "block"))
        return sfb__error(-EINVAL, "progress \"%s\" is not auto, spin or block", s->progress);
    int ret = sfb__job_check_priority(s->priority);
    if (ret) return ret;
    if (s->factor_dtype && strcmp(s->factor_dtype, "f32") && strcmp(s->factor_dtype, "bf16"))
        return sfb__error(-EINVAL, "factor_dtype \"%s\" is not f32 or bf16", s->factor_dtype);
    if (s->dense_dtype && strcmp(s->dense_dtype, "f32") && strcmp(s->dense_dtype, "bf16"))
        return sfb__error(-EINVAL, "dense_dtype \"%s\" is not f32 or bf16", s->dense_dtype);
    if (!(s->bandwidth >= 0) || !isfinite(s->bandwidth))
        return sfb__error(-EINVAL, "bandwidth must be a positive number of bytes/s (or 0: "
                          "none), not %g", s->bandwidth);
    return 0;
}

/* A finite number >= lo read from the environment variable `name` (value
 * `v`): 0 with *out set, else -SFB_EUSAGE naming it (and `flag`, the
 * command-line option that sets it). */
static int env_real(const char *name, const char *flag, const char *v, double lo, double *out)
{
    char *end = NULL;
    errno = 0;
    double d = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(d) || !(d >= lo))
        return sfb__error(-SFB_EUSAGE, "%s=\"%s\" (%s): expected a number >= %g", name, v,
                          flag, lo);
    *out = d;
    return 0;
}

int sfb__train_debug_read(struct sfb__train_debug *d, uint32_t world)
{
    d->delay_ms = 0;
    d->slow_rank = -1;
    d->slow_factor = 1;
    const char *delay = getenv("SFB_DEBUG_DELAY_MS"), *rank = getenv("SFB_DEBUG_SLOW_RANK"),
               *factor = getenv("SFB_DEBUG_SLOW_FACTOR");
    int ret = 0;
    if (delay && *delay)
        ret = env_real("SFB_DEBUG_DELAY_MS", "--debug-delay-ms", delay, 0, &d->delay_ms);
    if (!ret && factor && *factor)
        ret = env_real("SFB_DEBUG_SLOW_FACTOR", "--debug-slow-factor", factor, 1,
                       &d->slow_factor);
    if (!ret && rank && *rank) {
        uint64_t r;
        if ((ret = sfb__parse_env_u64("SFB_DEBUG_SLOW_RANK", rank, 0, INT32_MAX, &r)))
            return sfb__error(ret, "%s (--debug-slow-rank)", sfb_last_error());
        if (world && r >= world)
            return sfb__error(-SFB_EUSAGE, "--debug-slow-rank %llu (SFB_DEBUG_SLOW_RANK): the "
                              "job has ranks 0..%u", (unsigned long long)r, world - 1);
        d->slow_rank = (int)r;
    }
    d->n_die = 0;
    const char *die = getenv("SFB_DEBUG_DIE_AT");
    for (const char *p = die; !ret && p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0)) {
        unsigned r;
        long long c;
        int used = 0;
        if (d->n_die == 8 || sscanf(p, "%u:%lld%n", &r, &c, &used) != 2 || c < 0 ||
            (p[used] && p[used] != ',') || (world && r >= world))
            return sfb__error(-SFB_EUSAGE, "SFB_DEBUG_DIE_AT=\"%s\": expected RANK:CLOCK[,...] "
                              "(at most 8), ranks of the job (0..%u)", die,
                              world ? world - 1 : 0);
        d->die_rank[d->n_die] = (int)r;
        d->die_clock[d->n_die++] = c;
    }
    return ret;
}

/* Whether --sync names the engine "sfb" for every matrix (an elastic job's
 * only engine): the registry's answer, not a name compared here. */
static int sync_is_sfb(const char *sync)
{
    int e[SFB_MODEL_MAX_MATRICES];
    uint32_t n = 0;
    if (!sync) return 1; /* the default */
    if (sfb__job_sync_is_auto(sync) || sfb__job_sync_parse(sync, e, SFB_MODEL_MAX_MATRICES, &n))
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (e[i] != sfb__job_engine_find("sfb")) return 0;
    return 1;
}

int sfb_train_check_settings(const struct sfb_train_settings *s, uint32_t world)
{
    if (!s) return sfb__error(-EINVAL, "no settings");
    int ret = check_version(__func__, s);
    if (!ret)
        ret = sfb__check_version(__func__, "sfb_libsvm_settings", "sfb_libsvm_default_settings",
                                 s->libsvm.version, SFB_LIBSVM_SETTINGS_VERSION,
                                 s->libsvm.reserved, sizeof s->libsvm.reserved);
    if (ret) return ret;
    if (!s->model || !sfb_model_find(s->model))
        return sfb__error(-EINVAL, "unknown model \"%s\" (known: %s)", s->model ? s->model : "",
                          sfb_model_names());
    if (!s->data) return sfb__error(-EINVAL, "no data given");
    ret = check_network(s);
    if (ret) return ret;
    if (!(s->lr >= 0) || !isfinite(s->lr))
        return sfb__error(-EINVAL, "learning rate must be a positive number, not %g", s->lr);
    if (!isfinite(s->lambda)) return sfb__error(-EINVAL, "lambda must be a number >= 0");
    if (s->epochs == 0 && s->clocks == 0)
        return sfb__error(-EINVAL, "nothing to do: epochs and clocks are both 0");
    if (s->staleness < -1) return sfb__error(-EINVAL, "staleness must be >= -1");
    if (s->ordered && s->staleness != 0)
        return sfb__error(-SFB_EUSAGE, "--ordered applies under BSP (--staleness 0), not "
                          "--staleness %lld", (long long)s->staleness);
    if (!(s->link_gbps >= 0) || s->link_gbps > 1e6)
        return sfb__error(-EINVAL, "--link-gbps %g: want a bandwidth in (0, 1e6] Gbit/s (0: "
                          "measure)", s->link_gbps);
    if (!(s->latency_us >= 0) || s->latency_us > 1e9)
        return sfb__error(-EINVAL, "--latency-us %g: want a latency in (0, 1e9] us (0: measure)",
                          s->latency_us);
    /* one engine, or one per matrix (checked against the model's matrices
     * at attach); an overlay needs one that relays */
    int engines[SFB_MODEL_MAX_MATRICES] = {0}; /* registry indices; 0: the default, sfb */
    uint32_t nsync = 1; /* auto: SFB relays whatever FMS does not carry */
    if (!sfb__job_sync_is_auto(s->sync) &&
        sfb__job_sync_parse(s->sync, engines, SFB_MODEL_MAX_MATRICES, &nsync))
        return -SFB_EUSAGE;
    struct sfb__job_engine_info engine = {0}, e;
    for (uint32_t i = 0; i < nsync; i++)
        if (!sfb__job_engine_info((size_t)engines[i], &e) && (!engine.name || e.overlays))
            engine = e;
    const char *topo = s->topology ? s->topology : "full";
    int overlay = sfb_topo_is_overlay(topo);
    if (overlay < 0)
        return sfb__error(-SFB_EUSAGE, "unknown topology \"%s\" (%s)", topo, sfb_topo_names());
    if (overlay && !engine.overlays) {
        char relaying[128] = "";
        for (size_t i = 0, len = 0; !sfb__job_engine_info(i, &e) && len < sizeof relaying; i++)
            if (e.overlays)
                len += (size_t)snprintf(relaying + len, sizeof relaying - len, "%s--sync %s",
                                        len ? " or " : "", e.name);
        return sfb__error(-SFB_EUSAGE, "--topology %s applies to %s; --sync %s sends to its "
                          "peers directly", topo, relaying, engine.name);
    }
    if (!overlay && s->degree)
        return sfb__error(-SFB_EUSAGE, "--degree applies to an overlay; add --topology halton");
    if (!overlay && s->flush_clock)
        return sfb__error(-SFB_EUSAGE, "--flush applies to an overlay; add --topology halton");
    if (s->checkpoint_dir && !s->checkpoint_every)
        return sfb__error(-SFB_EUSAGE, "--checkpoint-dir needs --checkpoint-every N");
    /* A checkpoint drains mid-run; a clock-flushing relay would leave clock
     * mode for good after its drain (sfb/broadcast.c). */
    if ((s->checkpoint_every || s->resume_dir) && s->flush_clock)
        return sfb__error(-SFB_EUSAGE, "--checkpoint-every and --resume need --flush eager "
                          "(a checkpoint drains the relays mid-run)");
    if (s->elastic > 1) return sfb__error(-SFB_EUSAGE, "elastic %u: expected 0 or 1", s->elastic);
    if (s->elastic && !sync_is_sfb(s->sync))
        return sfb__error(-SFB_EUSAGE, "--elastic runs --sync sfb, not --sync %s: FMS keeps each "
                          "matrix's rows on one worker's server, which dies with it", s->sync);
    if (s->elastic && s->staleness != 0)
        return sfb__error(-SFB_EUSAGE, "--elastic runs at --staleness 0 (not %lld): under SSP "
                          "the survivors' replicas hold different updates, none of them a state "
                          "every update is in or out of whole", (long long)s->staleness);
    if (s->elastic && s->flush_clock)
        return sfb__error(-SFB_EUSAGE, "--elastic needs --flush eager (relays that forward as "
                          "frames come)");
    if (s->trial_clocks && !sfb__job_sync_is_auto(s->sync))
        return sfb__error(-SFB_EUSAGE, "--trial-clocks measures --sync auto's choice; add "
                          "--sync auto");
    if (s->trial_clocks && s->flush_clock)
        return sfb__error(-SFB_EUSAGE, "--trial-clocks needs --flush eager (a change of "
                          "engines drains the relays mid-run)");
    /* The same bounds sfb/broadcast.c enforces when the relay opens, checked
     * here so a launcher refuses them once, before any worker starts. */
    if (s->flush_clock && (s->staleness < 0 || s->staleness > 48))
        return sfb__error(-SFB_EUSAGE, "--flush clock needs a bounded staleness (0..48), not %lld",
                          (long long)s->staleness);
    if (world > 1 && overlay) {
        struct sfb_topo *t = NULL;
        ret = sfb_topo_open(&t, topo, world, s->degree);
        if (ret) return ret;
        uint32_t diam = sfb_topo_diameter(t);
        sfb_topo_close(&t);
        if (s->flush_clock && diam > (uint64_t)s->staleness + 1)
            return sfb__error(-SFB_EUSAGE,
                              "--flush clock moves a frame one hop per clock, so SSP needs "
                              "--staleness >= diameter - 1 = %u for --topology %s with %u "
                              "workers (now %lld)",
                              diam - 1, topo, world, (long long)s->staleness);
    }
    struct sfb__train_debug debug;
    return sfb__train_debug_read(&debug, world);
}

int sfb_train_set_model_options(struct sfb_train_settings *t,
                                const struct sfb_model_settings *ms)
{
    SFB_ENTER();
    SFB_ARG(t);
    SFB_ARG(ms);
    int ret = check_version(__func__, t);
    if (!ret)
        ret = sfb__check_version(__func__, "sfb_model_settings", "sfb_model_default_settings",
                                 ms->version, SFB_MODEL_SETTINGS_VERSION, ms->reserved,
                                 sizeof ms->reserved);
    if (ret) return ret;
    if (ms->proj_dim) t->proj_dim = ms->proj_dim;
    if (ms->knn_k) t->knn_k = ms->knn_k;
    if (ms->dict_size) t->dict_size = ms->dict_size;
    if (ms->code_steps) t->code_steps = ms->code_steps;
    if (ms->simi_pairs) t->simi_pairs = ms->simi_pairs;
    if (ms->diff_pairs) t->diff_pairs = ms->diff_pairs;
    if (ms->hidden.n) t->hidden = ms->hidden;
    return 0;
}

const char *sfb_sync_registry_name(size_t i)
{
    struct sfb__job_engine_info e;
    return sfb__job_engine_info(i, &e) ? NULL : e.name;
}

const char *sfb_sync_registry_summary(size_t i)
{
    struct sfb__job_engine_info e;
    return sfb__job_engine_info(i, &e) ? NULL : e.summary;
}

int sfb_sync_registry_find(const char *name)
{
    return sfb__job_engine_find(name);
}

int sfb__train_validate(const struct sfb_train_settings *s)
{
    return sfb_train_check_settings(s, 0);
}
