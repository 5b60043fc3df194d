/* The job API (include/sfb/job.h): a comm context (src/comm/comm.h), an SSP
 * clock table and a sync engine (sfb/sync.h) behind one opaque handle. It
 * is the only place above the network layer that holds a comm context. */
#include "config.h"
#include <sfb/job.h>
#include <sfb/sf.h>
#include "sfb/codec.h"
#include "sfb/parts.h"
#include "sfb/plan.h"
#include "sfb/sync.h"
#include "src/base/util.h"
#include "src/base/timeline.h"
#include "src/base/trace.h"
#include "src/comm/comm.h"
#include "src/ssp/ssp.h"
#include "src/job/job_internal.h"
#include "src/job/job_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>


/* The first versions' sizes of the sized results (sfb/job.h) */
#define CLOCK_V1 SFB_END_OF(struct sfb_job_clock, budget_wait_s)
#define STATS_V1 SFB_END_OF(struct sfb_job_stats, publish_wait_s)

/* A collective call of the job's begins and ends (below) */
static void enter_call(struct sfb_job *job, const char *what);
static int call_end(struct sfb_job *job, int ret);

void sfb_job_default_settings(struct sfb_job_settings *s)
{
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->version = SFB_JOB_SETTINGS_VERSION;
    s->progress = "auto";
    s->cpu_bind = "auto";
    s->heartbeat_s = 0.5;
    s->peer_timeout_s = 5.0;
    s->stall_timeout_s = 300.0;
    s->bootstrap_timeout_s = 60.0;
}

void sfb_job_default_attach(struct sfb_job_attach *a)
{
    if (!a) return;
    memset(a, 0, sizeof *a);
    a->version = SFB_JOB_ATTACH_VERSION;
    a->n = 1;
    a->engine = "sfb";
    a->apply_early = -1;
}

/* A three-way string setting: *out = the index of `v` in names (NULL:
 * names[0], the default), else -SFB_EUSAGE naming the field and the choices. */
static int choose(const char *field, const char *v, const char *const names[3], int *out)
{
    if (!v) v = names[0];
    for (*out = 0; *out < 3; ++*out)
        if (!strcmp(v, names[*out])) return 0;
    return sfb__error(-SFB_EUSAGE, "sfb_job_open: %s \"%s\": expected %s, %s or %s", field, v,
                      names[0], names[1], names[2]);
}

static int comm_settings(const struct sfb_job_settings *s, struct sfb__comm_settings *cs)
{
    int ret = sfb__check_version("sfb_job_open", "sfb_job_settings", "sfb_job_default_settings",
                                 s->version, SFB_JOB_SETTINGS_VERSION, s->reserved,
                                 sizeof s->reserved);
    if (ret) return ret;
    sfb__comm_default_settings(cs);
    static const char *const progress[] = {"auto", "spin", "block"}; /* enum sfb__progress */
    static const char *const bind[] = {"auto", "none", "cpu"};       /* enum sfb__cpu_bind */
    int progress_i, bind_i;
    if ((ret = choose("progress", s->progress, progress, &progress_i)) ||
        (ret = choose("cpu_bind", s->cpu_bind, bind, &bind_i)))
        return ret;
    cs->progress = (enum sfb__progress)progress_i;
    cs->cpu_bind = (enum sfb__cpu_bind)bind_i;
    if (!(s->heartbeat_s > 0) || !(s->peer_timeout_s > 0) || !(s->bootstrap_timeout_s > 0))
        return sfb__error(-SFB_EUSAGE, "sfb_job_open: heartbeat %g s, peer timeout %g s and "
                          "bootstrap timeout %g s must all be positive", s->heartbeat_s,
                          s->peer_timeout_s, s->bootstrap_timeout_s);
    if (s->world > INT32_MAX) /* a -1 passed through an unsigned field, say */
        return sfb__error(-SFB_EUSAGE, "sfb_job_open: world %u: expected 1 .. %d (or 0: from "
                          "the launcher)", s->world, INT32_MAX);
    if (s->world > 0 && s->rank >= s->world)
        return sfb__error(-SFB_EUSAGE, "sfb_job_open: rank %u of world %u", s->rank, s->world);
    cs->provider = s->provider;
    cs->heartbeat_s = s->heartbeat_s;
    cs->peer_timeout_s = s->peer_timeout_s;
    cs->bootstrap_timeout_s = s->bootstrap_timeout_s;
    cs->rank = (int)s->rank;
    cs->world = (int)s->world;
    cs->rendezvous = s->rendezvous;
    cs->job_key = s->job_key;
    if (!(s->bandwidth >= 0) || !isfinite(s->bandwidth))
        return sfb__error(-SFB_EUSAGE, "sfb_job_open: bandwidth %g bytes/s: expected a positive "
                          "number, or 0 for none", s->bandwidth);
    cs->bandwidth = s->bandwidth;
    if (!(s->stall_timeout_s >= 0) || !isfinite(s->stall_timeout_s))
        return sfb__error(-SFB_EUSAGE, "sfb_job_open: stall timeout %g s: expected a positive "
                          "number of seconds, or 0 for none", s->stall_timeout_s);
    cs->stall_timeout_s = s->stall_timeout_s;
    if (s->elastic > 1)
        return sfb__error(-SFB_EUSAGE, "sfb_job_open: elastic %u: expected 0 or 1", s->elastic);
    cs->elastic = (int)s->elastic;
    return 0;
}

/* Rank 0 says which dense-math kernels the job runs where OpenBLAS's own
 * choice was the generic ones (src/factor/blas.c). */
static void say_blas_kernels(void)
{
    const char *better = sfb_blas_better_core(), *found = getenv("SFB_BLAS_FOUND");
    const char *core = sfb_blas_core();
    if (better)
        SFB_LOG_W("OpenBLAS runs its generic %s kernels on this processor, which has %s: "
                  "sgemm runs several times slower than it could; start the job's processes "
                  "with OPENBLAS_CORETYPE=%s (sfb run and sfb launch do)",
                  core, strcmp(better, "SkylakeX") ? "AVX2" : "AVX-512", better);
    else if (found && strcasecmp(found, core))
        SFB_LOG_I("OpenBLAS runs its %s kernels, chosen by sfb: OpenBLAS took this processor "
                  "for a %s (OPENBLAS_CORETYPE=%s keeps that)", core, found, found);
}

