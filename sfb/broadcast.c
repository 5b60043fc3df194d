/* The SFB engine: every clock's sufficient factors go to every peer — over
 * full P2P or down the origin's tree of an overlay, relayed by the
 * communication threads (sfb/relay.c); received factors wait in a pending set until SSP requires them (or
 * at once with apply_early) and are then applied, all of them, with one
 * reconstruction call per matrix.
 *
 * Received frames are never copied: the SF views point into the transport's
 * receive buffers, whose references are held while pending. A matrix's
 * bfloat16 factors (env.factor_prec, --factor-dtype bf16): a frame is widened once
 * into a float32 payload in a buffer of the comm's pool, which the pending
 * update holds instead; the own update is applied from its own frame,
 * widened the same way, so that every replica adds the same (rounded)
 * numbers. */
#include "config.h"
#include "sfb/codec.h"
#include "sfb/parts.h"
#include "sfb/relay.h"
#include "sfb/sync.h"
#include "src/comm/comm.h"
#include "src/base/trace.h"
#include "src/base/util.h"
#include "src/ssp/ssp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pend {
    struct sfb__buf *buf; /* reference held while pending */
    struct sfb_sf view;   /* points into buf */
    uint32_t origin, matrix;
    uint32_t index, count; /* part index of count (0 of 1: a whole update) */
    int64_t clock;
};

/* The pending updates of one clock (a job has few clocks in flight, and
 * many matrices: a frame's arrival and a wait's selection of what SSP
 * allows stay O(1) per frame, whatever the number of matrices). n == 0:
 * free for another clock. */
struct bucket {
    int64_t clock;
    struct pend *v;
    size_t n, cap;
};

/* Parts of matrix m's update of an (origin, clock) sent in parts. */
struct mparts {
    uint64_t got;     /* bit i: part i received */
    uint32_t count;   /* its parts (0: none received yet) */
    uint32_t applied; /* parts applied */
};

/* An (origin, clock) not yet applied in full, from its first frame on. SSP
 * marks it once the last part of the last matrix is applied. */
struct partial {
    uint32_t origin;
    uint32_t left; /* matrices not applied in full */
    uint32_t recv_left; /* matrices not received whole yet */
    int64_t clock;
    uint64_t *recv;    /* bit m: matrix m's update received whole (pending or applied) */
    struct mparts *mp; /* per matrix, from its first part frame on (NULL: none yet) */
};

struct bcast {
    struct sfb__sync_env env;
    struct sfb__comm *c;
    struct sfb_reconstruct *recon;
    uint32_t nmat;
    uint32_t *ids;      /* wire id of matrix m */
    uint32_t *local;    /* wire id -> its matrix here (nmat: not carried) */
    uint32_t nids;      /* local's length: the largest id + 1 */
    struct partial *part;
    size_t npart, part_cap, last_part; /* last_part: the last found (frames come in runs) */
    struct sfb__parts parts; /* publish's split of an update (part_bytes > 0) */
    struct bucket *bk;
    size_t nbk, bk_cap;
    struct pend *ready;      /* apply_ready's selection */
    size_t ready_cap;
    const struct sfb_sf **list;
    size_t list_cap;
    int64_t own_clock;       /* the clock being published here, */
    uint32_t own_left;       /* its matrices not published yet */
    uint64_t hist[SFB_STALENESS_BINS];
    uint64_t rejected; /* frames refused after the wire checks */
    struct sfb__relay *relay;
    uint64_t *from;    /* updates applied per origin */
    double boundary_wait_s; /* boundary(): waiting for the frames to forward */
    uint8_t *prec;          /* per matrix: env.factor_prec (SFB_WIRE_F32, SFB_WIRE_BF16) */
    uint8_t *enc, *wide;    /* a job of one worker, bfloat16: the own update */
    size_t enc_cap, wide_cap; /* encoded and widened (no comm pool there) */
};

static void part_free(struct partial *p)
{
    free(p->recv);
    free(p->mp);
}

static void bc_close(void *priv)
{
    struct bcast *b = priv;
    sfb__relay_close(&b->relay);
    for (size_t k = 0; k < b->nbk; k++) {
        for (size_t i = 0; i < b->bk[k].n; i++) sfb__buf_put(b->bk[k].v[i].buf);
        free(b->bk[k].v);
    }
    free(b->bk);
    for (size_t i = 0; i < b->npart; i++) part_free(&b->part[i]);
    free(b->part);
    free(b->ready);
    free(b->from);
    free(b->list);
    free(b->ids);
    free(b->local);
    free(b->prec);
    free(b->enc);
    free(b->wide);
    sfb__parts_free(&b->parts);
    sfb_reconstruct_close(&b->recon);
}

