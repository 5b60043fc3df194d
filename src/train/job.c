/* The job API (include/sfb/job.h): a comm context (src/net/comm.h), an SSP
 * clock table and a sync engine (sfb/sync.h) behind one opaque handle. It
 * is the only place above the network layer that holds a comm context. */
#include "config.h"
#include <sfb/job.h>
#include "sfb/codec.h"
#include "sfb/cost.h"
#include "sfb/parts.h"
#include "sfb/sync.h"
#include "src/base/common.h"
#include "src/base/timeline.h"
#include "src/net/comm.h"
#include "src/net/ssp.h"
#include "src/train/job_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct sfb_job {
    struct sfb__comm *comm;
    struct sfb__ssp ssp;
    int ssp_open;
    const struct sfb__sync_ops *engine; /* one for all, or sfb__permatrix_ops */
    void *engine_priv;
    const struct sfb__sync_ops *engine_of[SFB_JOB_MAX_MATRICES]; /* each matrix's */
    char engines[64]; /* "sfb", "fms", or one name per matrix: "sfb,fms" */
    char plan[512];   /* engine "auto": the cost model's lines */
    double plan_ms[SFB_JOB_MAX_MATRICES][2]; /* and its predictions */
    int planned;
    struct sfb_matrix mats[SFB_JOB_MAX_MATRICES];
    uint32_t nmat, max_s;
    /* the clock protocol: wait(next), publish(next), next + 1, ... */
    int64_t next;   /* the clock the next wait is for */
    int waited;     /* wait(next) returned; its publish is due */
    int finished;   /* sfb_job_finish succeeded: peers may be gone, nothing to abort */
    double peer_timeout_s; /* the settings' (the budget's lower bound) */
    /* SFB_DEBUG_PUBLISH_UNCHECKED=1: publish skips the finiteness check,
     * as a hostile or broken peer would (tests of the receivers' check) */
    int debug_unchecked;
};

static int reserved_zero(const uint8_t *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (r[i]) return 0;
    return 1;
}

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
    a->version = SFB_JOB_SETTINGS_VERSION;
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
    if (s->version != SFB_JOB_SETTINGS_VERSION || !reserved_zero(s->reserved, sizeof s->reserved))
        return sfb__error(-SFB_EVERSION, "sfb_job_open: settings version %u (this library has %u) "
                          "or reserved bytes set", s->version, SFB_JOB_SETTINGS_VERSION);
    sfb__comm_default_settings(cs);
    static const char *const progress[] = {"auto", "spin", "block"}; /* enum sfb__progress */
    static const char *const bind[] = {"auto", "none", "cpu"};       /* enum sfb__cpu_bind */
    int ret, progress_i, bind_i;
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
    return 0;
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
    if ((ret = sfb__comm_open(&job->comm, &cs))) {
        free(job);
        return ret;
    }
    job->peer_timeout_s = s->peer_timeout_s;
    const char *unchecked = getenv("SFB_DEBUG_PUBLISH_UNCHECKED");
    if ((job->debug_unchecked = unchecked && !strcmp(unchecked, "1")))
        SFB_LOG_W("SFB_DEBUG_PUBLISH_UNCHECKED=1: this rank publishes factors unchecked");
    *job_out = job;
    return 0;
}

uint32_t sfb_job_rank(const struct sfb_job *job)
{
    SFB_ARG_OR(job, UINT32_MAX);
    return sfb__comm_rank(job->comm);
}

uint32_t sfb_job_world(const struct sfb_job *job)
{
    SFB_ARG_OR(job, UINT32_MAX);
    return sfb__comm_world(job->comm);
}

static int check_attach(const struct sfb_job *job, const struct sfb_job_attach *a)
{
    if (a->version != SFB_JOB_SETTINGS_VERSION || !reserved_zero(a->reserved, sizeof a->reserved))
        return sfb__error(-SFB_EVERSION, "sfb_job_attach: version %u (this library has %u) or "
                          "reserved bytes set", a->version, SFB_JOB_SETTINGS_VERSION);
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
    return 0;
}

