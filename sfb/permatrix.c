/* The per-matrix engine: each matrix of a job synchronized by its own engine
 * (env.engine_of), all of them in the same clock, under the job's one SSP
 * table (docs/design.md §Per-matrix sync).
 *
 * The matrices an engine can carry together (SFB: one relay, one frame per
 * matrix and clock) form one sub-engine; FMS runs one sub-engine per matrix
 * (its row blocks and owners are per matrix). Every sub-engine keeps its own
 * clock table, in which origin o means what it means to that engine (SFB: the
 * rank whose factors; FMS: the owner of row block o); the job's table marks
 * (o, t) once every sub-engine has, so "every origin applied through
 * t − s − 1" holds for every matrix at once and the SSP proof reads one table.
 *
 * One wait loop (sfb__sync_wait) receives for all: a frame goes to the
 * sub-engine that carries its type and matrix id (SF frames and bundles to
 * SFB, DENSE_ROWS of matrix m to m's FMS); each sub-engine then progresses
 * (FMS owners sum, updates are applied). Compute thread only. */
#include "config.h"
#include "sfb/relay.h"
#include "sfb/sync.h"
#include "src/base/common.h"
#include "src/net/comm.h"
#include "src/net/ssp.h"
#include "src/net/wire.h"

#include <stdlib.h>
#include <string.h>

#define PM_MAX SFB__RELAY_MAX_IDS

struct sub {
    const struct sfb__sync_ops *ops;
    void *priv;              /* NULL until opened */
    struct sfb__ssp ssp;     /* this engine's own clock table */
    int ssp_open;
    uint32_t n;              /* matrices it carries */
    struct sfb_matrix mats[PM_MAX];
    uint32_t ids[PM_MAX];    /* their wire ids */
    uint32_t idx[PM_MAX];    /* their index among the job's matrices */
    struct sfb_sf sf[PM_MAX]; /* publish: the job's SFs of these matrices */
};

struct pm {
    struct sfb__sync_env env;
    struct sfb__comm *c;
    struct sub sub[PM_MAX];
    uint32_t nsub;
    int sf_sub;              /* the sub-engine of SF frames, -1: none */
    int rows_sub[PM_MAX];    /* by wire id: the sub-engine of DENSE_ROWS, -1 */
    uint64_t hist[SFB_STALENESS_BINS];
    uint64_t rejected;
};

/* Whether an engine carries several matrices in one instance (SFB) or runs
 * one per matrix (FMS: owners and blocks are per matrix). */
static int carries_several(const struct sfb__sync_ops *ops)
{
    return ops == &sfb__broadcast_ops;
}

static void pm_close(void *priv)
{
    struct pm *p = priv;
    for (uint32_t i = 0; i < p->nsub; i++) {
        struct sub *s = &p->sub[i];
        if (s->priv) s->ops->close(s->priv);
        free(s->priv);
        s->priv = NULL;
        if (s->ssp_open) sfb__ssp_fini(&s->ssp);
        s->ssp_open = 0;
    }
}

/* Groups the matrices into sub-engines (in order of their first matrix). */
static int plan_subs(struct pm *p, const struct sfb__sync_env *env)
{
    for (uint32_t m = 0; m < env->nmat; m++) {
        const struct sfb__sync_ops *ops = env->engine_of[m];
        if (!ops || ops == &sfb__permatrix_ops || !ops->take || !ops->progress)
            return sfb__error(-EINVAL, "per-matrix sync: matrix %u has no engine that can share "
                              "a job", m);
        struct sub *s = NULL;
        for (uint32_t i = 0; i < p->nsub && !s; i++)
            if (p->sub[i].ops == ops && carries_several(ops)) s = &p->sub[i];
        if (!s) {
            s = &p->sub[p->nsub++];
            s->ops = ops;
        }
        s->mats[s->n] = env->mats[m];
        s->ids[s->n] = env->ids ? env->ids[m] : m;
        s->idx[s->n] = m;
        s->n++;
    }
    return 0;
}

