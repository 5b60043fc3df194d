/* The SFB engine: every clock's sufficient factors go to every peer — over
 * full P2P or down the origin's tree of an overlay, relayed by the
 * communication threads (sfb/relay.c); received factors wait in a pending set until SSP requires them (or
 * at once with apply_early) and are then applied, all of them, with one
 * reconstruction call per matrix.
 *
 * Received frames are never copied: the SF views point into the transport's
 * receive buffers, whose references are held while pending. */
#include "config.h"
#include "sfb/codec.h"
#include "sfb/parts.h"
#include "sfb/relay.h"
#include "sfb/sync.h"
#include "src/net/comm.h"
#include "src/base/common.h"
#include "src/net/ssp.h"

#include <stdlib.h>
#include <string.h>

struct pend {
    struct sfb__buf *buf; /* reference held while pending */
    struct sfb_sf view;   /* points into buf */
    uint32_t origin, matrix;
    uint32_t index, count; /* part index of count (0 of 1: a whole update) */
    int64_t clock;
};

/* An (origin, clock) not yet applied in full: some matrices, or some parts
 * of a matrix's update, are. SSP marks it once the last part of the last
 * matrix is. */
struct partial {
    uint32_t origin, done; /* done bit m: matrix m (local index) applied in full */
    int64_t clock;
    uint64_t got[SFB__RELAY_MAX_IDS];   /* per matrix: parts applied */
    uint32_t count[SFB__RELAY_MAX_IDS]; /* per matrix: its parts (0: none applied) */
};

struct bcast {
    struct sfb__sync_env env;
    struct sfb__comm *c;
    struct sfb_reconstruct *recon;
    uint32_t nmat;
    uint32_t ids[SFB__RELAY_MAX_IDS]; /* wire id of matrix m */
    struct partial *part;
    size_t npart, part_cap;
    struct sfb__parts parts; /* publish's split of an update (part_bytes > 0) */
    struct pend *pend;
    size_t npend, pend_cap;
    const struct sfb_sf **list;
    size_t list_cap;
    uint64_t hist[SFB_STALENESS_BINS];
    uint64_t rejected; /* frames refused after the wire checks */
    struct sfb__relay *relay;
    uint64_t *from;    /* updates applied per origin */
    double boundary_wait_s; /* boundary(): waiting for the frames to forward */
};

static void bc_close(void *priv)
{
    struct bcast *b = priv;
    sfb__relay_close(&b->relay);
    for (size_t i = 0; i < b->npend; i++) sfb__buf_put(b->pend[i].buf);
    free(b->pend);
    free(b->part);
    free(b->from);
    free(b->list);
    sfb__parts_free(&b->parts);
    sfb_reconstruct_close(&b->recon);
}