/* The wire ids and their inverse map. */
static int map_ids(struct bcast *b, const struct sfb__sync_env *env)
{
    b->ids = malloc(b->nmat * sizeof *b->ids);
    if (!b->ids) return -ENOMEM;
    for (uint32_t m = 0; m < b->nmat; m++) {
        b->ids[m] = env->ids ? env->ids[m] : m;
        b->nids = SFB_MAX(b->nids, b->ids[m] + 1);
    }
    b->local = malloc(b->nids * sizeof *b->local);
    if (!b->local) return -ENOMEM;
    for (uint32_t id = 0; id < b->nids; id++) b->local[id] = b->nmat;
    for (uint32_t m = 0; m < b->nmat; m++) b->local[b->ids[m]] = m;
    return 0;
}

static int bc_open(void *priv, const struct sfb__sync_env *env)
{
    struct bcast *b = priv;
    b->env = *env;
    b->c = env->comm;
    b->nmat = env->nmat;
    b->own_clock = INT64_MIN;
    if (b->nmat == 0) return sfb__error(-EINVAL, "sfb engine: no matrices");
    if (!(b->prec = calloc(b->nmat, 1))) return sfb__error(-ENOMEM, "sfb engine: out of memory");
    for (uint32_t m = 0; env->factor_prec && m < b->nmat; m++) {
        b->prec[m] = env->factor_prec[m];
        if (b->prec[m] != SFB_WIRE_F32 && b->prec[m] != SFB_WIRE_BF16) {
            bc_close(b);
            return sfb__error(-SFB_EUSAGE, "sfb engine: matrix %u: factor precision %u (float32 "
                              "or bfloat16 only)", m, b->prec[m]);
        }
    }
    int ret = map_ids(b, env);
    b->from = ret ? NULL : calloc(sfb__comm_world(b->c), sizeof *b->from);
    if (!ret && !b->from) ret = -ENOMEM;
    struct sfb__relay_settings rs = {
        .topology = env->topology, .degree = env->degree, .flush_clock = env->flush_clock,
        .nmat = b->nmat, .ids = b->ids, .start_clock = env->start_clock,
        .priority = env->priority, .msg_cap = env->msg_cap};
    if (!ret) ret = sfb__relay_open(&b->relay, b->c, &rs);
    /* The relay tracks arrivals in a 64-clock window per origin, and clock
     * flushing waits on it: keep the run-ahead SSP allows well inside. */
    if (!ret && env->flush_clock && (env->staleness < 0 || env->staleness > 48))
        ret = sfb__error(-SFB_EUSAGE, "--flush clock needs a bounded staleness (0..48), not %lld",
                         (long long)env->staleness);
    if (!ret && env->flush_clock && env->staleness >= 0 &&
        sfb__relay_diameter(b->relay) > (uint64_t)env->staleness + 1)
        ret = sfb__error(-SFB_EUSAGE,
                         "--flush clock moves a frame one hop per clock, so SSP needs "
                         "--staleness >= diameter - 1 = %u for this topology (now %lld)",
                         sfb__relay_diameter(b->relay) - 1, (long long)env->staleness);
    if (!ret) ret = sfb_reconstruct_open(&b->recon);
    if (ret == -ENOMEM) ret = sfb__error(-ENOMEM, "sfb engine: out of memory");
    if (ret) bc_close(b);
    return ret;
}

/* The local index of wire matrix id `id`, or nmat when this engine does
 * not carry it. */
static uint32_t local_of(const struct bcast *b, uint32_t id)
{
    return id < b->nids ? b->local[id] : b->nmat;
}

static struct partial *find_part(struct bcast *b, uint32_t origin, int64_t clock)
{
    size_t i = b->last_part;
    if (i < b->npart && b->part[i].origin == origin && b->part[i].clock == clock)
        return &b->part[i];
    for (i = 0; i < b->npart; i++)
        if (b->part[i].origin == origin && b->part[i].clock == clock) {
            b->last_part = i;
            return &b->part[i];
        }
    return NULL;
}

/* The (origin, clock) of a new frame: found, or started (NULL: out of
 * memory). */
static struct partial *get_part(struct bcast *b, uint32_t origin, int64_t clock)
{
    struct partial *p = find_part(b, origin, clock);
    if (p) return p;
    if (sfb__reserve((void **)&b->part, &b->part_cap, (b->npart + 1) * sizeof *b->part))
        return NULL;
    uint64_t *recv = calloc((b->nmat + 63) / 64, sizeof *recv);
    if (!recv) return NULL;
    b->last_part = b->npart;
    p = &b->part[b->npart++];
    *p = (struct partial){.origin = origin, .left = b->nmat, .recv_left = b->nmat, .clock = clock,
                          .recv = recv};
    return p;
}