/* a->engine (sfb__sync_parse): job->engine_of, one engine per matrix. */
static int parse_engines(struct sfb_job *job, const struct sfb_job_attach *a)
{
    uint32_t n;
    int ret = sfb__sync_parse(a->engine ? a->engine : "sfb", job->engine_of, a->n, &n);
    if (ret) {
        char why[256];
        snprintf(why, sizeof why, "%s", sfb_last_error());
        return sfb__error(ret, "sfb_job_attach: %s", why);
    }
    if (n != 1 && n != a->n)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: engine \"%s\" names %u engines for %u "
                          "matrices (one for all, or one per matrix)", a->engine, n, a->n);
    for (uint32_t m = n; m < a->n; m++) job->engine_of[m] = job->engine_of[0];
    return 0;
}

/* What the cost model weighs, as rank 0 sees it (allgathered, so every
 * rank plans with the same numbers and chooses the same engines). */
struct auto_inputs {
    double alpha_s, beta, add_rate, cores, local_ranks;
    double gemm[SFB_JOB_MAX_MATRICES], sf_bytes[SFB_JOB_MAX_MATRICES];
};

/* engine "auto": per matrix the engine the cost model (sfb/cost.h) predicts
 * to be faster per clock. Collective (the link probe, an allgather). */
static int choose_auto(struct sfb_job *job, const struct sfb_job_attach *a)
{
    uint32_t world = sfb__comm_world(job->comm);
    struct sfb__link link = {0};
    int ret = 0;
    if (a->link_gbps > 0 || a->latency_us > 0) {
        link.alpha_s = (a->latency_us > 0 ? a->latency_us : 10.0) * 1e-6;
        link.beta_s_per_byte = 8.0 / ((a->link_gbps > 0 ? a->link_gbps : 1.0) * 1e9);
    } else if (world > 1 && (ret = sfb__link_probe(job->comm, &link))) {
        return sfb__comm_explain(job->comm, ret);
    }
    struct auto_inputs mine = {link.alpha_s, link.beta_s_per_byte, 0, 1, 1, {0}, {0}};
    uint64_t biggest = 0;
    for (uint32_t m = 0; m < a->n; m++) {
        const struct sfb_matrix *x = &a->mats[m];
        /* rank 0's rates are the plan's: measured there alone, not while
         * every rank of the host competes for its cores */
        if (sfb__comm_rank(job->comm) == 0)
            mine.gemm[m] = sfb__gemm_rate(x->rows, x->cols, a->max_s);
        mine.sf_bytes[m] = a->sf_bytes[m];
        biggest = SFB_MAX(biggest, (uint64_t)x->rows * x->cols);
    }
    if (sfb__comm_rank(job->comm) == 0) mine.add_rate = sfb__add_rate(biggest);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    mine.cores = cores > 0 ? (double)cores : 1;
    mine.local_ranks = sfb__comm_local_ranks(job->comm);
    struct auto_inputs *all = calloc(world, sizeof *all);
    if (!all) return sfb__error(-ENOMEM, "sfb_job_attach: out of memory");
    if (world > 1 && (ret = sfb__comm_allgather(job->comm, &mine, sizeof mine, all))) {
        free(all);
        return sfb__comm_explain(job->comm, ret);
    }
    const struct auto_inputs *in = world > 1 ? &all[0] : &mine;
    struct sfb__cost_env e = {
        .world = world, .batch = a->max_s, .topology = a->topology, .degree = a->degree,
        .flush_clock = a->flush_clock,
        .link = {in->alpha_s, in->beta, link.measured},
        .add_flops_per_s = in->add_rate,
        .host_cores = (uint32_t)in->cores, .ranks_per_host = (uint32_t)in->local_ranks};
    struct sfb__cost_matrix cm[SFB_JOB_MAX_MATRICES];
    int choice[SFB_JOB_MAX_MATRICES];
    double ms[SFB_JOB_MAX_MATRICES][2];
    for (uint32_t m = 0; m < a->n && !ret; m++) {
        cm[m] = (struct sfb__cost_matrix){a->mats[m].rows, a->mats[m].cols, in->sf_bytes[m]};
        e.gemm_flops_per_s = in->gemm[m];
        /* each matrix at its own sgemm rate */
        ret = sfb__cost_plan(&e, &cm[m], 1, &choice[m], &ms[m]);
    }
    free(all);
    if (ret) return ret;
    /* clock-mode relays receive on their own, SF frames only: SFB for all */
    for (uint32_t m = 0; m < a->n && a->flush_clock; m++) choice[m] = SFB__ENG_SFB;
    for (uint32_t m = 0; m < a->n; m++) {
        job->engine_of[m] = choice[m] == SFB__ENG_FMS ? &sfb__fms_ops : &sfb__broadcast_ops;
        job->plan_ms[m][0] = ms[m][SFB__ENG_SFB];
        job->plan_ms[m][1] = ms[m][SFB__ENG_FMS];
    }
    job->planned = 1;
    sfb__cost_describe(cm, a->n, choice, (const double(*)[2])ms, job->plan, sizeof job->plan);
    return 0;
}