int sfb_job_open(struct sfb_job **job_out, const struct sfb_job_settings *s)
{
    SFB_ENTER();
    SFB_ARG(job_out);
    *job_out = NULL;
    SFB_ARG(s);
    struct sfb__comm_settings cs;
    int ret = comm_settings(s, &cs);
    /* before the rendezvous: a rank that could not compute fails alone */
    if (!ret) ret = sfb_blas_reserve();
    if (ret) return ret;
    struct sfb_job *job = calloc(1, sizeof *job);
    if (!job) return sfb__error(-ENOMEM, "sfb_job_open: out of memory");
    job->join_fd = -1;
    job->join_clock = -1;
    /* an elastic job: a joiner's handshake first, which says where to meet */
    ret = cs.elastic ? sfb__job_elastic_open(job, &cs, s->join_text) : 0;
    if (!ret && !job->comm) ret = sfb__comm_open(&job->comm, &cs);
    if (!ret && cs.elastic) sfb__job_elastic_listen(job);
    if (ret) {
        sfb__comm_close(&job->comm);
        sfb__job_elastic_close(job);
        free(job);
        return ret;
    }
    job->peer_timeout_s = s->peer_timeout_s;
    job->cs = cs;
    job->cs.rendezvous = job->cs.job_key = NULL;
    job->cs.rank = job->cs.world = 0;
    if (s->provider && !(job->provider = strdup(s->provider))) {
        sfb__comm_close(&job->comm);
        free(job);
        return sfb__error(-ENOMEM, "sfb_job_open: out of memory");
    }
    job->cs.provider = job->provider;
    if (sfb__comm_rank(job->comm) == 0) say_blas_kernels();
    const char *unchecked = getenv("SFB_DEBUG_PUBLISH_UNCHECKED");
    if ((job->debug_unchecked = unchecked && !strcmp(unchecked, "1")))
        SFB_LOG_W("SFB_DEBUG_PUBLISH_UNCHECKED=1: this rank publishes factors unchecked");
    /* (tests of the frame checks below the agreements: test/integration/ranks_disagree.sh) */
    const char *skip = getenv("SFB_DEBUG_SKIP_AGREE");
    job->debug_skip_agree = skip && !strcmp(skip, "1");
    const char *timeline = getenv("SFB_TIMELINE");
    if (timeline && *timeline &&
        (ret = sfb__trace_open(timeline, sfb__comm_rank(job->comm)))) {
        sfb__comm_close(&job->comm);
        sfb__job_elastic_close(job);
        free(job->provider);
        free(job);
        return ret;
    }
    *job_out = job;
    return 0;
}

/* (A job whose shrink failed has no comm: it can only be closed.) */
uint32_t sfb_job_rank(const struct sfb_job *job)
{
    SFB_ARG_OR(job, UINT32_MAX);
    return job->comm ? sfb__comm_rank(job->comm) : UINT32_MAX;
}

uint32_t sfb_job_world(const struct sfb_job *job)
{
    SFB_ARG_OR(job, UINT32_MAX);
    return job->comm ? sfb__comm_world(job->comm) : UINT32_MAX;
}

/* A job whose shrink failed (job_elastic.c) has no comm left. */
static int ended(const char *fn)
{
    return sfb__error(-SFB_EPEER, "%s: the job ended (going on without a dead rank failed)", fn);
}

static int check_attach(const struct sfb_job *job, const struct sfb_job_attach *a)
{
    int ret = sfb__check_version("sfb_job_attach", "sfb_job_attach", "sfb_job_default_attach",
                                 a->version, SFB_JOB_ATTACH_VERSION, a->reserved,
                                 sizeof a->reserved);
    if (ret) return ret;
    if (job->engine) return sfb__error(-SFB_EUSAGE, "sfb_job_attach: already attached");
    if (a->n == 0 || a->n > SFB_JOB_MAX_MATRICES || !a->mats)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: %u matrices%s: expected 1 to %d", a->n,
                          a->mats ? "" : " (mats is NULL)", SFB_JOB_MAX_MATRICES);
    if (a->max_s == 0) return sfb__error(-SFB_EUSAGE, "sfb_job_attach: max_s is 0");
    for (uint32_t m = 0; m < a->n; m++)
        if (!a->mats[m].data || !a->mats[m].rows || !a->mats[m].cols)
            return sfb__error(-SFB_EUSAGE, "sfb_job_attach: matrix %u is %u x %u at %p", m,
                              a->mats[m].rows, a->mats[m].cols, (void *)a->mats[m].data);
    if (a->staleness < -1)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: staleness %lld (expected -1 or more)",
                          (long long)a->staleness);
    if (a->start_clock < 0)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: start clock %lld",
                          (long long)a->start_clock);
    if (a->reattach > 1)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: reattach %u: expected 0 or 1",
                          a->reattach);
    /* (the same bounds as the CLI's --link-gbps and --latency-us) */
    if (!(a->link_gbps >= 0) || a->link_gbps > 1e6)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: link_gbps %g: expected a bandwidth in "
                          "(0, 1e6] Gbit/s, or 0 (the link probe's)", a->link_gbps);
    if (!(a->latency_us >= 0) || a->latency_us > 1e9)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: latency_us %g: expected a latency in "
                          "(0, 1e9] us, or 0 (the link probe's)", a->latency_us);
    return 0;
}

/* The per-matrix state of n matrices (a failed attach's freed first). */
static int alloc_matrices(struct sfb_job *job, uint32_t n)
{
    sfb__job_free_matrices(job);
    job->engine_of = calloc(n, sizeof *job->engine_of);
    job->prec = calloc(n, sizeof *job->prec);
    job->dense_prec = calloc(n, sizeof *job->dense_prec);
    job->staged = calloc(n, sizeof *job->staged);
    job->nstaged = job->staged ? n : 0;
    job->plan_ms = calloc(n, sizeof *job->plan_ms);
    job->mats = calloc(n, sizeof *job->mats);
    job->done = calloc((n + 63) / 64, sizeof *job->done);
    job->engines = calloc((size_t)n * 4 + 1, 1); /* "sfb," per matrix */
    if (!job->engine_of || !job->prec || !job->dense_prec || !job->staged || !job->plan_ms ||
        !job->mats || !job->done || !job->engines)
        return sfb__error(-ENOMEM, "sfb_job_attach: out of memory for %u matrices", n);
    return 0;
}