/* An update of `origin` arrived whole: tells the stall check how far its
 * updates are here without a gap (applied, or pending whole), so an
 * update held for another rank's is not taken for one in transit. */
static void note_arrived(struct bcast *b, uint32_t origin)
{
    int64_t through = sfb__ssp_applied(b->env.ssp, origin);
    struct partial *p;
    while ((p = find_part(b, origin, through + 1)) && p->recv_left == 0) through++;
    sfb__comm_stall_arrived(b->c, origin, through);
}

/* Whether part `index` of `count` of matrix m of (origin, clock) can be
 * taken, and if so records its arrival: NULL when new, else why not
 * (received already, or its count differs from what its other parts said,
 * or no memory to track it). */
static const char *receive_part(struct bcast *b, uint32_t origin, int64_t clock, uint32_t m,
                                uint32_t index, uint32_t count)
{
    static const char *const again = "replays an update already received";
    static const char *const other = "its part count differs from the update's other parts";
    static const char *const oom = "out of memory";
    if (sfb__ssp_is_applied(b->env.ssp, origin, clock)) return again;
    struct partial *p = get_part(b, origin, clock);
    if (!p) return oom;
    if (p->recv[m / 64] >> (m % 64) & 1) return again;
    struct mparts *q = p->mp ? &p->mp[m] : NULL;
    if (count <= 1) {
        if (q && q->count) return other;
    } else {
        if (!p->mp && !(p->mp = calloc(b->nmat, sizeof *p->mp))) return oom;
        q = &p->mp[m];
        if (q->count && q->count != count) return other;
        if (q->got >> index & 1) return again;
        q->count = count;
        q->got |= 1ull << index;
        if (q->got != (count >= 64 ? UINT64_MAX : (1ull << count) - 1)) return NULL;
    }
    p->recv[m / 64] |= 1ull << (m % 64);
    if (--p->recv_left == 0) note_arrived(b, origin);
    return NULL;
}

/* Part `index` of `count` of matrix m of (origin, clock) is applied: 1 when
 * that completes the matrix's update (SSP marks the pair once every matrix
 * of it is complete), 0 when parts are still to come. */
static int applied_part(struct bcast *b, uint32_t origin, int64_t clock, uint32_t m,
                        uint32_t count)
{
    struct partial *p = find_part(b, origin, clock);
    if (!p) return 0; /* received, so tracked: cannot happen */
    if (count > 1 && ++p->mp[m].applied < count) return 0;
    if (--p->left == 0) {
        part_free(p);
        *p = b->part[--b->npart];
        sfb__ssp_mark(b->env.ssp, origin, clock);
    }
    return 1;
}

/* Room for one more pending update of `clock` (NULL: out of memory). */
static struct pend *pend_slot(struct bcast *b, int64_t clock)
{
    struct bucket *k = NULL, *free_k = NULL;
    for (size_t i = 0; i < b->nbk && !k; i++) {
        if (b->bk[i].n && b->bk[i].clock == clock) k = &b->bk[i];
        else if (!b->bk[i].n && !free_k) free_k = &b->bk[i];
    }
    if (!k && !free_k) {
        if (sfb__reserve((void **)&b->bk, &b->bk_cap, (b->nbk + 1) * sizeof *b->bk)) return NULL;
        free_k = &b->bk[b->nbk++];
        *free_k = (struct bucket){0};
    }
    if (!k) {
        k = free_k;
        k->clock = clock;
    }
    if (sfb__reserve((void **)&k->v, &k->cap, (k->n + 1) * sizeof *k->v)) return NULL;
    return &k->v[k->n++];
}

/* p, viewing into buf, becomes pending (a reference to buf held): 0, or
 * -ENOMEM. */
static int hold(struct bcast *b, struct sfb__buf *buf, const struct pend *p)
{
    struct pend *slot = pend_slot(b, p->clock);
    if (!slot) return -ENOMEM;
    *slot = *p;
    slot->buf = buf;
    sfb__buf_ref(buf);
    return 0;
}

static const char *prec_name(unsigned prec)
{
    static const char *const names[] = {"float32", "float64", "bfloat16", "float16"};
    return names[prec & 3];
}

/* A bfloat16 SF payload sf[0 .. len) of header h, widened into a float32
 * payload in a buffer of the comm's pool (*out: a reference the caller
 * puts) and viewed there. 0; else the codec's code with *bad = 1 (the
 * payload is malformed: its origin's fault), or the pool's with *bad = 0. */