/* The engine that runs the job: the one every matrix names when it can
 * carry them all (SFB any number, FMS one; in a job of one worker either),
 * else the per-matrix engine. Writes the per-matrix names to job->engines. */
static const struct sfb__sync_ops *job_engine(struct sfb_job *job)
{
    int same = 1;
    size_t len = 0;
    for (uint32_t m = 0; m < job->nmat; m++) {
        same &= job->engine_of[m] == job->engine_of[0];
        len += (size_t)snprintf(job->engines + len, sizeof job->engines - len, "%s%s",
                                m ? "," : "", job->engine_of[m]->name);
    }
    if (same) snprintf(job->engines, sizeof job->engines, "%s", job->engine_of[0]->name);
    if (same && (job->engine_of[0] != &sfb__fms_ops || job->nmat == 1 ||
                 sfb__comm_world(job->comm) == 1))
        return job->engine_of[0];
    return &sfb__permatrix_ops;
}

static int start_engine(struct sfb_job *job, const struct sfb_job_attach *a)
{
    const struct sfb__sync_ops *engine = job_engine(job);
    job->engine_priv = calloc(1, engine->priv_size);
    if (!job->engine_priv) return sfb__error(-ENOMEM, "sfb_job_attach: out of memory");
    struct sfb__sync_env env = {
        .comm = job->comm,
        .mats = job->mats,
        .nmat = job->nmat,
        .ssp = &job->ssp,
        .apply_early = a->apply_early < 0 ? a->staleness != 0 : a->apply_early,
        .staleness = a->staleness,
        .topology = a->topology,
        .degree = a->degree,
        .flush_clock = a->flush_clock,
        .start_clock = a->start_clock,
        .engine_of = job->engine_of,
    };
    int ret = sfb__parts_settings(a->priority, sfb__comm_budget_rate(job->comm),
                                  sfb__comm_world(job->comm), job->peer_timeout_s, a->mats, a->n,
                                  a->max_s, &env.priority, &env.part_bytes, &env.msg_cap);
    if (!ret) ret = engine->open(job->engine_priv, &env);
    if (ret) {
        free(job->engine_priv);
        job->engine_priv = NULL;
        return ret;
    }
    job->engine = engine;
    return 0;
}

int sfb_job_attach(struct sfb_job *job, const struct sfb_job_attach *a)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(a);
    int auto_sync = sfb__sync_is_auto(a->engine);
    int ret = check_attach(job, a);
    if (!ret && !auto_sync) ret = parse_engines(job, a);
    if (ret) return ret;
    struct sfb__wire_shape_list {
        struct sfb__wire_shape v[SFB_JOB_MAX_MATRICES];
    } shapes;
    for (uint32_t m = 0; m < a->n; m++) {
        job->mats[m] = a->mats[m];
        shapes.v[m].k = a->mats[m].rows;
        shapes.v[m].d = a->mats[m].cols;
    }
    job->nmat = a->n;
    job->max_s = a->max_s;
    job->next = a->start_clock;
    if ((ret = sfb__comm_set_shapes(job->comm, shapes.v, a->n, a->max_s))) return ret;
    sfb__phase_mark(SFB__PH_SHAPES); /* the run's timeline (src/base/timeline.h) */
    if (!job->ssp_open) {
        ret = sfb__ssp_init(&job->ssp, sfb__comm_world(job->comm), a->staleness, a->start_clock);
        if (ret) return ret;
        job->ssp_open = 1;
    }
    if (auto_sync && (ret = choose_auto(job, a))) return ret;
    return start_engine(job, a);
}

static void to_public(struct sfb_job_clock *out, const struct sfb__sync_clock *in)
{
    if (!out) return;
    out->wait_s += in->wait_s;
    out->apply_s += in->apply_s;
    if (in->staleness > out->staleness) out->staleness = in->staleness;
    out->applied += in->applied;
    out->applied_early += in->applied_early;
    out->budget_wait_s += in->budget_wait_s;
}