/* a->factor_dtype or a->dense_dtype (`field`, value `text`): out, one
 * precision per matrix ("f32" or "bf16", for all or one per matrix, comma
 * separated; NULL: "f32"). */
static int parse_dtype(const struct sfb_job_attach *a, const char *field, const char *text,
                       uint8_t *out)
{
    const char *p = text ? text : "f32";
    uint32_t n = 0;
    for (;;) {
        size_t len = strcspn(p, ",");
        unsigned prec;
        if (len == 3 && !strncmp(p, "f32", 3)) prec = SFB_WIRE_F32;
        else if (len == 4 && !strncmp(p, "bf16", 4)) prec = SFB_WIRE_BF16;
        else
            return sfb__error(-SFB_EUSAGE, "sfb_job_attach: %s \"%s\": entry %u is "
                              "\"%.*s\", expected f32 or bf16 (one for all matrices, or one per "
                              "matrix, comma separated)", field, text, n, (int)SFB_MIN(len, 32),
                              p);
        if (n == a->n)
            return sfb__error(-SFB_EUSAGE, "sfb_job_attach: %s \"%s\" names more "
                              "precisions than the %u matrices", field, text, a->n);
        out[n++] = (uint8_t)prec;
        if (!p[len]) break;
        p += len + 1;
    }
    if (n != 1 && n != a->n)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: %s \"%s\" names %u precisions "
                          "for %u matrices (one for all, or one per matrix)", field, text, n,
                          a->n);
    for (uint32_t m = n; m < a->n; m++) out[m] = out[0];
    return 0;
}

/* The "auto" entries: per matrix the engine the cost model predicts to
 * be faster per clock (sfb/plan.h). Collective. */
static int choose_auto(struct sfb_job *job, const struct sfb_job_attach *a)
{
    struct sfb__plan_job pj = {
        .comm = job->comm, .mats = a->mats, .n = a->n, .max_s = a->max_s,
        .topology = a->topology, .degree = a->degree, .flush_clock = a->flush_clock,
        .link_gbps = a->link_gbps, .latency_us = a->latency_us, .sf_bytes = a->sf_bytes,
        .sf_nnz = a->sf_nnz, .prec = job->prec, .dense_prec = job->dense_prec,
        .ordered = a->ordered != 0 || job->cs.elastic};
    int ret = sfb__plan_auto(&pj, job->engine_of, job->plan_ms, &job->plan);
    job->planned = !ret;
    return ret;
}

static int start_engine(struct sfb_job *job, const struct sfb_job_attach *a)
{
    if (a->topology && !(job->topology = strdup(a->topology)))
        return sfb__error(-ENOMEM, "sfb_job_attach: out of memory");
    job->env = (struct sfb__sync_env){
        .comm = job->comm,
        .mats = job->mats,
        .nmat = job->nmat,
        .ssp = &job->ssp,
        .apply_early = a->apply_early < 0 ? a->staleness != 0 : a->apply_early,
        .ordered = a->ordered != 0 || job->cs.elastic,
        .staleness = a->staleness,
        .topology = job->topology,
        .degree = a->degree,
        .flush_clock = a->flush_clock,
        .start_clock = a->start_clock,
        .engine_of = job->engine_of,
        .factor_prec = job->prec,
        .dense_prec = job->dense_prec,
    };
    int ret = sfb__parts_settings(a->priority, sfb__comm_budget_rate(job->comm),
                                  sfb__comm_world(job->comm), job->peer_timeout_s, a->mats, a->n,
                                  a->max_s, &job->env.priority, &job->env.part_bytes,
                                  &job->env.msg_cap);
    return ret ? ret : sfb__job_open_engine(job);
}

int sfb_job_attach(struct sfb_job *job, const struct sfb_job_attach *a)
{
    SFB_ENTER();
    SFB_ARG(job);
    if (!job->comm) return ended(__func__);
    SFB_ARG(a);
    int ret = check_attach(job, a);
    if (!ret) ret = alloc_matrices(job, a->n);
    if (!ret) ret = sfb__plan_engines("sfb_job_attach", a->engine, a->n, job->engine_of);
    if (!ret) ret = sfb__job_elastic_check(job, a);
    if (!ret) ret = parse_dtype(a, "factor_dtype", a->factor_dtype, job->prec);
    if (!ret) ret = parse_dtype(a, "dense_dtype", a->dense_dtype, job->dense_prec);
    if (ret) return ret;
    for (uint32_t m = 0; m < a->n; m++) job->mats[m] = a->mats[m];
    job->nmat = a->n;
    job->max_s = a->max_s;
    job->next = a->start_clock;
    job->reattach = (int)a->reattach;
    /* every rank the same shapes and settings (a joiner's attach meets the
     * grow's barrier instead: sfb__job_joined_attach) */
    if (!job->join_attach_due && !job->debug_skip_agree) {
        enter_call(job, "attach");
        if ((ret = call_end(job, sfb__job_agree_attach(job, a)))) return ret;
    }
    if ((ret = sfb__job_set_shapes(job))) return ret;
    sfb__phase_mark(SFB__PH_SHAPES); /* the run's timeline (src/base/timeline.h) */
    if (job->join_attach_due && (ret = sfb__job_joined_attach(job, a))) return ret;
    job->join_attach_due = 0;
    if (!job->ssp_open) {
        ret = sfb__ssp_init(&job->ssp, sfb__comm_world(job->comm), a->staleness, a->start_clock);
        if (ret) return ret;
        job->ssp_open = 1;
    }
    if (sfb__sync_is_auto(a->engine) && (ret = choose_auto(job, a))) return ret;
    return start_engine(job, a);
}

/* Adds what a wait or drain did to the caller's acct (the fields that fit
 * in its size); min_applied: the wait's (INT64_MIN: leave it). */
static void to_public(struct sfb_job_clock *acct, const struct sfb__sync_clock *in,
                      int64_t min_applied)
{
    if (!acct) return;
    struct sfb_job_clock out;
    sfb__sized_copy(&out, sizeof out, acct, acct->size);
    out.wait_s += in->wait_s;
    out.apply_s += in->apply_s;
    if (in->staleness > out.staleness) out.staleness = in->staleness;
    out.applied += in->applied;
    out.applied_early += in->applied_early;
    out.budget_wait_s += in->budget_wait_s;
    if (min_applied != INT64_MIN) out.min_applied = min_applied;
    sfb__sized_copy(acct, acct->size, &out, sizeof out);
}