static int pm_open(void *priv, const struct sfb__sync_env *env)
{
    struct pm *p = priv;
    p->env = *env;
    p->c = env->comm;
    p->sf_sub = -1;
    for (uint32_t i = 0; i < PM_MAX; i++) p->rows_sub[i] = -1;
    if (!env->engine_of || env->nmat == 0 || env->nmat > PM_MAX)
        return sfb__error(-EINVAL, "per-matrix sync: %u matrices (1 .. %d, each with an engine)",
                          env->nmat, PM_MAX);
    int ret = plan_subs(p, env);
    if (ret) return ret;
    for (uint32_t i = 0; i < p->nsub && !ret; i++) {
        struct sub *s = &p->sub[i];
        if (s->ops == &sfb__broadcast_ops) p->sf_sub = (int)i;
        for (uint32_t j = 0; j < s->n && s->ops == &sfb__fms_ops; j++) {
            if (s->ids[j] >= PM_MAX) ret = sfb__error(-EINVAL, "matrix id %u", s->ids[j]);
            else p->rows_sub[s->ids[j]] = (int)i;
        }
    }
    /* SFB's clock-mode boundaries receive on their own, taking only SF
     * frames: with FMS beside it they would drop the row blocks. */
    if (!ret && env->flush_clock && p->nsub > 1)
        ret = sfb__error(-SFB_EUSAGE, "--flush clock needs every matrix on SFB (a per-matrix "
                         "sync with FMS matrices forwards eagerly)");
    for (uint32_t i = 0; i < p->nsub && !ret; i++) {
        struct sub *s = &p->sub[i];
        ret = sfb__ssp_init(&s->ssp, sfb__comm_world(p->c), env->staleness, env->start_clock);
        if (ret) break;
        s->ssp_open = 1;
        struct sfb__sync_env se = *env;
        se.mats = s->mats;
        se.nmat = s->n;
        se.ids = s->ids;
        se.ssp = &s->ssp;
        se.engine_of = NULL;
        void *sp = calloc(1, s->ops->priv_size);
        if (!sp) {
            ret = sfb__error(-ENOMEM, "per-matrix sync: out of memory");
            break;
        }
        if ((ret = s->ops->open(sp, &se))) {
            free(sp);
            break;
        }
        s->priv = sp;
    }
    if (ret) pm_close(p);
    return ret;
}

/* The job's table: (o, t) is applied once every sub-engine's table has it. */
static void sync_tables(struct pm *p)
{
    uint32_t world = sfb__comm_world(p->c);
    for (uint32_t o = 0; o < world; o++) {
        int64_t target = INT64_MAX;
        for (uint32_t i = 0; i < p->nsub; i++) {
            int64_t a = sfb__ssp_applied(&p->sub[i].ssp, o);
            if (a < target) target = a;
        }
        for (int64_t a = sfb__ssp_applied(p->env.ssp, o); a < target; a++)
            sfb__ssp_mark(p->env.ssp, o, a + 1);
    }
}

static void pm_take(void *priv, struct sfb__frame *f)
{
    struct pm *p = priv;
    struct sfb__wire_hdr h;
    const uint8_t *payload;
    sfb__wire_trusted(f->data, &h, &payload);
    int i = -1;
    if (h.type == SFB_WIRE_SF || h.type == SFB_WIRE_BUNDLE)
        i = p->sf_sub;
    else if (h.type == SFB_WIRE_DENSE_ROWS && h.matrix < PM_MAX)
        i = p->rows_sub[h.matrix];
    if (i >= 0) {
        p->sub[i].ops->take(p->sub[i].priv, f); /* takes the buffer reference */
        return;
    }
    p->rejected++;
    SFB_LOG_W("rejected a frame from rank %u (type %u, matrix %u, clock %lld): no engine of this "
              "job carries it (is every worker running the same --sync?)", f->src, h.type,
              h.matrix, (long long)h.clock);
    sfb__buf_put(f->buf);
}