static int need_engine(const struct sfb_job *job, const char *fn)
{
    return job->engine ? 0 : sfb__error(-SFB_EUSAGE, "%s: no matrices attached", fn);
}

int sfb_job_wait(struct sfb_job *job, int64_t clock, struct sfb_job_clock *acct)
{
    SFB_ENTER();
    SFB_ARG(job);
    int ret = need_engine(job, __func__);
    if (ret) return ret;
    if (clock != job->next || job->waited)
        return sfb__error(-SFB_EUSAGE, "sfb_job_wait: clock %lld out of order: the next wait is "
                          "for clock %lld%s", (long long)clock, (long long)job->next,
                          job->waited ? ", after its publish" : "");
    struct sfb__sync_clock a = {0};
    if ((ret = job->engine->wait(job->engine_priv, clock, &a))) return ret;
    if ((ret = sfb__ssp_record(&job->ssp, clock))) return ret;
    job->waited = 1;
    to_public(acct, &a);
    if (acct) acct->min_applied = job->ssp.record[clock];
    return 0;
}

/* A NaN or an infinity in a published factor would poison every replica;
 * the receivers refuse it too (they cannot tell a bug from an attack), so
 * publishing one would fail the job anyway, only later and elsewhere. */
static int check_finite(const struct sfb_job *job, int64_t clock, const struct sfb_sf *sf,
                        uint32_t n)
{
    char what[96];
    for (uint32_t m = 0; m < n && !job->debug_unchecked; m++)
        if (sfb__sf_nonfinite(&sf[m], what, sizeof what))
            return sfb__error(-ERANGE, "sfb_job_publish: clock %lld, matrix %u: %s (a factor "
                              "must hold finite numbers only: nothing was published)",
                              (long long)clock, m, what);
    return 0;
}

static int check_sfs(const struct sfb_job *job, const struct sfb_sf *sf, uint32_t n)
{
    if (n != job->nmat)
        return sfb__error(-SFB_EUSAGE, "sfb_job_publish: %u SFs for %u attached matrices", n,
                          job->nmat);
    for (uint32_t m = 0; m < n; m++) {
        if (sf[m].rows != job->mats[m].rows || sf[m].cols != job->mats[m].cols)
            return sfb__error(-SFB_ESHAPE, "sfb_job_publish: SF %u is for %u x %u, matrix %u is "
                              "%u x %u", m, sf[m].rows, sf[m].cols, m, job->mats[m].rows,
                              job->mats[m].cols);
        if (sf[m].s == 0)
            return sfb__error(-SFB_ESHAPE, "sfb_job_publish: SF %u has no sample (a clock with "
                              "nothing to add publishes one sample of zeros)", m);
        if (sf[m].s > job->max_s)
            return sfb__error(-SFB_ESHAPE, "sfb_job_publish: SF %u has %u samples, more than "
                              "max_s %u", m, sf[m].s, job->max_s);
        if ((!sf[m].b || (!sf[m].sparse_c && !sf[m].c) ||
                        (sf[m].sparse_c && (!sf[m].c_row_ptr || !sf[m].c_col || !sf[m].c_val))))
            return sfb__error(-EINVAL, "sfb_job_publish: SF %u has a NULL array", m);
    }
    return 0;
}

int sfb_job_publish(struct sfb_job *job, int64_t clock, struct sfb_sf *sf, uint32_t n)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(sf);
    int ret = need_engine(job, __func__);
    if (!ret && (clock != job->next || !job->waited))
        ret = sfb__error(-SFB_EUSAGE, "sfb_job_publish: clock %lld out of order: clock %lld is "
                         "due, %s", (long long)clock, (long long)job->next,
                         job->waited ? "waited for" : "after its wait");
    if (!ret) ret = check_sfs(job, sf, n);
    if (!ret) ret = check_finite(job, clock, sf, n);
    if (ret) return ret;
    for (uint32_t m = 0; m < n; m++) {
        sf[m].matrix = m;
        sf[m].origin = sfb__comm_rank(job->comm);
        sf[m].clock = clock;
    }
    if ((ret = job->engine->publish(job->engine_priv, clock, sf, n))) return ret;
    job->waited = 0;
    job->next++;
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
    int ret = need_engine(job, __func__);
    if (!ret) ret = check_last(job, last, __func__);
    if (ret) return ret;
    struct sfb__sync_clock a = {0};
    ret = job->engine->drain(job->engine_priv, last, &a);
    to_public(acct, &a);
    return ret;
}

