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
 * SFB, DENSE_ROWS of matrix m to m's FMS); the sub-engines that took a
 * frame then progress (FMS owners sum, updates are applied), and every one
 * once per wait (what a raised limit lets it apply). After each publish the
 * frames that arrived are taken too, and the FMS sub-engines among those
 * that took one form their sums for the peers (waiter.serve). A job of thousands of
 * matrices has thousands of FMS sub-engines: per frame the work stays with
 * the one that takes it, and the job's table follows the sub-engines' tables
 * incrementally (sync_sub). Compute thread only. */
#include "config.h"
#include "sfb/sync.h"
#include "src/base/util.h"
#include "src/comm/comm.h"
#include "src/ssp/ssp.h"
#include "src/wire/wire.h"

#include <stdlib.h>
#include <string.h>

struct sub {
    const struct sfb__sync_desc *desc;
    const struct sfb__sync_ops *ops; /* desc->ops */
    void *priv;              /* NULL until opened */
    struct sfb__sync_waiter w; /* its waiter, once opened */
    struct sfb__ssp ssp;     /* this engine's own clock table */
    int ssp_open;
    int dirty;               /* in pm.dirty: progresses at the next round */
    int to_serve;            /* in pm.serve: took a frame since it last served */
    uint32_t n;              /* matrices it carries */
    struct sfb_matrix *mats; /* n: the matrices, */
    uint32_t *ids;           /* their wire ids, */
    uint32_t *idx;           /* their index among the job's matrices */
    uint8_t *prec;           /* their factor precision (env.factor_prec) */
    uint8_t *dense_prec;     /* their rows' under FMS (env.dense_prec) */
    struct sfb_sf *sf;       /* publish: the job's SFs of these matrices */
};

struct pm {
    struct sfb__sync_env env;
    struct sfb__comm *c;
    uint32_t world;
    struct sub *sub;
    uint32_t nsub;
    uint32_t *sub_of, *local_of; /* per job matrix: its sub-engine, its index there */
    int sf_sub;                  /* the sub-engine of SF frames, -1: none */
    int *rows_sub;               /* by wire id (< nmat): the sub-engine of DENSE_ROWS, -1 */
    uint32_t *dirty, ndirty;     /* sub-engines to progress */
    uint32_t *serve, nserve;     /* sub-engines with a waiter.serve to call after a publish */
    int serving;                 /* some sub-engine has a waiter.serve (an FMS one) */
    /* the job's table from the sub-engines' (sync_sub): seen[i·world + o] is
     * sub-engine i's applied clock of origin o as last looked at; behind[o]
     * how many of them are at the job's applied clock of o (none: the job's
     * can advance) */
    int64_t *seen;
    uint32_t *behind;
    uint64_t hist[SFB_STALENESS_BINS];
    uint64_t rejected;
};

/* Whether an engine carries several matrices in one instance (SFB) or runs
 * one per matrix (FMS: owners and blocks are per matrix). */
static int carries_several(const struct sfb__sync_desc *desc)
{
    return desc->ops == &sfb__broadcast_ops;
}

static void pm_close(void *priv)
{
    struct pm *p = priv;
    for (uint32_t i = 0; p->sub && i < p->nsub; i++) {
        struct sub *s = &p->sub[i];
        if (s->priv) s->ops->close(s->priv);
        free(s->priv);
        if (s->ssp_open) sfb__ssp_fini(&s->ssp);
        free(s->mats);
        free(s->ids);
        free(s->prec);
        free(s->dense_prec);
        free(s->idx);
        free(s->sf);
    }
    free(p->sub);
    free(p->sub_of);
    free(p->local_of);
    free(p->rows_sub);
    free(p->dirty);
    free(p->serve);
    free(p->seen);
    free(p->behind);
    memset(p, 0, sizeof *p);
}

/* Groups the matrices into sub-engines (in order of their first matrix):
 * p->sub_of and p->local_of, then each sub-engine's arrays. */