static int bc_open(void *priv, const struct sfb__sync_env *env)
{
    struct bcast *b = priv;
    b->env = *env;
    b->c = env->comm;
    b->nmat = env->nmat;
    if (b->nmat == 0 || b->nmat > 32 || b->nmat > SFB__RELAY_MAX_IDS)
        return sfb__error(-EINVAL, "sfb engine: %u matrices", b->nmat);
    for (uint32_t m = 0; m < b->nmat; m++) b->ids[m] = env->ids ? env->ids[m] : m;
    b->from = calloc(sfb__comm_world(b->c), sizeof *b->from);
    int ret = b->from ? 0 : -ENOMEM;
    struct sfb__relay_settings rs = {
        .topology = env->topology, .degree = env->degree, .flush_clock = env->flush_clock,
        .nmat = b->nmat, .ids = b->ids, .start_clock = env->start_clock,
        .priority = env->priority, .msg_cap = env->msg_cap};
    if (!ret) ret = sfb__relay_open(&b->relay, b->c, &rs);
    /* The relay tracks arrivals in a 64-frame window per origin, and clock
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
    if (ret) bc_close(b);
    return ret;
}

/* The local index of wire matrix id `id`, or nmat when this engine does
 * not carry it. */
static uint32_t local_of(const struct bcast *b, uint32_t id)
{
    uint32_t m = 0;
    while (m < b->nmat && b->ids[m] != id) m++;
    return m;
}

static struct partial *find_part(struct bcast *b, uint32_t origin, int64_t clock)
{
    for (size_t i = 0; i < b->npart; i++)
        if (b->part[i].origin == origin && b->part[i].clock == clock) return &b->part[i];
    return NULL;
}

/* Whether part `index` of `count` of matrix m of (origin, clock) can be
 * taken: "" when new, else why not (applied or pending already, or its
 * count differs from what its other parts said). */
static const char *part_conflict(struct bcast *b, uint32_t origin, int64_t clock, uint32_t m,
                                 uint32_t index, uint32_t count)
{
    static const char *const again = "replays an update already received";
    static const char *const other = "its part count differs from the update's other parts";
    if (sfb__ssp_is_applied(b->env.ssp, origin, clock)) return again;
    const struct partial *p = find_part(b, origin, clock);
    if (p && (p->done >> m & 1)) return again;
    if (p && p->count[m] && p->count[m] != count) return other;
    if (p && (p->got[m] >> index & 1)) return again;
    for (size_t i = 0; i < b->npend; i++) {
        const struct pend *q = &b->pend[i];
        if (q->origin != origin || q->clock != clock || q->matrix != m) continue;
        if (q->count != count) return other;
        if (q->index == index) return again;
    }
    return "";
}

/* Part `index` of `count` of matrix m of (origin, clock) is applied: 1 when
 * that completes the matrix's update (SSP marks the pair once every matrix
 * of it is complete), 0 when parts are still to come. */
static int applied_part(struct bcast *b, uint32_t origin, int64_t clock, uint32_t m,
                        uint32_t index, uint32_t count)
{
    uint32_t all = b->nmat >= 32 ? UINT32_MAX : (1u << b->nmat) - 1;
    if (b->nmat == 1 && count == 1) { /* the common case: nothing to track */
        sfb__ssp_mark(b->env.ssp, origin, clock);
        return 1;
    }
    struct partial *p = find_part(b, origin, clock);
    if (!p) { /* room reserved by apply_ready */
        p = &b->part[b->npart++];
        *p = (struct partial){.origin = origin, .clock = clock};
    }
    p->count[m] = count;
    p->got[m] |= 1ull << index;
    if (p->got[m] != (count >= 64 ? UINT64_MAX : (1ull << count) - 1)) return 0;
    p->done |= 1u << m;
    if (p->done == all) {
        *p = b->part[--b->npart];
        sfb__ssp_mark(b->env.ssp, origin, clock);
    }
    return 1;
}

/* One validated SF frame: becomes pending, holding a reference to `buf`. */
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
    struct sfb__wire_part part;
    sfb__wire_part(h, payload, &part);
    if (!why) {
        why = part_conflict(b, h->origin, h->clock, m, part.index, part.count);
        if (!*why) why = NULL;
    }
    if (!why) {
        struct pend p = {.origin = h->origin, .matrix = m, .clock = h->clock,
                         .index = part.index, .count = part.count};
        uint64_t sf_len;
        const uint8_t *sf = sfb__wire_sf_payload(h, payload, &sf_len);
        int ret = sfb__sf_view(sf, sf_len, h->k, h->d, h->s,
                               (h->flags & SFB_WIRE_F_SPARSE) != 0, &p.view);
        if (ret) {
            /* checksummed, so as its origin built it: not noise */
            b->rejected++;
            sfb__comm_reject_update(b->c, h->origin, (uint32_t)from, h->clock, h->matrix,
                                    sfb_error_message(ret));
            return;
        } else if (sfb__reserve((void **)&b->pend, &b->pend_cap,
                                (b->npend + 1) * sizeof *b->pend)) {
            why = "out of memory";
        } else {
            p.buf = buf;
            sfb__buf_ref(buf);
            b->pend[b->npend++] = p;
            return;
        }
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

static int cmp_pend(const void *x, const void *y)
{
    const struct pend *a = x, *b = y;
    if (a->clock != b->clock) return a->clock < b->clock ? -1 : 1;
    if (a->origin != b->origin) return a->origin < b->origin ? -1 : 1;
    if (a->matrix != b->matrix) return a->matrix < b->matrix ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Applies every pending update with clock ≤ limit, stacked, in (clock,
 * origin) order so that every replica sums the same set the same way. */
static int apply_ready(struct bcast *b, int64_t limit, int64_t now_clock, int64_t required,
                       struct sfb__sync_clock *acct)
{
    if (b->npend == 0) return 0;
    qsort(b->pend, b->npend, sizeof *b->pend, cmp_pend);
    size_t n = 0;
    while (n < b->npend && b->pend[n].clock <= limit) n++;
    if (n == 0) return 0;
    double t0 = sfb__now();
    if (sfb__reserve((void **)&b->list, &b->list_cap, n * sizeof *b->list)) return -ENOMEM;
    if (sfb__reserve((void **)&b->part, &b->part_cap, (b->npart + n) * sizeof *b->part))
        return -ENOMEM;
    for (uint32_t m = 0; m < b->nmat; m++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (b->pend[i].matrix == m) b->list[k++] = &b->pend[i].view;
        if (!k) continue;
        int ret = sfb_reconstruct_apply(b->recon, &b->env.mats[m], b->list, k);
        if (ret) return ret;
    }
    for (size_t i = 0; i < n; i++) {
        struct pend *p = &b->pend[i];
        /* an update counts as applied once its last part is */
        if (applied_part(b, p->origin, p->clock, p->matrix, p->index, p->count)) {
            b->from[p->origin]++;
            sfb__sync_count_applied(b->hist, acct, now_clock, p->clock, required);
        }
        sfb__buf_put(p->buf);
    }
    memmove(b->pend, b->pend + n, (b->npend - n) * sizeof *b->pend);
    b->npend -= n;
    acct->apply_s += sfb__now() - t0;
    return 0;
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

/* Receives and applies until every origin has applied `required`. */
static int wait_until(struct bcast *b, int64_t required, int64_t limit, int64_t now_clock,
                      struct sfb__sync_clock *acct)
{
    const struct sfb__sync_waiter w = {b, waiter_take, waiter_progress, 1, !b->env.flush_clock};
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
    return wait_until(b, last, INT64_MAX, last + 1, acct);
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
    size_t size = sfb__sf_choose(sf, &sparse, &nnz);
    struct sfb__buf *buf;
    int ret = sfb__comm_buf_get(c, SFB_WIRE_HDR_SIZE + pre + size, &buf);
    if (ret) return ret;
    uint8_t *payload = buf->data + SFB_WIRE_HDR_SIZE;
    if (part) sfb__wire_put_part(payload, part);
    if ((ret = sfb__sf_encode(sf, sparse, nnz, payload + pre, size))) {
        sfb__buf_put(buf);
        return ret;
    }
    struct sfb__wire_hdr h = {
        .type = SFB_WIRE_SF,
        .flags = (uint8_t)((sparse ? SFB_WIRE_F_SPARSE : 0) | (part ? SFB_WIRE_F_PART : 0)),
        .origin = sfb__comm_rank(c), .sender = sfb__comm_rank(c), .clock = clock,
        .matrix = b->ids[m], .k = sf->rows, .d = sf->cols, .s = sf->s, .payload_len = pre + size};
    struct sfb__wire_piece piece = {payload, pre + size};
    ret = sfb__comm_header(c, &h, &piece, 1, buf->data);
    if (!ret)
        ret = sfb__relay_publish(b->relay, buf, SFB_WIRE_HDR_SIZE + pre + size, clock,
                                 part ? part->priority : 0);
    sfb__buf_put(buf);
    return ret;
}

/* Sends matrix m's update whole, or in parts in the priority's order. */
static int send_update(struct bcast *b, int64_t clock, uint32_t m, const struct sfb_sf *sf)
{
    if (!b->env.part_bytes) return send_frame(b, clock, m, sf, NULL);
    struct sfb__parts *p = &b->parts;
    int ret = sfb__parts_plan(p, b->env.priority, sf, &b->env.mats[m], b->env.part_bytes);
    for (uint32_t i = 0; !ret && i < p->n; i++) {
        struct sfb__wire_part part = {.index = i, .count = p->n};
        const struct sfb_sf *sub = sfb__parts_gather(p, sf, i, &part.priority);
        ret = sub ? send_frame(b, clock, m, sub, &part) : -ENOMEM;
    }
    return ret;
}

static int bc_publish(void *priv, int64_t clock, const struct sfb_sf *sf, uint32_t n)
{
    struct bcast *b = priv;
    struct sfb__comm *c = b->c;
    for (uint32_t m = 0; m < n; m++) {
        /* the parts' scores read the replica before this update */
        if (sfb__comm_world(c) > 1) {
            int ret = send_update(b, clock, m, &sf[m]);
            if (ret) return ret;
        }
        const struct sfb_sf *one = &sf[m];
        int ret = sfb_reconstruct_apply(b->recon, &b->env.mats[m], &one, 1);
        if (ret) return ret;
    }
    if (sfb__comm_world(c) > 1) {
        int ret = boundary(b, clock, clock);
        if (ret) return ret;
    }
    return sfb__ssp_mark(b->env.ssp, sfb__comm_rank(c), clock);
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
    .name = "sfb",
    .priv_size = sizeof(struct bcast),
    .open = bc_open,
    .close = bc_close,
    .wait = bc_wait,
    .publish = bc_publish,
    .drain = bc_drain,
    .staleness_hist = bc_hist,
    .report = bc_report,
    .summary = "sufficient factors, broadcast to every peer (default)",
    .overlays = 1,
    .formula_bytes = bc_formula,
    .take = waiter_take,
    .progress = waiter_progress,
};