static int need_engine(const struct sfb_job *job, const char *fn)
{
    return job->engine ? 0 : sfb__error(-SFB_EUSAGE, "%s: no matrices attached", fn);
}

int sfb_job_wait(struct sfb_job *job, int64_t clock, struct sfb_job_clock *acct)
{
    SFB_ENTER();
    SFB_ARG(job);
    int ret = acct ? SFB_CHECK_SIZE(acct, "sfb_job_clock", CLOCK_V1) : 0;
    if (!ret) ret = need_engine(job, __func__);
    if (ret) return ret;
    if (job->waited && job->ndone) {
        uint32_t m = 0;
        while (job->done[m / 64] >> (m % 64) & 1) m++;
        return sfb__error(-SFB_EUSAGE, "sfb_job_wait: clock %lld: matrix %u of clock %lld is not "
                          "published yet (%u of %u are): publish every matrix of a clock before "
                          "the next wait", (long long)clock, m, (long long)job->next, job->ndone,
                          job->nmat);
    }
    if (clock != job->next || job->waited)
        return sfb__error(-SFB_EUSAGE, "sfb_job_wait: clock %lld out of order: the next wait is "
                          "for clock %lld%s", (long long)clock, (long long)job->next,
                          job->waited ? ", after its publish" : "");
    struct sfb__sync_clock a = {0};
    double t0 = sfb__trace_on() ? sfb__trace_us() : 0;
    if ((ret = job->engine->wait(job->engine_priv, clock, &a))) return ret;
    sfb__trace_span(SFB__TRACK_COMPUTE, "wait", t0, clock, -1, -1, 0);
    if ((ret = sfb__ssp_record(&job->ssp, clock))) return ret;
    job->waited = 1;
    to_public(acct, &a, job->ssp.record[clock]);
    return 0;
}

/* A NaN or an infinity in a published factor would poison every replica;
 * the receivers refuse it too (they cannot tell a bug from an attack), so
 * publishing one would fail the job anyway, only later and elsewhere. */
static int check_finite(const struct sfb_job *job, const char *fn, int64_t clock,
                        const struct sfb_sf *sf, uint32_t m)
{
    char what[96];
    if (!job->debug_unchecked && sfb__sf_nonfinite(sf, what, sizeof what))
        return sfb__error(-ERANGE, "%s: clock %lld, matrix %u: %s (a factor must hold finite "
                          "numbers only: nothing was published)", fn, (long long)clock, m, what);
    return 0;
}

static int check_sf(const struct sfb_job *job, const char *fn, const struct sfb_sf *sf,
                    uint32_t m)
{
    if (sf->rows != job->mats[m].rows || sf->cols != job->mats[m].cols)
        return sfb__error(-SFB_ESHAPE, "%s: SF %u is for %u x %u, matrix %u is %u x %u", fn, m,
                          sf->rows, sf->cols, m, job->mats[m].rows, job->mats[m].cols);
    if (sf->s == 0)
        return sfb__error(-SFB_ESHAPE, "%s: SF %u has no sample (a clock with nothing to add "
                          "publishes one sample of zeros)", fn, m);
    if (sf->s > job->max_s)
        return sfb__error(-SFB_ESHAPE, "%s: SF %u has %u samples, more than max_s %u", fn, m,
                          sf->s, job->max_s);
    if (!sf->b || (!sf->sparse_c && !sf->c) ||
        (sf->sparse_c && (!sf->c_row_ptr || !sf->c_col || !sf->c_val)))
        return sfb__error(-EINVAL, "%s: SF %u has a NULL array", fn, m);
    return 0;
}

/* The clock `clock` is the one due (waited for, not complete). */
static int check_due(const struct sfb_job *job, const char *fn, int64_t clock)
{
    if (clock != job->next || !job->waited)
        return sfb__error(-SFB_EUSAGE, "%s: clock %lld out of order: clock %lld is due, %s", fn,
                          (long long)clock, (long long)job->next,
                          job->waited ? "waited for" : "after its wait");
    return 0;
}

/* publish_one / publish_dense: clock due, m in range, not published yet. */
static int check_one(const struct sfb_job *job, const char *fn, int64_t clock, uint32_t m)
{
    int ret = check_due(job, fn, clock);
    if (ret) return ret;
    if (m >= job->nmat)
        return sfb__error(-SFB_EUSAGE, "%s: matrix %u of clock %lld: the job has %u matrices "
                          "(0 .. %u)", fn, m, (long long)clock, job->nmat, job->nmat - 1);
    if (job->done[m / 64] >> (m % 64) & 1)
        return sfb__error(-SFB_EUSAGE, "%s: matrix %u is published twice in clock %lld (once a "
                          "clock each)", fn, m, (long long)clock);
    return 0;
}

/* The clock is complete: the next wait may come. */
static void clock_done(struct sfb_job *job)
{
    memset(job->done, 0, (job->nmat + 63) / 64 * sizeof *job->done);
    job->ndone = 0;
    job->waited = 0;
    job->next++;
}

/* Matrix m of the clock due is published. */
static void one_done(struct sfb_job *job, uint32_t m)
{
    job->done[m / 64] |= 1ull << (m % 64);
    if (++job->ndone == job->nmat) clock_done(job);
}

int sfb_job_publish(struct sfb_job *job, int64_t clock, const struct sfb_sf *sf, uint32_t n)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(sf);
    int ret = need_engine(job, __func__);
    if (!ret) ret = check_due(job, __func__, clock);
    if (!ret && job->ndone)
        ret = sfb__error(-SFB_EUSAGE, "sfb_job_publish: clock %lld: %u of its %u matrices are "
                         "published one at a time already: publish the others with "
                         "sfb_job_publish_one", (long long)clock, job->ndone, job->nmat);
    if (!ret && n != job->nmat)
        ret = sfb__error(-SFB_EUSAGE, "sfb_job_publish: %u SFs for %u attached matrices", n,
                         job->nmat);
    for (uint32_t m = 0; m < n && !ret; m++) ret = check_sf(job, __func__, &sf[m], m);
    for (uint32_t m = 0; m < n && !ret; m++) ret = check_finite(job, __func__, clock, &sf[m], m);
    if (ret) return ret;
    double t0 = sfb__trace_on() ? sfb__trace_us() : 0;
    if ((ret = job->engine->publish(job->engine_priv, clock, sf, n))) return ret;
    sfb__trace_span(SFB__TRACK_COMPUTE, "publish", t0, clock, -1, -1, 0);
    clock_done(job);
    return 0;
}