static int plan_subs(struct pm *p, const struct sfb__sync_env *env)
{
    uint32_t n = env->nmat;
    int several = -1; /* the sub-engine of the engine that carries several */
    for (uint32_t m = 0; m < n; m++) {
        const struct sfb__sync_desc *desc = env->engine_of[m];
        if (!desc || !desc->ops || desc->ops == &sfb__permatrix_ops || !desc->ops->waiter ||
            !desc->ops->publish_one)
            return sfb__error(-EINVAL, "per-matrix sync: matrix %u has no engine that can share "
                              "a job", m);
        int i = carries_several(desc) ? several : -1;
        if (i < 0) {
            i = (int)p->nsub++;
            p->sub[i].desc = desc;
            p->sub[i].ops = desc->ops;
            if (carries_several(desc)) several = i;
        }
        p->sub_of[m] = (uint32_t)i;
        p->local_of[m] = p->sub[i].n++;
    }
    for (uint32_t i = 0; i < p->nsub; i++) {
        struct sub *s = &p->sub[i];
        s->mats = malloc(s->n * sizeof *s->mats);
        s->ids = malloc(s->n * sizeof *s->ids);
        s->prec = calloc(s->n, 1);
        s->dense_prec = calloc(s->n, 1);
        s->idx = malloc(s->n * sizeof *s->idx);
        s->sf = calloc(s->n, sizeof *s->sf);
        if (!s->mats || !s->ids || !s->prec || !s->dense_prec || !s->idx || !s->sf)
            return -ENOMEM;
    }
    for (uint32_t m = 0; m < n; m++) {
        struct sub *s = &p->sub[p->sub_of[m]];
        uint32_t j = p->local_of[m];
        s->mats[j] = env->mats[m];
        s->ids[j] = env->ids ? env->ids[m] : m;
        s->prec[j] = env->factor_prec ? env->factor_prec[m] : SFB_WIRE_F32;
        s->dense_prec[j] = env->dense_prec ? env->dense_prec[m] : SFB_WIRE_F32;
        s->idx[j] = m;
    }
    return 0;
}

static void pm_take(void *priv, struct sfb__frame *f);

static int alloc_tables(struct pm *p, uint32_t n)
{
    p->sub = calloc(n, sizeof *p->sub);
    p->sub_of = malloc(n * sizeof *p->sub_of);
    p->local_of = malloc(n * sizeof *p->local_of);
    p->rows_sub = malloc(n * sizeof *p->rows_sub);
    p->dirty = malloc(n * sizeof *p->dirty);
    p->serve = malloc(n * sizeof *p->serve);
    p->behind = calloc(p->world, sizeof *p->behind);
    if (!p->sub || !p->sub_of || !p->local_of || !p->rows_sub || !p->dirty || !p->serve ||
        !p->behind)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) p->rows_sub[i] = -1;
    return 0;
}

static int open_subs(struct pm *p, const struct sfb__sync_env *env)
{
    int ret = 0;
    for (uint32_t i = 0; i < p->nsub && !ret; i++) {
        struct sub *s = &p->sub[i];
        if (s->ops == &sfb__broadcast_ops) p->sf_sub = (int)i;
        for (uint32_t j = 0; j < s->n && s->ops == &sfb__fms_ops; j++) {
            if (env->ids || s->ids[j] >= env->nmat) ret = sfb__error(-EINVAL, "matrix id %u", s->ids[j]);
            else p->rows_sub[s->ids[j]] = (int)i;
        }
    }
    for (uint32_t i = 0; i < p->nsub && !ret; i++) {
        struct sub *s = &p->sub[i];
        ret = sfb__ssp_init(&s->ssp, p->world, env->staleness, env->start_clock);
        if (ret) break;
        s->ssp_open = 1;
        struct sfb__sync_env se = *env;
        se.mats = s->mats;
        se.nmat = s->n;
        se.ids = s->ids;
        se.factor_prec = s->prec;
        se.dense_prec = s->dense_prec;
        se.ssp = &s->ssp;
        se.engine_of = NULL;
        se.absorb = pm_take;
        se.absorb_user = p;
        void *sp = calloc(1, s->ops->priv_size);
        if (!sp) return -ENOMEM;
        if ((ret = s->ops->open(sp, &se))) {
            free(sp);
            break;
        }
        s->priv = sp;
        s->ops->waiter(sp, &s->w);
        p->serving |= s->w.serve != NULL;
    }
    return ret;
}