int sfb_job_barrier(struct sfb_job *job)
{
    SFB_ENTER();
    SFB_ARG(job);
    if (sfb__comm_world(job->comm) == 1) return 0;
    int ret = sfb__comm_barrier(job->comm);
    return ret ? sfb__comm_explain(job->comm, ret) : sfb__comm_check(job->comm);
}

int sfb_job_allgather(struct sfb_job *job, const void *mine, size_t len, void *all)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(mine);
    SFB_ARG(all);
    if (sfb__comm_world(job->comm) == 1) {
        memmove(all, mine, len);
        return 0;
    }
    int ret = sfb__comm_allgather(job->comm, mine, len, all);
    return ret ? sfb__comm_explain(job->comm, ret) : 0;
}

int sfb_job_agree(struct sfb_job *job, const char *text)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(text);
    if (sfb__comm_world(job->comm) == 1) return 0;
    int ret = sfb__comm_agree(job->comm, text);
    /* a verdict is every rank's; a broken collective may be a rank that
     * failed before it came and aborted */
    return ret == -SFB_ECONFIG ? ret : sfb__comm_explain(job->comm, ret);
}

int sfb_job_set_last_clock(struct sfb_job *job, int64_t last)
{
    SFB_ENTER();
    SFB_ARG(job);
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
    if (!job || job->finished) return;
    if (!sfb__comm_peers_know(job->comm)) sfb__comm_abort(job->comm, reason ? reason : "aborted");
}

int sfb_job_stats(const struct sfb_job *job, struct sfb_job_stats *st)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(st);
    memset(st, 0, sizeof *st);
    struct sfb__comm_traffic t;
    sfb__comm_traffic(job->comm, &t);
    st->bytes_sent = t.bytes_sent;
    st->bytes_recv = t.bytes_recv;
    st->msgs_sent = t.frames_sent;
    st->msgs_recv = t.frames_recv;
    st->rejected_frames = sfb__comm_rejected(job->comm);
    if (job->engine && job->engine->report) {
        struct sfb__sync_report rep = {0};
        job->engine->report(job->engine_priv, &rep);
        st->data_msgs = rep.data_msgs;
        st->data_bytes = rep.data_bytes;
        st->queued_bytes = rep.queued_bytes;
        st->publish_wait_s = rep.publish_wait_s;
    }
    st->budget_held_s = sfb__comm_budget_held_s(job->comm);
    return 0;
}

void sfb_job_close(struct sfb_job **pjob)
{
    if (!pjob || !*pjob) return;
    struct sfb_job *job = *pjob;
    if (job->engine_priv) job->engine->close(job->engine_priv);
    free(job->engine_priv);
    if (job->ssp_open) sfb__ssp_fini(&job->ssp);
    sfb__comm_close(&job->comm);
    free(job);
    *pjob = NULL;
}

/* ---- for the trainer (src/train/job_internal.h) ---- */

int sfb__job_finish_after_drain(struct sfb_job *job, int64_t last)
{
    int ret = sfb__comm_finish(job->comm, last);
    job->finished = !ret;
    return ret;
}

const uint64_t *sfb__job_staleness_hist(struct sfb_job *job)
{
    return job->engine->staleness_hist(job->engine_priv);
}

void sfb__job_report(struct sfb_job *job, struct sfb__sync_report *rep)
{
    memset(rep, 0, sizeof *rep);
    if (job->engine && job->engine->report) job->engine->report(job->engine_priv, rep);
}

const char *sfb__job_engine_name(const struct sfb_job *job)
{
    return job->engine ? job->engines : "";
}

int sfb__job_plan_ms(const struct sfb_job *job, uint32_t m, double ms[2])
{
    if (!job->planned || m >= job->nmat) return -ENOENT;
    ms[0] = job->plan_ms[m][0];
    ms[1] = job->plan_ms[m][1];
    return 0;
}

const char *sfb_job_plan(const struct sfb_job *job)
{
    return job ? job->plan : NULL;
}

const char *sfb_job_engine(const struct sfb_job *job, uint32_t m)
{
    if (!job || !job->engine || m >= job->nmat) return NULL;
    return job->engine_of[m]->name;
}