/* Whether matrix m's engine checks the product it forms instead of the
 * factors being checked here (sync.h's publish_one): where the product has
 * fewer numbers than the factors (a language model's decoder: 20,000 × 201
 * against 700 × 20,201 a step), with a scale that cannot hide a factor
 * (0 · NaN is never formed: BLAS skips a zero alpha's product). */
static int product_checked(const struct sfb_job *job, uint32_t m, const struct sfb_sf *sf)
{
    if (job->debug_unchecked || !job->engine_of[m]->ops->publish_dense || !isfinite(sf->scale) ||
        sf->scale == 0)
        return 0;
    uint64_t product = (uint64_t)sf->rows * sf->cols;
    return product < (uint64_t)sf->s * sf->rows + sfb_sf_c_count(sf);
}

int sfb_job_publish_one(struct sfb_job *job, int64_t clock, uint32_t m, const struct sfb_sf *sf)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(sf);
    int ret = need_engine(job, __func__);
    if (!ret) ret = check_one(job, __func__, clock, m);
    if (!ret) ret = check_sf(job, __func__, sf, m);
    int by_product = !ret && product_checked(job, m, sf);
    if (!ret && !by_product) ret = check_finite(job, __func__, clock, sf, m);
    if (ret) return ret;
    double t0 = sfb__trace_on() ? sfb__trace_us() : 0;
    size_t at = SIZE_MAX;
    ret = job->engine->publish_one(job->engine_priv, clock, m, sf, by_product ? &at : NULL);
    if (ret == -ERANGE && at != SIZE_MAX) {
        /* the same words as the factors' own check where one of them is the
         * cause (nothing else reads them on this path) */
        if ((ret = check_finite(job, __func__, clock, sf, m))) return ret;
        return sfb__error(-ERANGE, "%s: clock %lld, matrix %u: the update's [%zu][%zu] (scale "
                          "%g × bᵀc) overflows float32 (nothing was published)", __func__,
                          (long long)clock, m, at / sf->cols, at % sf->cols, (double)sf->scale);
    }
    if (ret) return ret;
    sfb__trace_span(SFB__TRACK_COMPUTE, "publish", t0, clock, (int32_t)m, -1, 0);
    one_done(job, m);
    return 0;
}

/* Matrix m's engine can take a dense update (else -SFB_EUSAGE naming fn). */
static int need_dense(const struct sfb_job *job, const char *fn, uint32_t m)
{
    if (job->engine_of[m]->ops->publish_dense) return 0;
    return sfb__error(-SFB_EUSAGE, "%s: matrix %u is synchronized by %s, which carries factors "
                      "only (publish them with sfb_job_publish_one)", fn, m,
                      job->engine_of[m]->name);
}

int sfb_job_dense_buffer(struct sfb_job *job, uint32_t m, float **out)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(out);
    int ret = need_engine(job, __func__);
    if (ret) return ret;
    if (m >= job->nmat)
        return sfb__error(-SFB_EUSAGE, "%s: matrix %u: the job has %u matrices (0 .. %u)",
                          __func__, m, job->nmat, job->nmat - 1);
    if ((ret = need_dense(job, __func__, m))) return ret;
    if (!job->staged[m]) {
        size_t n = (size_t)job->mats[m].rows * job->mats[m].cols;
        if ((ret = sfb__comm_buf_get(job->comm, n * sizeof(float), &job->staged[m]))) return ret;
    }
    *out = (float *)(void *)job->staged[m]->data;
    return 0;
}

int sfb_job_publish_dense(struct sfb_job *job, int64_t clock, uint32_t m, float scale,
                          const float *delta)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(delta);
    int ret = need_engine(job, __func__);
    if (!ret) ret = check_one(job, __func__, clock, m);
    if (!ret) ret = need_dense(job, __func__, m);
    if (ret) return ret;
    /* sfb_job_dense_buffer's: the engine may send from it instead of a copy */
    struct sfb__buf *staged = job->staged[m];
    if (staged && (const float *)(const void *)staged->data != delta) staged = NULL;
    size_t cols = job->mats[m].cols, n = (size_t)job->mats[m].rows * cols, at = n;
    if (!job->debug_unchecked && !isfinite(scale))
        return sfb__error(-ERANGE, "sfb_job_publish_dense: clock %lld, matrix %u: scale is %g "
                          "(an update must hold finite numbers only: nothing was published)",
                          (long long)clock, m, (double)scale);
    double t0 = sfb__trace_on() ? sfb__trace_us() : 0;
    /* the engine checks the numbers in its own pass over them (sync.h) */
    ret = job->engine->publish_dense(job->engine_priv, clock, m, scale, delta, staged,
                                     job->debug_unchecked ? NULL : &at);
    if (ret == -ERANGE && at < n) {
        if (!isfinite(delta[at]))
            return sfb__error(-ERANGE, "sfb_job_publish_dense: clock %lld, matrix %u: "
                              "delta[%zu][%zu] is %g (an update must hold finite numbers only: "
                              "nothing was published)", (long long)clock, m, at / cols,
                              at % cols, (double)delta[at]);
        return sfb__error(-ERANGE, "sfb_job_publish_dense: clock %lld, matrix %u: scale × "
                          "delta[%zu][%zu] = %g × %g overflows float32 (nothing was published)",
                          (long long)clock, m, at / cols, at % cols, (double)scale,
                          (double)delta[at]);
    }
    if (ret) return ret;
    /* a buffer the engine keeps (it sends from it) is its own now: the next
     * clock gets another; one it only read (a job of one worker, bfloat16
     * rows, scale ≠ 1) stays the job's, handed out again for the next */
    if (staged && sfb__buf_shared(staged)) {
        sfb__buf_put(staged);
        job->staged[m] = NULL;
    }
    sfb__trace_span(SFB__TRACK_COMPUTE, "publish", t0, clock, (int32_t)m, -1, 0);
    one_done(job, m);
    return 0;
}

/* Waiting for updates of clocks this rank has not published would never
 * end under BSP: `last` is at most the last published clock. */
static int check_last(const struct sfb_job *job, int64_t last, const char *fn)
{
    if (last < -1 || last >= job->next)
        return sfb__error(-SFB_EUSAGE, "%s: clock %lld: expected -1 .. %lld, the last clock "
                          "published", fn, (long long)last, (long long)job->next - 1);
    return 0;
}