static int pm_progress(void *priv, int64_t limit, int64_t now_clock, int64_t required,
                       struct sfb__sync_clock *acct)
{
    struct pm *p = priv;
    int ret = 0;
    for (uint32_t i = 0; i < p->nsub && !ret; i++)
        ret = p->sub[i].ops->progress(p->sub[i].priv, limit, now_clock, required, acct);
    sync_tables(p);
    return ret;
}

static int wait_until(struct pm *p, int64_t required, int64_t limit, int64_t now_clock,
                      struct sfb__sync_clock *acct)
{
    /* no stall check: an origin's clock is applied here when its FMS part
     * is too, which waits on the slowest worker through the servers */
    const struct sfb__sync_waiter w = {p, pm_take, pm_progress, 0, 0};
    return sfb__sync_wait(p->c, p->env.ssp, &w, required, limit, now_clock, acct);
}

static int pm_wait(void *priv, int64_t clock, struct sfb__sync_clock *acct)
{
    struct pm *p = priv;
    int64_t required = sfb__ssp_required(p->env.ssp, clock);
    int64_t limit = (p->env.apply_early || required == INT64_MIN) ? INT64_MAX : required;
    return wait_until(p, required, limit, clock, acct);
}

static int pm_publish(void *priv, int64_t clock, const struct sfb_sf *sf, uint32_t n)
{
    struct pm *p = priv;
    if (n != p->env.nmat)
        return sfb__error(-SFB_EUSAGE, "per-matrix sync: %u SFs for %u matrices", n, p->env.nmat);
    int ret = 0;
    for (uint32_t i = 0; i < p->nsub && !ret; i++) {
        struct sub *s = &p->sub[i];
        for (uint32_t j = 0; j < s->n; j++) s->sf[j] = sf[s->idx[j]];
        ret = s->ops->publish(s->priv, clock, s->sf, s->n);
    }
    sync_tables(p);
    return ret;
}

static int pm_drain(void *priv, int64_t last, struct sfb__sync_clock *acct)
{
    struct pm *p = priv;
    if (p->nsub == 1) { /* one engine: its own drain (SFB's clock mode) */
        int ret = p->sub[0].ops->drain(p->sub[0].priv, last, acct);
        sync_tables(p);
        return ret;
    }
    return wait_until(p, last, INT64_MAX, last + 1, acct);
}

static const uint64_t *pm_hist(void *priv)
{
    struct pm *p = priv;
    memset(p->hist, 0, sizeof p->hist);
    for (uint32_t i = 0; i < p->nsub; i++) {
        const uint64_t *h = p->sub[i].ops->staleness_hist(p->sub[i].priv);
        for (int b = 0; b < SFB_STALENESS_BINS; b++) p->hist[b] += h[b];
    }
    return p->hist;
}

static void pm_report(void *priv, struct sfb__sync_report *rep)
{
    struct pm *p = priv;
    memset(rep, 0, sizeof *rep);
    uint64_t msgs = 0, bytes = 0;
    double pw = 0;
    for (uint32_t i = 0; i < p->nsub; i++) {
        struct sfb__sync_report r = {0};
        if (!p->sub[i].ops->report) continue;
        p->sub[i].ops->report(p->sub[i].priv, &r);
        if ((int)i == p->sf_sub) *rep = r; /* the relay's view is SFB's */
        msgs += r.data_msgs;
        bytes += r.data_bytes;
        pw += r.publish_wait_s;
    }
    rep->data_msgs = msgs;
    rep->data_bytes = bytes;
    rep->publish_wait_s = pw;
}

const struct sfb__sync_ops sfb__permatrix_ops = {
    .name = "per-matrix",
    .priv_size = sizeof(struct pm),
    .open = pm_open,
    .close = pm_close,
    .wait = pm_wait,
    .publish = pm_publish,
    .drain = pm_drain,
    .staleness_hist = pm_hist,
    .report = pm_report,
    .summary = "each matrix by its own engine",
    .overlays = 1,
    .formula_bytes = NULL,
    .take = pm_take,
    .progress = pm_progress,
};