static int widen(struct bcast *b, const struct sfb__wire_hdr *h, const uint8_t *sf, size_t len,
                 struct sfb__buf **out, struct sfb_sf *view, int *bad)
{
    int sparse = (h->flags & SFB_WIRE_F_SPARSE) != 0;
    size_t wide;
    *out = NULL;
    *bad = 1;
    int ret = sfb__sf_expand_size(sf, len, h->k, h->d, h->s, sparse, &wide);
    if (ret) return ret;
    *bad = 0;
    if ((ret = sfb__comm_buf_get(b->c, wide, out))) return ret;
    *bad = 1;
    ret = sfb__sf_expand(sf, len, h->k, h->d, h->s, sparse, (*out)->data, wide);
    if (!ret) ret = sfb__sf_view((*out)->data, wide, h->k, h->d, h->s, sparse, view);
    if (ret) {
        sfb__buf_put(*out);
        *out = NULL;
    }
    return ret;
}

/* Views the SF payload sf[0 .. len) of matrix m's frame h: in place for
 * float32 (*wide NULL), else widened into a pooled buffer (*wide: a
 * reference the caller puts). *bad as widen's. */
static int view_frame(struct bcast *b, uint32_t m, const struct sfb__wire_hdr *h,
                      const uint8_t *sf, size_t len, struct sfb__buf **wide,
                      struct sfb_sf *view, int *bad)
{
    *wide = NULL;
    *bad = 1;
    if (b->prec[m] == SFB_WIRE_F32)
        return sfb__sf_view(sf, len, h->k, h->d, h->s, (h->flags & SFB_WIRE_F_SPARSE) != 0, view);
    return widen(b, h, sf, len, wide, view, bad);
}

/* One validated SF frame: becomes pending, holding a reference to `buf`
 * (bfloat16: to the buffer it is widened into). */
static void add_sf(struct bcast *b, struct sfb__buf *buf, int from, const struct sfb__wire_hdr *h,
                   const uint8_t *payload)
{
    const char *why = NULL;
    uint32_t m = local_of(b, h->matrix);
    if (h->type != SFB_WIRE_SF)
        why = "not an SF frame (is every worker running the same --sync?)";
    else if (m == b->nmat)
        why = "an SF frame of a matrix not synchronized by SFB here (is every worker running "
              "the same --sync?)";
    else if (h->origin == sfb__comm_rank(b->c))
        why = "claims to carry this rank's own update";
    unsigned prec = (h->flags & SFB_WIRE_F_PREC_MASK) >> SFB_WIRE_F_PREC_SHIFT;
    if (!why && prec != b->prec[m]) {
        /* never applicable here: the job fails naming it (as a hang until
         * the stall timeout otherwise) */
        char msg[160];
        snprintf(msg, sizeof msg, "its factors are %s, this rank's %s (is every worker running "
                 "the same --factor-dtype?)", prec_name(prec), prec_name(b->prec[m]));
        b->rejected++;
        sfb__comm_reject_update(b->c, h->origin, (uint32_t)from, h->clock, h->matrix, msg);
        return;
    }
    struct sfb__wire_part part;
    sfb__wire_part(h, payload, &part);
    struct pend p = {.origin = h->origin, .matrix = m, .clock = h->clock, .index = part.index,
                     .count = part.count};
    if (!why) why = receive_part(b, h->origin, h->clock, m, part.index, part.count);
    struct sfb__buf *wide = NULL;
    if (!why) {
        uint64_t sf_len;
        const uint8_t *sf = sfb__wire_sf_payload(h, payload, &sf_len);
        int bad, ret = view_frame(b, m, h, sf, (size_t)sf_len, &wide, &p.view, &bad);
        if (ret && bad) {
            /* checksummed, so as its origin built it: not noise (the
             * update can never be applied: the job fails naming it) */
            b->rejected++;
            sfb__comm_reject_update(b->c, h->origin, (uint32_t)from, h->clock, h->matrix,
                                    sfb_error_message(ret));
            return;
        }
        if (ret) why = "no buffer to widen its bfloat16 factors into";
    }
    if (!why) {
        int held = hold(b, wide ? wide : buf, &p);
        if (wide) sfb__buf_put(wide); /* the pending update's reference remains */
        if (held == 0) return;
        why = "out of memory";
    }
    b->rejected++;
    SFB_LOG_W("rejected a frame from rank %d (origin %u, clock %lld): %s", from, h->origin,
              (long long)h->clock, why);
}

/* Takes one received frame (an SF frame or a BUNDLE of them); comm's
 * on_frame has validated it in full (checksums included), so it is only
 * parsed here. */