static int pm_open(void *priv, const struct sfb__sync_env *env)
{
    struct pm *p = priv;
    p->env = *env;
    p->c = env->comm;
    p->world = sfb__comm_world(p->c);
    p->sf_sub = -1;
    if (!env->engine_of || env->nmat == 0)
        return sfb__error(-EINVAL, "per-matrix sync: %u matrices (each with an engine)",
                          env->nmat);
    int ret = alloc_tables(p, env->nmat);
    if (!ret) ret = plan_subs(p, env);
    /* SFB's clock-mode boundaries receive on their own, taking only SF
     * frames: with FMS beside it they would drop the row blocks. */
    if (!ret && env->flush_clock && p->nsub > 1)
        ret = sfb__error(-SFB_EUSAGE, "--flush clock needs every matrix on SFB (a per-matrix "
                         "sync with FMS matrices forwards eagerly)");
    if (!ret && !(p->seen = malloc((size_t)p->nsub * p->world * sizeof *p->seen))) ret = -ENOMEM;
    if (!ret) ret = open_subs(p, env);
    if (!ret) {
        /* every table starts at start_clock − 1 for every origin */
        for (size_t k = 0; k < (size_t)p->nsub * p->world; k++) p->seen[k] = env->start_clock - 1;
        for (uint32_t o = 0; o < p->world; o++) p->behind[o] = p->nsub;
    }
    if (ret == -ENOMEM) ret = sfb__error(-ENOMEM, "per-matrix sync: out of memory");
    if (ret) pm_close(p);
    return ret;
}

/* The job's table of origin o catches up with the slowest sub-engine. */
static void advance(struct pm *p, uint32_t o)
{
    int64_t low = INT64_MAX;
    for (uint32_t i = 0; i < p->nsub; i++) low = SFB_MIN(low, p->seen[(size_t)i * p->world + o]);
    for (int64_t a = sfb__ssp_applied(p->env.ssp, o); a < low; a++)
        sfb__ssp_mark(p->env.ssp, o, a + 1);
    uint32_t at = 0;
    for (uint32_t i = 0; i < p->nsub; i++) at += p->seen[(size_t)i * p->world + o] == low;
    p->behind[o] = at;
}

/* After sub-engine i may have applied something: the job's table marks
 * (o, t) once every sub-engine's has. O(world) per call; the scan over the
 * sub-engines (advance) runs once per origin and clock. */
static void sync_sub(struct pm *p, uint32_t i)
{
    int64_t *seen = &p->seen[(size_t)i * p->world];
    for (uint32_t o = 0; o < p->world; o++) {
        int64_t a = sfb__ssp_applied(&p->sub[i].ssp, o);
        if (a == seen[o]) continue;
        if (seen[o] == sfb__ssp_applied(p->env.ssp, o)) p->behind[o]--;
        seen[o] = a;
        if (p->behind[o] == 0) advance(p, o);
    }
}

static void mark_dirty(struct pm *p, uint32_t i)
{
    if (p->sub[i].dirty) return;
    p->sub[i].dirty = 1;
    p->dirty[p->ndirty++] = i;
}