int sfb_job_drain(struct sfb_job *job, int64_t last, struct sfb_job_clock *acct)
{
    SFB_ENTER();
    SFB_ARG(job);
    int ret = acct ? SFB_CHECK_SIZE(acct, "sfb_job_clock", CLOCK_V1) : 0;
    if (!ret) ret = need_engine(job, __func__);
    if (!ret) ret = check_last(job, last, __func__);
    if (ret) return ret;
    struct sfb__sync_clock a = {0};
    double t0 = sfb__trace_on() ? sfb__trace_us() : 0;
    ret = job->engine->drain(job->engine_priv, last, &a);
    sfb__trace_span(SFB__TRACK_COMPUTE, "drain", t0, last, -1, -1, 0);
    to_public(acct, &a, INT64_MIN);
    return ret;
}


/* A change of the job's settings (fn: "a replan") at a clock boundary:
 * an attached, unfinished job, `last` its last clock published, the next
 * not waited for. */
static int check_boundary(const struct sfb_job *job, int64_t last, const char *fn,
                          const char *what)
{
    int ret = need_engine(job, fn);
    if (ret) return ret;
    if (job->finished) return sfb__error(-SFB_EUSAGE, "%s: the job has finished", fn);
    if (last != job->next - 1 || job->waited)
        return sfb__error(-SFB_EUSAGE, "%s: clock %lld: %s comes between the last clock's "
                          "publish and the next wait (the last clock published is %lld%s)", fn,
                          (long long)last, what, (long long)job->next - 1,
                          job->waited ? ", and the next is waited for" : "");
    return 0;
}

/* Every rank's checks of a replan (no collective yet). */
static int check_replan(const struct sfb_job *job, int64_t last, const char *engine,
                        const struct sfb__sync_desc **to)
{
    int ret = check_boundary(job, last, "sfb_job_replan", "a replan");
    if (ret) return ret;
    if (job->env.flush_clock)
        return sfb__error(-SFB_EUSAGE, "sfb_job_replan: the relays forward at clock boundaries "
                          "(flush_clock), a mode a mid-run drain ends");
    if ((ret = sfb__plan_engines("sfb_job_replan", engine, job->nmat, to))) return ret;
    for (uint32_t m = 0; m < job->nmat; m++)
        if (!to[m])
            return sfb__error(-SFB_EUSAGE, "sfb_job_replan: engine \"%s\": matrix %u is "
                              "\"auto\" (a replan names each matrix's engine)", engine, m);
    return 0;
}

/* A collective call's failure (bootstrap errors come unexplained): a peer's
 * failure if there is one, else a timeout said for what it mostly is, at
 * once (a dead or silent peer would have been found long before; the peers
 * blocked on this rank see its sockets close now, and learn why from its
 * abort). */
static int collective_failed(struct sfb_job *job, int ret)
{
    if (ret != -ETIMEDOUT) return sfb__comm_explain(job->comm, ret);
    int failed = sfb__comm_check(job->comm);
    if (failed) return failed;
    return sfb__error(ret, "%s (no rank has failed: the rank that did not come is elsewhere, "
                      "in another of the job's calls, in a long step, or waiting for updates "
                      "that a rank in this collective has not sent; every rank of a job makes "
                      "the job's collective calls in the same order)", sfb_last_error());
}

/* A collective call begins (sfb__comm_enter_call): what its peers may
 * wait for of this rank's has left through the clock published last, or
 * an earlier one where this rank serves sums it has not formed yet. */
static void enter_call(struct sfb_job *job, const char *what)
{
    int64_t done = job->next - 1;
    if (job->engine_priv && job->engine->served)
        done = SFB_MIN(done, job->engine->served(job->engine_priv));
    sfb__comm_enter_call(job->comm, what, job->call_name[0] ? job->call_name : NULL, done);
}

/* The end of a collective call (enter_call before it): its name
 * off; a verdict every rank gave (-SFB_ECONFIG, -SFB_EUSAGE: the channel is
 * in step) as it is, any other failure explained. */
static int call_end(struct sfb_job *job, int ret)
{
    sfb__comm_leave_call(job->comm);
    return !ret || ret == -SFB_ECONFIG || ret == -SFB_EUSAGE ? ret : collective_failed(job, ret);
}

int sfb_job_replan(struct sfb_job *job, int64_t last, const char *engine)
{
    SFB_ENTER();
    SFB_ARG(job);
    if (!job->comm) return ended(__func__);
    SFB_ARG(engine);
    const struct sfb__sync_desc **to = calloc(job->nmat ? job->nmat : 1, sizeof *to);
    if (!to) return sfb__error(-ENOMEM, "sfb_job_replan: out of memory");
    int ret = check_replan(job, last, engine, to);
    double t0 = sfb__trace_on() ? sfb__trace_us() : 0;
    struct sfb__sync_clock a = {0};
    /* every update through `last` applied here, then everywhere (the
     * agreement is a barrier): no frame of the old engine is in flight */
    if (!ret && last >= 0) ret = job->engine->drain(job->engine_priv, last, &a);
    if (!ret && sfb__comm_world(job->comm) > 1) {
        size_t len = strlen(engine) + 64;
        char *text = malloc(len);
        if (!text) {
            free(to);
            return sfb__error(-ENOMEM, "sfb_job_replan: out of memory");
        }
        snprintf(text, len, "replan_clock=%lld\nreplan_engine=%s\n", (long long)last, engine);
        enter_call(job, "replan");
        ret = call_end(job, sfb__comm_agree(job->comm, text));
        free(text);
    }
    if (!ret) {
        sfb__job_close_engine(job);
        /* the closed engines' buffers (an FMS matrix's own update, its
         * chunks; every rank's factors) are not the new ones' sizes: freed
         * now, not kept for the rest of the run (a failed trim frees
         * nothing and harms nothing) */
        (void)sfb__comm_trim(job->comm);
        memcpy(job->engine_of, to, job->nmat * sizeof *to);
        job->env.start_clock = last + 1;
        ret = sfb__job_open_engine(job);
    }
    free(to);
    sfb__trace_span(SFB__TRACK_COMPUTE, "replan", t0, last, -1, -1, 0);
    return ret;
}