static void take_frame(struct bcast *b, struct sfb__frame *f)
{
    struct sfb__wire_hdr h;
    const uint8_t *payload;
    sfb__wire_trusted(f->data, &h, &payload);
    if (h.type == SFB_WIRE_BUNDLE) {
        struct sfb__wire_iter it;
        const uint8_t *inner;
        size_t inner_len;
        struct sfb__wire_hdr ih;
        const uint8_t *ip;
        sfb__wire_bundle_begin(&it, payload, h.payload_len, (int)f->src);
        while (sfb__wire_bundle_next_trusted(&it, &inner, &inner_len, &ih, &ip) == 1)
            add_sf(b, f->buf, (int)f->src, &ih, ip);
    } else {
        add_sf(b, f->buf, (int)f->src, &h, payload);
    }
    sfb__buf_put(f->buf);
}

/* Per matrix, in (clock, origin, part) order: every replica sums the same
 * updates of a matrix the same way. */
static int cmp_pend(const void *x, const void *y)
{
    const struct pend *a = x, *b = y;
    if (a->matrix != b->matrix) return a->matrix < b->matrix ? -1 : 1;
    if (a->clock != b->clock) return a->clock < b->clock ? -1 : 1;
    if (a->origin != b->origin) return a->origin < b->origin ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Ordered mode: moves the complete (matrix, clock) groups of bucket k —
 * every rank's update of the matrix, all its parts — to b->ready + n, in
 * (matrix, origin, part) order, and keeps the rest pending; the new n. */
static size_t take_complete(struct bcast *b, struct bucket *k, size_t n)
{
    uint32_t world = sfb__comm_world(b->c);
    qsort(k->v, k->n, sizeof *k->v, cmp_pend);
    size_t keep = 0;
    for (size_t i = 0, j; i < k->n; i = j) {
        uint32_t m = k->v[i].matrix, origins = 0;
        int whole = 1;
        for (j = i; j < k->n && k->v[j].matrix == m;) {
            size_t o = j;
            while (j < k->n && k->v[j].matrix == m && k->v[j].origin == k->v[o].origin) j++;
            origins++;
            whole &= j - o == k->v[o].count;
        }
        if (whole && origins == world) {
            memcpy(b->ready + n, k->v + i, (j - i) * sizeof *k->v);
            n += j - i;
        } else {
            memmove(k->v + keep, k->v + i, (j - i) * sizeof *k->v);
            keep += j - i;
        }
    }
    k->n = keep;
    return n;
}

/* Moves every pending update of a clock <= limit to b->ready (ordered
 * mode: only complete groups); how many. */
static size_t select_ready(struct bcast *b, int64_t limit, int *oom)
{
    size_t n = 0;
    *oom = 0;
    for (size_t i = 0; i < b->nbk; i++)
        if (b->bk[i].n && b->bk[i].clock <= limit) n += b->bk[i].n;
    if (n == 0) return 0;
    if (sfb__reserve((void **)&b->ready, &b->ready_cap, n * sizeof *b->ready) ||
        sfb__reserve((void **)&b->list, &b->list_cap, n * sizeof *b->list)) {
        *oom = 1;
        return 0;
    }
    n = 0;
    for (size_t i = 0; i < b->nbk; i++) {
        struct bucket *k = &b->bk[i];
        if (!k->n || k->clock > limit) continue;
        if (b->env.ordered) {
            n = take_complete(b, k, n);
            continue;
        }
        memcpy(b->ready + n, k->v, k->n * sizeof *k->v);
        n += k->n;
        k->n = 0;
    }
    return n;
}

/* Applies every pending update with clock ≤ limit, stacked: one
 * reconstruction call per matrix. */
static int apply_ready(struct bcast *b, int64_t limit, int64_t now_clock, int64_t required,
                       struct sfb__sync_clock *acct)
{
    int oom;
    size_t n = select_ready(b, limit, &oom);
    if (oom) return sfb__error(-ENOMEM, "sfb engine: out of memory");
    if (n == 0) return 0;
    double t0 = sfb__now();
    qsort(b->ready, n, sizeof *b->ready, cmp_pend);
    int ret = 0;
    for (size_t i = 0, j; i < n && !ret; i = j) {
        uint32_t m = b->ready[i].matrix;
        for (j = i; j < n && b->ready[j].matrix == m; j++) b->list[j - i] = &b->ready[j].view;
        double ta = sfb__trace_on() ? sfb__trace_us() : 0;
        ret = sfb_reconstruct_apply(b->recon, &b->env.mats[m], b->list, j - i);
        sfb__trace_span(SFB__TRACK_COMPUTE, "apply", ta, b->ready[i].clock, (int32_t)m, -1, 0);
    }
    for (size_t i = 0; i < n; i++) {
        struct pend *p = &b->ready[i];
        /* an update counts as applied once its last part is (the own one,
         * pending in ordered mode, was counted at publish) */
        if (!ret && p->origin != sfb__comm_rank(b->c) &&
            applied_part(b, p->origin, p->clock, p->matrix, p->count)) {
            b->from[p->origin]++;
            sfb__sync_count_applied(b->hist, acct, now_clock, p->clock, required);
        }
        sfb__buf_put(p->buf);
    }
    acct->apply_s += sfb__now() - t0;
    return ret;
}

static void waiter_take(void *priv, struct sfb__frame *f)
{
    take_frame(priv, f);
}

static int waiter_progress(void *priv, int64_t limit, int64_t now_clock, int64_t required,
                           struct sfb__sync_clock *acct)
{
    return apply_ready(priv, limit, now_clock, required, acct);
}

/* The waiter of this engine (sfb__sync_ops.waiter): its own wait's, and
 * the per-matrix engine's for it. */
static void bc_waiter(void *priv, struct sfb__sync_waiter *w)
{
    struct bcast *b = priv;
    *w = (struct sfb__sync_waiter){b, waiter_take, waiter_progress, 1, !b->env.flush_clock, NULL};
}

/* Receives and applies until every origin has applied `required`. */
static int wait_until(struct bcast *b, int64_t required, int64_t limit, int64_t now_clock,
                      struct sfb__sync_clock *acct)
{
    struct sfb__sync_waiter w;
    bc_waiter(b, &w);
    return sfb__sync_wait(b->c, b->env.ssp, &w, required, limit, now_clock, acct);
}

static int bc_wait(void *priv, int64_t clock, struct sfb__sync_clock *acct)
{
    struct bcast *b = priv;
    int64_t required = sfb__ssp_required(b->env.ssp, clock);
    int64_t limit = (b->env.apply_early || required == INT64_MIN) ? INT64_MAX : required;
    return wait_until(b, required, limit, clock, acct);
}

/* Clock mode: waits until the frames this rank forwards at boundary t have
 * arrived (receiving meanwhile), then lets them go, one message per link. */
static int boundary(struct bcast *b, int64_t t, int64_t last)
{
    if (!b->relay || !sfb__relay_flush_clock(b->relay)) return 0;
    int ret = 0;
    /* the frames due at t are of clocks ≥ t − max hops: none comes from a
     * peer that finished before */
    int64_t oldest = t - (int64_t)sfb__relay_max_hops(b->relay);
    double t0 = sfb__now();
    while (!sfb__relay_ready(b->relay, t, last)) {
        struct sfb__frame f;
        if ((ret = sfb__comm_check_wait(b->c, oldest, t0, NULL))) break;
        if (sfb__comm_recv(b->c, &f, 0.05) == 0) take_frame(b, &f);
    }
    /* network time, not publishing work: the job reports it as a wait */
    b->boundary_wait_s += sfb__now() - t0;
    return ret ? ret : sfb__relay_boundary(b->relay, t);
}

static int bc_drain(void *priv, int64_t last, struct sfb__sync_clock *acct)
{
    struct bcast *b = priv;
    if (b->relay && sfb__relay_flush_clock(b->relay) && sfb__comm_world(b->c) > 1) {
        /* The frames still in the pipeline need up to max-hops more
         * boundaries; then forward eagerly. */
        uint32_t h = sfb__relay_max_hops(b->relay);
        for (int64_t t = last + 1; t <= last + h; t++) {
            int ret = boundary(b, t, last);
            if (ret) return ret;
        }
        int ret = sfb__relay_boundary(b->relay, INT64_MAX);
        if (ret) return ret;
    }
    /* updates of later clocks stay pending (sfb_job_drain's promise) */
    return wait_until(b, last, last, last + 1, acct);
}

/* Ordered mode: the own update, as encoded for the peers, waits among
 * theirs (a reference to its frame held; bfloat16: to the buffer it is
 * widened into, as a peer's), so that every replica sums the same bytes in
 * the same order. */
static int pend_own(struct bcast *b, struct sfb__buf *buf, const struct sfb__wire_hdr *h,
                    const uint8_t *sf, size_t len, const struct sfb__wire_part *part)
{
    struct pend p = {.origin = h->origin, .matrix = local_of(b, h->matrix), .clock = h->clock,
                     .index = part ? part->index : 0, .count = part ? part->count : 1};
    struct sfb__buf *wide;
    int bad;
    int ret = view_frame(b, p.matrix, h, sf, len, &wide, &p.view, &bad);
    if (!ret && hold(b, wide ? wide : buf, &p))
        ret = sfb__error(-ENOMEM, "sfb engine: out of memory");
    if (wide) sfb__buf_put(wide);
    return ret;
}

/* Unordered bfloat16: the own update (or part of it), as encoded for the
 * peers, widened as they widen it and applied to the own replica at once
 * (read-my-writes), so that it adds what theirs add. */
static int apply_own_wide(struct bcast *b, uint32_t m, const struct sfb__wire_hdr *h,
                          const uint8_t *sf, size_t len)
{
    struct sfb__buf *wide;
    struct sfb_sf view;
    int bad;
    int ret = widen(b, h, sf, len, &wide, &view, &bad);
    if (ret) return ret;
    const struct sfb_sf *list = &view;
    ret = sfb_reconstruct_apply(b->recon, &b->env.mats[m], &list, 1);
    sfb__buf_put(wide);
    return ret;
}

/* A job of one worker with bfloat16 factors: nothing is sent, but the own
 * update is rounded as it would travel (encoded, widened: engine-owned
 * buffers, no comm pool without peers) and applied so, so that a job of
 * one worker and of many mean the same by bf16. */
static int apply_own_rounded(struct bcast *b, uint32_t m, const struct sfb_sf *sf)
{
    int sparse;
    uint64_t nnz;
    size_t size = sfb__sf_choose(sf, b->prec[m], &sparse, &nnz), wide;
    if (size == SIZE_MAX || sfb__reserve((void **)&b->enc, &b->enc_cap, size))
        return sfb__error(-ENOMEM, "sfb engine: out of memory");
    int ret = sfb__sf_encode(sf, sparse, nnz, b->prec[m], b->enc, size);
    if (!ret) ret = sfb__sf_expand_size(b->enc, size, sf->rows, sf->cols, sf->s, sparse, &wide);
    if (!ret && sfb__reserve((void **)&b->wide, &b->wide_cap, wide))
        ret = sfb__error(-ENOMEM, "sfb engine: out of memory");
    struct sfb_sf view;
    if (!ret) ret = sfb__sf_expand(b->enc, size, sf->rows, sf->cols, sf->s, sparse, b->wide, wide);
    if (!ret) ret = sfb__sf_view(b->wide, wide, sf->rows, sf->cols, sf->s, sparse, &view);
    const struct sfb_sf *list = &view;
    if (!ret) ret = sfb_reconstruct_apply(b->recon, &b->env.mats[m], &list, 1);
    return ret;
}

/* Encodes one SF frame of `sf` (a whole update, or part `part` of one:
 * then flagged and prefixed, docs/wire.md) with header and payload
 * contiguous, so relays can forward it as one slice, and hands it to the
 * relay, which sends it to this rank's children in its own tree (every peer
 * under `full`). */
static int send_frame(struct bcast *b, int64_t clock, uint32_t m, const struct sfb_sf *sf,
                      const struct sfb__wire_part *part)
{
    struct sfb__comm *c = b->c;
    int sparse;
    uint64_t nnz;
    size_t pre = part ? SFB_WIRE_PART_PREFIX : 0;
    unsigned prec = b->prec[m];
    size_t size = sfb__sf_choose(sf, prec, &sparse, &nnz);
    struct sfb__buf *buf;
    int ret = sfb__comm_buf_get(c, SFB_WIRE_HDR_SIZE + pre + size, &buf);
    if (ret) return ret;
    uint8_t *payload = buf->data + SFB_WIRE_HDR_SIZE;
    if (part) sfb__wire_put_part(payload, part);
    if ((ret = sfb__sf_encode(sf, sparse, nnz, prec, payload + pre, size))) {
        sfb__buf_put(buf);
        return ret;
    }
    struct sfb__wire_hdr h = {
        .type = SFB_WIRE_SF,
        .flags = (uint8_t)((sparse ? SFB_WIRE_F_SPARSE : 0) | (part ? SFB_WIRE_F_PART : 0) |
                           prec << SFB_WIRE_F_PREC_SHIFT),
        .origin = sfb__comm_rank(c), .sender = sfb__comm_rank(c), .clock = clock,
        .matrix = b->ids[m], .k = sf->rows, .d = sf->cols, .s = sf->s, .payload_len = pre + size};
    struct sfb__wire_piece piece = {payload, pre + size};
    ret = sfb__comm_header(c, &h, &piece, 1, buf->data);
    if (!ret && b->env.ordered) ret = pend_own(b, buf, &h, payload + pre, size, part);
    if (!ret)
        ret = sfb__relay_publish(b->relay, buf, SFB_WIRE_HDR_SIZE + pre + size, clock,
                                 part ? part->priority : 0);
    /* (the payload stays as sent while this reference is held) */
    if (!ret && !b->env.ordered && prec != SFB_WIRE_F32)
        ret = apply_own_wide(b, m, &h, payload + pre, size);
    sfb__buf_put(buf);
    return ret;
}

/* Sends matrix m's update whole, or in parts in the priority's order. */
static int send_update(struct bcast *b, int64_t clock, uint32_t m, const struct sfb_sf *sf)
{
    if (!b->env.part_bytes) return send_frame(b, clock, m, sf, NULL);
    struct sfb__parts *p = &b->parts;
    int ret = sfb__parts_plan(p, b->env.priority, sf, &b->env.mats[m], b->env.part_bytes,
                              b->prec[m]);
    for (uint32_t i = 0; !ret && i < p->n; i++) {
        struct sfb__wire_part part = {.index = i, .count = p->n};
        const struct sfb_sf *sub = sfb__parts_gather(p, sf, i, &part.priority);
        ret = sub ? send_frame(b, clock, m, sub, &part) : -ENOMEM;
    }
    return ret;
}

/* Matrix m's own update: leaves for the peers now and is applied here; the
 * clock is published (SSP marks it) with its last matrix. (bad: never
 * given, the factors travel and the caller checks them: sync.h.) */
static int bc_publish_one(void *priv, int64_t clock, uint32_t m, const struct sfb_sf *sf,
                          size_t *bad)
{
    struct bcast *b = priv;
    if (bad) return sfb__error(-SFB_EUSAGE, "broadcast: the factors are checked by the caller");
    struct sfb__comm *c = b->c;
    if (b->own_clock != clock) {
        b->own_clock = clock;
        b->own_left = b->nmat;
    }
    /* the parts' scores read the replica before this update */
    if (sfb__comm_world(c) > 1) {
        int ret = send_update(b, clock, m, sf);
        if (ret) return ret;
    }
    /* ordered: pending since send_update, applied with the peers';
     * bfloat16: applied by send_update as sent (the rounded factors) */
    int ret = sfb__comm_world(c) > 1 && (b->env.ordered || b->prec[m] != SFB_WIRE_F32) ? 0
              : b->prec[m] != SFB_WIRE_F32 ? apply_own_rounded(b, m, sf)
                                        : sfb_reconstruct_apply(b->recon, &b->env.mats[m], &sf, 1);
    if (ret || --b->own_left) return ret;
    if (sfb__comm_world(c) > 1 && (ret = boundary(b, clock, clock))) return ret;
    return sfb__ssp_mark(b->env.ssp, sfb__comm_rank(c), clock);
}

static int bc_publish(void *priv, int64_t clock, const struct sfb_sf *sf, uint32_t n)
{
    int ret = 0;
    for (uint32_t m = 0; m < n && !ret; m++) ret = bc_publish_one(priv, clock, m, &sf[m], NULL);
    return ret;
}

static void bc_report(void *priv, struct sfb__sync_report *rep)
{
    struct bcast *b = priv;
    memset(rep, 0, sizeof *rep);
    rep->relays = 1;
    rep->per_origin = b->from;
    rep->publish_wait_s = b->boundary_wait_s;
    if (!b->relay) return;
    struct sfb__relay_stats st;
    sfb__relay_stats(b->relay, &st);
    rep->data_msgs = st.data_msgs;
    rep->data_bytes = st.data_bytes;
    rep->bundles = st.bundles;
    rep->forwarded = st.forwarded;
    rep->queued_bytes = st.queued_bytes;
    rep->mean_hops = sfb__relay_mean_hops(b->relay);
    rep->max_hops = sfb__relay_max_hops(b->relay);
}

static const uint64_t *bc_hist(void *priv)
{
    return ((struct bcast *)priv)->hist;
}

/* S·(K+D) values to each of the P−1 peers. */
static double bc_formula(uint64_t rows, uint64_t cols, uint32_t world, uint32_t batch)
{
    return (double)(world - 1) * batch * ((double)rows + cols) * 4.0;
}

const struct sfb__sync_ops sfb__broadcast_ops = {
    .priv_size = sizeof(struct bcast),
    .open = bc_open,
    .close = bc_close,
    .wait = bc_wait,
    .publish = bc_publish,
    .publish_one = bc_publish_one,
    .drain = bc_drain,
    .staleness_hist = bc_hist,
    .report = bc_report,
    .waiter = bc_waiter,
};

const struct sfb__sync_desc sfb__broadcast_desc = {
    .name = "sfb",
    .summary = "sufficient factors, broadcast to every peer (default)",
    .overlays = 1,
    .formula_bytes = bc_formula,
    .ops = &sfb__broadcast_ops,
};