static void all_dirty(struct pm *p)
{
    for (uint32_t i = 0; i < p->nsub; i++) mark_dirty(p, i);
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
    else if (h.type == SFB_WIRE_DENSE_ROWS && h.matrix < p->env.nmat)
        i = p->rows_sub[h.matrix];
    if (i >= 0) {
        struct sub *s = &p->sub[i];
        s->w.take(s->w.priv, f); /* takes the buffer reference */
        mark_dirty(p, (uint32_t)i);
        if (s->w.serve && !s->to_serve) {
            s->to_serve = 1;
            p->serve[p->nserve++] = (uint32_t)i;
        }
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
    while (p->ndirty && !ret) {
        uint32_t i = p->dirty[--p->ndirty];
        p->sub[i].dirty = 0;
        ret = p->sub[i].w.progress(p->sub[i].w.priv, limit, now_clock, required, acct);
        sync_sub(p, i);
    }
    return ret;
}

static void pm_waiter(void *priv, struct sfb__sync_waiter *w)
{
    /* no stall check: an origin's clock is applied here when its FMS part
     * is too, which waits on the slowest worker through the servers */
    *w = (struct sfb__sync_waiter){priv, pm_take, pm_progress, 0, 0, NULL};
}

static int wait_until(struct pm *p, int64_t required, int64_t limit, int64_t now_clock,
                      struct sfb__sync_clock *acct)
{
    struct sfb__sync_waiter w;
    pm_waiter(p, &w);
    /* a new limit may let any sub-engine apply what it holds */
    all_dirty(p);
    return sfb__sync_wait(p->c, p->env.ssp, &w, required, limit, now_clock, acct);
}

static int pm_wait(void *priv, int64_t clock, struct sfb__sync_clock *acct)
{
    struct pm *p = priv;
    int64_t required = sfb__ssp_required(p->env.ssp, clock);
    int64_t limit = (p->env.apply_early || required == INT64_MIN) ? INT64_MAX : required;
    return wait_until(p, required, limit, clock, acct);
}

/* After a sub-engine published: what it formed (an FMS owner's sum) is
 * applied at the next round; its own clock may be complete. Then what has
 * arrived is taken and the sub-engines that took frames serve their peers
 * (FMS owners sum the chunks whose pushes are all here and send the sums):
 * a rank publishing its backward's layers one by one serves its peers
 * between them instead of at its step's wait, where every peer's wait for
 * the sums would add to the step's tail. Nothing is applied here. */
static int published(struct pm *p, uint32_t i, int ret)
{
    mark_dirty(p, i);
    sync_sub(p, i);
    if (ret || p->world == 1 || !p->serving) return ret;
    sfb__sync_take_arrived(p->c, pm_take, p);
    /* (a frame taken may have failed the job: say so now) */
    if ((ret = sfb__comm_check(p->c))) return ret;
    while (p->nserve && !ret) {
        struct sub *s = &p->sub[p->serve[--p->nserve]];
        s->to_serve = 0;
        ret = s->w.serve(s->w.priv);
    }
    return ret;
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
        ret = published(p, i, s->ops->publish(s->priv, clock, s->sf, s->n));
    }
    return ret;
}

static int pm_publish_one(void *priv, int64_t clock, uint32_t m, const struct sfb_sf *sf,
                          size_t *bad)
{
    struct pm *p = priv;
    uint32_t i = p->sub_of[m];
    return published(p, i, p->sub[i].ops->publish_one(p->sub[i].priv, clock, p->local_of[m], sf,
                                                       bad));
}

static int pm_publish_dense(void *priv, int64_t clock, uint32_t m, float scale,
                            const float *delta, struct sfb__buf *staged, size_t *bad)
{
    struct pm *p = priv;
    struct sub *s = &p->sub[p->sub_of[m]];
    if (!s->ops->publish_dense)
        return sfb__error(-SFB_EUSAGE, "matrix %u: engine %s carries factors only", m,
                          s->desc->name);
    return published(p, p->sub_of[m],
                     s->ops->publish_dense(s->priv, clock, p->local_of[m], scale, delta, staged,
                                           bad));
}

static int pm_drain(void *priv, int64_t last, struct sfb__sync_clock *acct)
{
    struct pm *p = priv;
    if (p->nsub == 1) { /* one engine: its own drain (SFB's clock mode) */
        int ret = p->sub[0].ops->drain(p->sub[0].priv, last, acct);
        sync_sub(p, 0);
        return ret;
    }
    return wait_until(p, last, last, last + 1, acct);
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

static int64_t pm_served(void *priv)
{
    struct pm *p = priv;
    int64_t s = INT64_MAX;
    for (uint32_t i = 0; i < p->nsub; i++)
        if (p->sub[i].ops->served) s = SFB_MIN(s, p->sub[i].ops->served(p->sub[i].priv));
    return s;
}

const struct sfb__sync_ops sfb__permatrix_ops = {
    .priv_size = sizeof(struct pm),
    .open = pm_open,
    .close = pm_close,
    .wait = pm_wait,
    .publish = pm_publish,
    .publish_one = pm_publish_one,
    .publish_dense = pm_publish_dense,
    .drain = pm_drain,
    .staleness_hist = pm_hist,
    .report = pm_report,
    .waiter = pm_waiter,
    .served = pm_served,
};