int sfb_job_set_max_s(struct sfb_job *job, int64_t last, uint32_t max_s)
{
    SFB_ENTER();
    SFB_ARG(job);
    if (!job->comm) return ended(__func__);
    int ret = check_boundary(job, last, __func__, "a new max_s");
    if (ret) return ret;
    if (max_s < job->max_s)
        return sfb__error(-SFB_EUSAGE, "sfb_job_set_max_s: max_s %u: below the job's %u (the "
                          "bound only grows: frames of earlier clocks may still be on the way)",
                          max_s, job->max_s);
    double t0 = sfb__trace_on() ? sfb__trace_us() : 0;
    /* every rank the same clock and bound, then every rank's frame checks
     * take the new bound before any rank publishes a clock after `last`
     * (set_shapes ends in a barrier) */
    uint32_t old = job->max_s;
    enter_call(job, "set_max_s");
    if (sfb__comm_world(job->comm) > 1) {
        char text[96];
        snprintf(text, sizeof text, "max_s_clock=%lld\nmax_s=%u\n", (long long)last, max_s);
        ret = sfb__comm_agree(job->comm, text);
    }
    if (!ret) {
        job->max_s = max_s;
        ret = sfb__job_set_shapes(job);
        if (ret) job->max_s = old;
    }
    ret = call_end(job, ret);
    sfb__trace_span(SFB__TRACK_COMPUTE, "set_max_s", t0, last, -1, -1, 0);
    return ret;
}

int sfb_job_broadcast(struct sfb_job *job, uint32_t root, void *data, size_t len)
{
    SFB_ENTER();
    SFB_ARG(job);
    if (!job->comm) return ended(__func__);
    SFB_ARG(data || !len);
    if (sfb__comm_world(job->comm) == 1)
        return root == 0 ? 0 : sfb__error(-SFB_EUSAGE, "sfb_job_broadcast: root %u is not a rank "
                                          "of this job of 1", root);
    enter_call(job, "broadcast");
    int ret = call_end(job, sfb__comm_broadcast(job->comm, root, data, len));
    return ret ? ret : sfb__comm_check(job->comm);
}

int sfb_job_barrier(struct sfb_job *job)
{
    SFB_ENTER();
    SFB_ARG(job);
    if (!job->comm) return ended(__func__);
    if (sfb__comm_world(job->comm) == 1) return 0;
    enter_call(job, "barrier");
    int ret = call_end(job, sfb__comm_barrier(job->comm));
    return ret ? ret : sfb__comm_check(job->comm);
}

int sfb_job_allgather(struct sfb_job *job, const void *mine, size_t len, void *all)
{
    SFB_ENTER();
    SFB_ARG(job);
    if (!job->comm) return ended(__func__);
    SFB_ARG(mine);
    SFB_ARG(all);
    if (sfb__comm_world(job->comm) == 1) {
        memmove(all, mine, len);
        return 0;
    }
    enter_call(job, "allgather");
    return call_end(job, sfb__comm_allgather(job->comm, mine, len, all));
}

int sfb_job_agree(struct sfb_job *job, const char *text)
{
    SFB_ENTER();
    SFB_ARG(job);
    if (!job->comm) return ended(__func__);
    SFB_ARG(text);
    if (sfb__comm_world(job->comm) == 1) return 0;
    enter_call(job, "agree");
    /* a broken collective may be a rank that failed before it came and aborted */
    return call_end(job, sfb__comm_agree(job->comm, text));
}

int sfb_job_name_calls(struct sfb_job *job, const char *name)
{
    SFB_ENTER();
    SFB_ARG(job);
    size_t n = name ? strlen(name) : 0;
    if (name && (n == 0 || n >= sizeof job->call_name))
        return sfb__error(-SFB_EUSAGE, "sfb_job_name_calls: a name of %zu bytes (1 to %zu)", n,
                          sizeof job->call_name - 1);
    memcpy(job->call_name, name ? name : "", n + 1);
    return 0;
}

int sfb_job_set_last_clock(struct sfb_job *job, int64_t last)
{
    SFB_ENTER();
    SFB_ARG(job);
    if (!job->comm) return ended(__func__);
    if (last < job->next)
        return sfb__error(-SFB_EUSAGE, "sfb_job_set_last_clock: clock %lld is published already "
                          "(next is %lld)", (long long)last, (long long)job->next);
    sfb__comm_set_last_clock(job->comm, last);
    return 0;
}

int sfb_job_finish(struct sfb_job *job, int64_t last)
{
    SFB_ENTER();
    SFB_ARG(job);
    if (!job->comm) return ended(__func__);
    if (job->engine) {
        int ret = check_last(job, last, __func__);
        if (!ret && last >= 0) ret = sfb_job_drain(job, last, NULL);
        if (ret) return ret;
    }
    int ret = sfb__comm_finish(job->comm, last);
    job->finished = !ret;
    return ret;
}

void sfb_job_abort(struct sfb_job *job, const char *reason)
{
    /* after a finish every rank holds every update: a later failure (say,
     * writing this rank's results) is this rank's alone */
    if (!job || job->finished || !job->comm) return;
    if (!sfb__comm_peers_know(job->comm)) sfb__comm_abort(job->comm, reason ? reason : "aborted");
}

int sfb_job_stats(const struct sfb_job *job, struct sfb_job_stats *st)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(st);
    int ret = SFB_CHECK_SIZE(st, "sfb_job_stats", STATS_V1);
    if (ret) return ret;
    struct sfb_job_stats all;
    memset(&all, 0, sizeof all);
    struct sfb__comm_traffic t = {0};
    if (job->comm) sfb__comm_traffic(job->comm, &t);
    const struct sfb__comm_traffic *ct = &job->closed_traffic;
    all.bytes_sent = t.bytes_sent + ct->bytes_sent;
    all.bytes_recv = t.bytes_recv + ct->bytes_recv;
    all.msgs_sent = t.frames_sent + ct->frames_sent;
    all.msgs_recv = t.frames_recv + ct->frames_recv;
    all.rejected_frames = job->comm ? sfb__comm_rejected(job->comm) : 0;
    if (job->engine && job->engine->report) {
        struct sfb__sync_report rep = {0};
        job->engine->report(job->engine_priv, &rep);
        all.data_msgs = rep.data_msgs;
        all.data_bytes = rep.data_bytes;
        all.queued_bytes = rep.queued_bytes;
        all.publish_wait_s = rep.publish_wait_s;
    }
    all.data_msgs += job->closed.data_msgs;
    all.data_bytes += job->closed.data_bytes;
    all.publish_wait_s += job->closed.publish_wait_s;
    all.budget_held_s = job->comm ? sfb__comm_budget_held_s(job->comm) : 0;
    sfb__sized_copy(st, st->size, &all, sizeof all);
    return 0;
}

void sfb_job_close(struct sfb_job **pjob)
{
    if (!pjob || !*pjob) return;
    struct sfb_job *job = *pjob;
    if (job->engine_priv) job->engine->close(job->engine_priv);
    free(job->engine_priv);
    sfb__job_free_matrices(job);
    if (job->ssp_open) sfb__ssp_fini(&job->ssp);
    sfb__comm_close(&job->comm);
    sfb__job_elastic_close(job);
    free(job->provider);
    free(job);
    *pjob = NULL;
    if (sfb__trace_close()) SFB_LOG_W("%s", sfb_last_error());
}

int sfb_job_timeline_on(const struct sfb_job *job)
{
    return job && sfb__trace_on();
}

void sfb_job_timeline_span(struct sfb_job *job, const char *name, double t0_us, double t1_us,
                           int64_t clock)
{
    if (job && name) sfb__trace_span_copy(SFB__TRACK_USER, name, t0_us, t1_us, clock);
}

/* ---- for the trainer (src/job/job_internal.h) ---- */

int sfb__job_finish_after_drain(struct sfb_job *job, int64_t last)
{
    int ret = sfb__comm_finish(job->comm, last);
    job->finished = !ret;
    return ret;
}

const uint64_t *sfb__job_staleness_hist(struct sfb_job *job)
{
    const uint64_t *h = job->engine->staleness_hist(job->engine_priv);
    for (int i = 0; i < SFB_STALENESS_BINS; i++) job->sum_hist[i] = job->hist[i] + (h ? h[i] : 0);
    return job->sum_hist;
}

_Static_assert(SFB__JOB_STALENESS_BINS == SFB_STALENESS_BINS, "the staleness histogram's bins");

void sfb__job_report(struct sfb_job *job, struct sfb__job_report *out)
{
    struct sfb__sync_report rep = {0};
    if (job->engine && job->engine->report) job->engine->report(job->engine_priv, &rep);
    *out = (struct sfb__job_report){
        .data_msgs = rep.data_msgs + job->closed.data_msgs,
        .data_bytes = rep.data_bytes + job->closed.data_bytes, .relays = rep.relays,
        .bundles = rep.bundles, .forwarded = rep.forwarded, .mean_hops = rep.mean_hops,
        .max_hops = rep.max_hops, .per_origin = rep.per_origin};
}

const char *sfb__job_plan_engine(int k)
{
    return (k ? &sfb__fms_desc : &sfb__broadcast_desc)->name;
}

int sfb__job_plan_engine_of(const struct sfb_job *job, uint32_t m)
{
    return job->engine_of[m] == &sfb__fms_desc;
}

uint32_t sfb__job_n_matrices(const struct sfb_job *job)
{
    return job->engine ? job->nmat : 0;
}

const struct sfb_matrix *sfb__job_matrix(const struct sfb_job *job, uint32_t m)
{
    return &job->mats[m];
}

const char *sfb__job_engine_name(const struct sfb_job *job)
{
    return job->engine ? job->engines : "";
}

int sfb__job_plan_ms(const struct sfb_job *job, uint32_t m, double ms[2])
{
    if (!job->planned || m >= job->nmat || isnan(job->plan_ms[m][0])) return -ENOENT;
    ms[0] = job->plan_ms[m][0];
    ms[1] = job->plan_ms[m][1];
    return 0;
}

double sfb__job_formula_bytes(const struct sfb_job *job, uint32_t m, uint32_t batch)
{
    if (!job->engine || m >= job->nmat) return 0;
    const struct sfb__sync_desc *e = job->engine_of[m];
    /* bf16: SFB's factors (FMS's rows) in 2 bytes a number, not 4 */
    double half = (e == &sfb__broadcast_desc ? job->prec[m] : job->dense_prec[m]) ==
                          SFB_WIRE_BF16
                      ? 0.5
                      : 1;
    return half * e->formula_bytes(job->mats[m].rows, job->mats[m].cols,
                                   sfb__comm_world(job->comm), batch);
}

/* ---- the sync engines, before any job (src/job/job_internal.h) ---- */

int sfb__job_engine_info(size_t i, struct sfb__job_engine_info *out)
{
    const struct sfb__sync_desc *e = sfb__sync_registry(i);
    if (!e) return -ENOENT;
    *out = (struct sfb__job_engine_info){e->name, e->summary, e->overlays};
    return 0;
}

/* The registry index of e, or -1. */
static int registry_index(const struct sfb__sync_desc *e)
{
    for (int i = 0; e && sfb__sync_registry((size_t)i); i++)
        if (sfb__sync_registry((size_t)i) == e) return i;
    return -1;
}

int sfb__job_engine_find(const char *name)
{
    return registry_index(sfb__sync_find(name));
}

int sfb__job_sync_parse(const char *spec, int *out, uint32_t max, uint32_t *n)
{
    const struct sfb__sync_desc **e = calloc(max ? max : 1, sizeof *e);
    if (!e) return sfb__error(-ENOMEM, "sync \"%s\": out of memory", spec ? spec : "");
    int ret = sfb__sync_parse(spec, e, max, n);
    for (uint32_t i = 0; !ret && i < *n; i++) out[i] = registry_index(e[i]);
    free(e);
    return ret;
}

int sfb__job_sync_is_auto(const char *spec)
{
    return sfb__sync_is_auto(spec);
}

int sfb__job_check_priority(const char *priority)
{
    if (priority && sfb__priority_find(priority) < 0)
        return sfb__error(-EINVAL, "priority \"%s\" is not %s", priority,
                          sfb__priority_names());
    return 0;
}

size_t sfb__job_sf_frame_size(const struct sfb_sf *sf, const char *factor_dtype)
{
    int bf16 = factor_dtype && !strcmp(factor_dtype, "bf16");
    return sfb__sf_frame_size(sf, bf16 ? SFB_WIRE_BF16 : SFB_WIRE_F32);
}

const char *sfb_job_plan(const struct sfb_job *job)
{
    return job ? (job->plan ? job->plan : "") : NULL;
}

const char *sfb_job_engine(const struct sfb_job *job, uint32_t m)
{
    if (!job || !job->engine || m >= job->nmat) return NULL;
    return job->engine_of[m]->name;
}
