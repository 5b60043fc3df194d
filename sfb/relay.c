/* Overlay relaying: see sfb/relay.h. */
#include "config.h"
#include "sfb/relay.h"
#include <sfb/topo.h>
#include "src/comm/comm.h"
#include "src/base/util.h"

#include <stdlib.h>
#include <string.h>

struct slice {
    struct sfb__buf *buf; /* one reference held while queued */
    size_t off, len;
    int64_t due;   /* clock boundary from which it may leave (INT64_MIN: now) */
    int64_t clock; /* the update's clock, */
    float priority; /* its part's priority */
    uint64_t seq;  /* and arrival order: the sending order (see before()) */
    int take;      /* kick: goes in this message */
};

/* Messages in flight per link: one without a budget (what waits meanwhile
 * coalesces into the next message); under a budget messages are capped,
 * and two in flight keep the link busy while a slow receiver completes
 * the last one (four let completions bunch: bench/managed.py). */
#define LINK_WINDOW 2

struct link {
    uint32_t dst;
    struct slice *q;
    size_t n, cap;
    /* eager: our sends to dst in flight (their buffers, to recognise the
     * completions); the link is busy at the relay's window */
    uint32_t nflight;
    const struct sfb__buf *flight[LINK_WINDOW];
    int dirty; /* forwards queued since the last pass (on_pass kicks it) */
};

/* Per origin: which of its updates arrived whole (every part of the frame of
 * every matrix this engine carries, `slot` being the matrix's index among
 * them). next is the first clock not complete (read by the compute thread:
 * clock-mode readiness); win[t % SEEN_WIN] tracks clock t for t in
 * [next, next + SEEN_WIN). Per frame the work is O(1) for a whole update
 * and O(log k) for a part (k: the clock's updates with parts still to
 * come); a clock costs its bitmap's clearing, nmat / 64 words. */
#define SEEN_WIN 64
struct partial_unit {
    uint32_t slot, count; /* count: its parts */
    uint64_t parts;       /* bit i: part i arrived */
};
struct seen_clock {
    uint32_t done;           /* slots complete */
    uint64_t *bits;          /* bit s: slot s complete (words words, in seen.bits) */
    struct partial_unit *pu; /* slots with some parts arrived, sorted by slot */
    size_t npu, pu_cap;
};
struct seen {
    _Atomic uint64_t next;
    uint64_t *bits; /* SEEN_WIN bitmaps, allocated at the origin's first frame */
    struct seen_clock win[SEEN_WIN];
};

#define NO_SLOT UINT32_MAX

struct sfb__relay {
    struct sfb__comm *c;
    struct sfb_topo *topo;
    uint32_t me, world, nmat, Q;
    uint32_t *slot, nids; /* wire matrix id (< nids) -> slot, NO_SLOT: not carried */
    size_t words;         /* of a seen_clock's bitmap */
    int flush_clock, any_relay;
    struct link *links;           /* Q out-links */
    uint32_t *scratch;            /* Q */
    struct seen *seen;            /* world */
    uint32_t *relay_for, nrelay;  /* origins this rank forwards (clock readiness) */
    int64_t released;             /* clock mode: boundaries done (loop thread) */
    int stalled;                  /* a send got -EAGAIN or the budget refused: retry */
    int dirty;                    /* some link is (forwards wait for the pass's end) */
    int priority;                 /* enum sfb__priority (sfb/parts.h) */
    size_t msg_cap;               /* largest message (SIZE_MAX: no cap) */
    uint32_t window;              /* messages in flight per link (eager) */
    uint32_t turn;                /* the link kick_all serves first */
    uint64_t seq;                 /* slices queued so far */
    _Atomic uint64_t queued;      /* bytes waiting on the links */
    _Atomic uint64_t msgs, bytes, bundles, forwarded, refused;
};

static void add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static int sendable(const struct sfb__relay *r, const struct slice *s)
{
    return s->due <= r->released;
}

/* The sending order of a link's queue: arrival under fifo; otherwise the
 * earliest clock first (SSP waits on the oldest update: sending a newer one
 * ahead of it only delays every peer), then the largest part first. */
static int before(const struct sfb__relay *r, const struct slice *a, const struct slice *b)
{
    if (r->priority) {
        if (a->clock != b->clock) return a->clock < b->clock;
        if (a->priority != b->priority) return a->priority > b->priority;
    }
    return a->seq < b->seq;
}

/* Insertion sort: a queue is short and mostly in order already. */
static void order_queue(const struct sfb__relay *r, struct link *l)
{
    for (size_t i = 1; i < l->n; i++) {
        struct slice x = l->q[i];
        size_t j = i;
        for (; j > 0 && before(r, &x, &l->q[j - 1]); j--) l->q[j] = l->q[j - 1];
        l->q[j] = x;
    }
}

/* Marks (take) what the next message on l carries: the sendable frames in
 * queue order up to msg_cap bytes (the first always). Returns how many;
 * *total their bytes, *first the first's index, *more whether a sendable
 * frame had to stay. */
static size_t pick(struct sfb__relay *r, struct link *l, size_t *total, size_t *first, int *more)
{
    size_t n = 0;
    *total = 0;
    *first = SIZE_MAX;
    *more = 0;
    for (size_t i = 0; i < l->n; i++) l->q[i].take = 0;
    for (size_t i = 0; i < l->n; i++) {
        struct slice *q = &l->q[i];
        if (!sendable(r, q)) continue;
        if (n && *total + q->len > r->msg_cap) {
            *more = 1;
            break;
        }
        q->take = 1;
        if (*first == SIZE_MAX) *first = i;
        n++;
        *total += q->len;
    }
    return n;
}

/* The taken frames, copied into one pooled buffer behind a fresh BUNDLE
 * header, to l->dst; *sent: the buffer (the transport holds its own
 * reference). Returns as sfb__comm_send, or -ENOMEM-like from the pool. */
static int send_bundle(struct sfb__relay *r, struct link *l, size_t total,
                       struct sfb__buf **sent)
{
    int ret = sfb__comm_buf_get(r->c, total, sent);
    if (ret) {
        SFB_LOG_W("relay: no buffer of %zu bytes for a bundle: %s", total, sfb_strerror(ret));
        return -EAGAIN;
    }
    size_t at = 0;
    for (size_t i = 0; i < l->n; i++)
        if (l->q[i].take) {
            memcpy((*sent)->data + at, l->q[i].buf->data + l->q[i].off, l->q[i].len);
            at += l->q[i].len;
        }
    struct sfb__wire_hdr h = {.type = SFB_WIRE_BUNDLE, .origin = r->me, .sender = r->me,
                             .payload_len = total};
    struct sfb__wire_piece piece = {(*sent)->data, total};
    uint8_t hdr[SFB_WIRE_HDR_SIZE];
    ret = sfb__comm_header(r->c, &h, &piece, 1, hdr);
    if (!ret) ret = sfb__comm_send(r->c, l->dst, hdr, sizeof hdr, *sent, 0, total, 0);
    sfb__buf_put(*sent);
    return ret;
}

/* Loop thread: if link k is free, sends what is sendable on it as one
 * message (a lone frame bare, several as a bundle; up to msg_cap bytes);
 * returns 1 when more is left. In clock mode
 * the boundary itself is the coalescing unit: what a boundary releases
 * leaves at once, one message per link (more only past msg_cap), even while
 * an earlier message is still in flight (so a slow completion cannot merge
 * two boundaries' messages). */
static int kick_one(struct sfb__relay *r, uint32_t k)
{
    struct link *l = &r->links[k];
    if ((l->nflight >= r->window && !r->flush_clock) || l->n == 0) return 0;
    if (r->priority) order_queue(r, l);
    size_t total, first;
    int more;
    size_t n = pick(r, l, &total, &first, &more);
    if (n == 0) return 0;
    /* the budget: nothing leaves while it is spent (its timer kicks again) */
    if (sfb__comm_budget_wait(r->c, 1) > 0) {
        r->stalled = 1;
        return 0;
    }
    struct sfb__buf *sent = l->q[first].buf;
    int ret = n == 1 ? sfb__comm_send(r->c, l->dst, NULL, 0, sent, l->q[first].off, total, 0)
                     : send_bundle(r, l, total, &sent);
    if (ret == -EAGAIN) {
        r->stalled = 1;
        return 0;
    }
    if (ret) {
        /* The transport is shutting down or the peer is gone: comm reports
         * the failure to the compute thread; the frames are dropped. */
        SFB_LOG_W("relay: send to rank %u failed: %s", l->dst, sfb_strerror(ret));
    } else {
        if (!r->flush_clock) l->flight[l->nflight++] = sent;
        add(&r->msgs, 1);
        add(&r->bytes, total + (n > 1 ? SFB_WIRE_HDR_SIZE : 0));
        if (n >= 2) add(&r->bundles, 1);
    }
    size_t keep = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (l->q[i].take) sfb__buf_put(l->q[i].buf);
        else l->q[keep++] = l->q[i];
    }
    l->n = keep;
    atomic_fetch_sub_explicit(&r->queued, total, memory_order_relaxed);
    return more;
}

/* Eager: one message per free link (the next goes on its completion).
 * Clock mode has no completion to wait for: messages leave until the
 * boundary's frames are all gone or the budget stops them. */
static void kick(struct sfb__relay *r, uint32_t k)
{
    while (kick_one(r, k) && r->flush_clock) {
    }
}

/* Every link in turn, starting one further each time, so that under a
 * budget no link always comes first. */
static void kick_all(struct sfb__relay *r)
{
    r->stalled = 0;
    if (!r->Q) return;
    uint32_t start = r->turn++ % r->Q;
    for (uint32_t i = 0; i < r->Q; i++) kick(r, (start + i) % r->Q);
}

/* Loop thread: queues a slice on out-link k. */
static void enqueue(struct sfb__relay *r, uint32_t k, struct sfb__buf *buf, size_t off,
                    size_t len, int64_t due, int64_t clock, float priority)
{
    struct link *l = &r->links[k];
    if (sfb__reserve((void **)&l->q, &l->cap, (l->n + 1) * sizeof *l->q)) {
        add(&r->refused, 1);
        SFB_LOG_E("relay: out of memory queueing a frame for rank %u", l->dst);
        return;
    }
    sfb__buf_ref(buf);
    l->q[l->n++] = (struct slice){buf, off, len, due, clock, priority, r->seq++, 0};
    atomic_fetch_add_explicit(&r->queued, len, memory_order_relaxed);
}

static int parts_complete(uint64_t parts, uint32_t count)
{
    return parts == (count >= 64 ? UINT64_MAX : (1ull << count) - 1);
}

/* The index in sc->pu of `slot`, or where it would go. */
static size_t pu_find(const struct seen_clock *sc, uint32_t slot)
{
    size_t lo = 0, hi = sc->npu;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sc->pu[mid].slot < slot) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Part `index` of `count` of slot's update of the tracked clock sc: 0 if
 * new, 1 if a duplicate or at odds with the count its other parts gave, -1
 * out of memory. Sets *complete when the update is now whole. */
static int clock_mark(struct seen_clock *sc, uint32_t slot, uint32_t index, uint32_t count,
                      int *complete)
{
    *complete = 0;
    if (sc->bits[slot / 64] >> (slot % 64) & 1) return 1;
    if (count <= 1) {
        *complete = 1;
        return 0;
    }
    size_t i = pu_find(sc, slot);
    if (i < sc->npu && sc->pu[i].slot == slot) {
        struct partial_unit *u = &sc->pu[i];
        if (u->count != count || (u->parts >> index & 1)) return 1;
        u->parts |= 1ull << index;
        if (parts_complete(u->parts, u->count)) {
            memmove(u, u + 1, (sc->npu - i - 1) * sizeof *u);
            sc->npu--;
            *complete = 1;
        }
        return 0;
    }
    if (sfb__reserve((void **)&sc->pu, &sc->pu_cap, (sc->npu + 1) * sizeof *sc->pu)) return -1;
    memmove(sc->pu + i + 1, sc->pu + i, (sc->npu - i) * sizeof *sc->pu);
    sc->pu[i] = (struct partial_unit){slot, count, 1ull << index};
    sc->npu++;
    return 0;
}

/* Loop thread: records part `index` of `count` of origin's update of
 * (clock, slot); 0 if it was new, 1 if a duplicate or at odds with the
 * count its other parts gave. A clock far ahead of the window is accepted
 * unrecorded. */
static int seen_mark(struct sfb__relay *r, struct seen *s, uint64_t clock, uint32_t slot,
                     uint32_t index, uint32_t count)
{
    uint64_t next = atomic_load_explicit(&s->next, memory_order_relaxed);
    if (clock < next) return 1;
    if (clock - next >= SEEN_WIN) return 0;
    if (!s->bits) {
        if (!(s->bits = calloc(SEEN_WIN * r->words, sizeof *s->bits))) return 0;
        for (size_t w = 0; w < SEEN_WIN; w++) s->win[w].bits = s->bits + w * r->words;
    }
    struct seen_clock *sc = &s->win[clock % SEEN_WIN];
    int complete, ret = clock_mark(sc, slot, index, count, &complete);
    if (ret) return ret > 0;
    if (complete) {
        sc->bits[slot / 64] |= 1ull << (slot % 64);
        sc->done++;
    }
    while (s->win[next % SEEN_WIN].done == r->nmat) {
        struct seen_clock *c = &s->win[next % SEEN_WIN];
        memset(c->bits, 0, r->words * sizeof *c->bits);
        c->done = 0;
        c->npu = 0;
        next++;
    }
    atomic_store_explicit(&s->next, next, memory_order_release);
    return 0;
}

/* Loop thread: one validated SF frame (exact bytes data[0..len) inside buf),
 * received from rank `from`. */
static void relay_one(struct sfb__relay *r, struct sfb__buf *buf, const uint8_t *data, size_t len,
                      const struct sfb__wire_hdr *h, uint32_t from)
{
    if (h->type != SFB_WIRE_SF || h->origin >= r->world || h->origin == r->me ||
        h->matrix >= r->nids || r->slot[h->matrix] == NO_SLOT || h->clock < 0 ||
        h->clock > INT64_MAX / 4) {
        add(&r->refused, 1);
        return;
    }
    if (sfb_topo_parent(r->topo, h->origin, r->me) != from) {
        add(&r->refused, 1);
        SFB_LOG_W("relay: frame of origin %u came from rank %u, not from its tree parent %u",
                  h->origin, from, sfb_topo_parent(r->topo, h->origin, r->me));
        return;
    }
    struct sfb__wire_part part;
    sfb__wire_part(h, data + SFB_WIRE_HDR_SIZE, &part);
    if (seen_mark(r, &r->seen[h->origin], (uint64_t)h->clock, r->slot[h->matrix], part.index,
                  part.count)) {
        add(&r->refused, 1);
        return;
    }
    uint32_t n = sfb_topo_forward_links(r->topo, h->origin, r->me, r->scratch);
    int64_t due = r->flush_clock ? h->clock + sfb_topo_hops(r->topo, h->origin, r->me) : INT64_MIN;
    for (uint32_t i = 0; i < n; i++) {
        enqueue(r, r->scratch[i], buf, (size_t)(data - buf->data), len, due, h->clock,
                part.priority);
        r->links[r->scratch[i]].dirty = 1;
        add(&r->forwarded, 1);
    }
    r->dirty |= n > 0;
}

/* comm's on_data hook (loop thread): forwards, then lets the frame go on to
 * the inbox for local application. comm has already decoded and verified the
 * frame (checksum, and every inner frame of a bundle), so `hh` is trusted and
 * the payload follows the header. */
static int on_data(void *user, struct sfb__frame *f, const struct sfb__wire_hdr *hh)
{
    struct sfb__relay *r = user;
    /* FMS's DENSE_ROWS frames of a per-matrix job go point to point */
    if (!r->any_relay || (hh->type != SFB_WIRE_SF && hh->type != SFB_WIRE_BUNDLE)) return 0;
    const struct sfb__wire_hdr h = *hh;
    const uint8_t *payload = f->data + SFB_WIRE_HDR_SIZE;
    if (h.type == SFB_WIRE_BUNDLE) {
        struct sfb__wire_iter it;
        const uint8_t *inner, *ip;
        size_t inner_len;
        struct sfb__wire_hdr ih;
        sfb__wire_bundle_begin(&it, payload, h.payload_len, (int)f->src);
        while (sfb__wire_bundle_next_trusted(&it, &inner, &inner_len, &ih, &ip) == 1)
            relay_one(r, f->buf, inner, inner_len, &ih, f->src);
    } else {
        relay_one(r, f->buf, f->data, f->len, &h, f->src);
    }
    return 0;
}

/* comm's on_pass hook (loop thread): the forwards of every frame the pass
 * delivered leave now, one message per free link. Kicking per frame instead
 * sent the first frame alone and, on shm (a send completes at once), most
 * of the rest alone too. */
static void on_pass(void *user)
{
    struct sfb__relay *r = user;
    if (!r->dirty) return;
    r->dirty = 0;
    for (uint32_t k = 0; k < r->Q; k++)
        if (r->links[k].dirty) {
            r->links[k].dirty = 0;
            kick(r, k);
        }
}

/* comm's on_sent hook (loop thread). */
static void on_sent(void *user, uint32_t dst, const struct sfb__buf *buf, int failed)
{
    struct sfb__relay *r = user;
    (void)failed;
    if (dst == SFB__COMM_BUDGET_DST) { /* the budget has room again */
        if (r->stalled) kick_all(r);
        return;
    }
    uint32_t k = sfb_topo_link_index(r->topo, r->me, dst);
    struct link *l = k < r->Q ? &r->links[k] : NULL;
    uint32_t i = 0;
    while (l && i < l->nflight && l->flight[i] != buf) i++;
    if (l && i < l->nflight) {
        l->flight[i] = l->flight[--l->nflight];
        kick(r, k);
    }
    if (r->stalled) kick_all(r);
}

int sfb__relay_open(struct sfb__relay **out, struct sfb__comm *c,
                    const struct sfb__relay_settings *s)
{
    const char *topology = s->topology;
    uint32_t degree = s->degree, nmat = s->nmat;
    const uint32_t *ids = s->ids;
    int flush_clock = s->flush_clock;
    int64_t start_clock = s->start_clock;
    *out = NULL;
    struct sfb__relay *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->c = c;
    r->me = sfb__comm_rank(c);
    r->world = sfb__comm_world(c);
    r->nmat = nmat ? nmat : 1;
    r->words = (r->nmat + 63) / 64;
    for (uint32_t i = 0; i < r->nmat; i++) r->nids = SFB_MAX(r->nids, (ids ? ids[i] : i) + 1);
    if (!(r->slot = malloc(r->nids * sizeof *r->slot))) {
        free(r);
        return -ENOMEM;
    }
    for (uint32_t id = 0; id < r->nids; id++) r->slot[id] = NO_SLOT;
    for (uint32_t i = 0; i < r->nmat; i++) {
        uint32_t id = ids ? ids[i] : i;
        if (r->slot[id] != NO_SLOT) {
            free(r->slot);
            free(r);
            return sfb__error(-EINVAL, "relay: matrix id %u repeated", id);
        }
        r->slot[id] = i;
    }
    r->flush_clock = flush_clock;
    r->priority = s->priority;
    r->msg_cap = s->msg_cap ? s->msg_cap : SIZE_MAX;
    /* Eager bundles on shm stay within one copy into the peer's queue: a
     * bigger message is a kernel rendezvous that costs the receiver a
     * system call and holds the link until it has run (P = 64 halton, 2
     * cores, 1.8 KB frames: 16 against 21 ms a clock). A lone bigger frame
     * still goes whole. Clock mode keeps one message per link. */
    size_t copy = sfb__comm_copy_max(c);
    if (!s->msg_cap && !flush_clock && copy > SFB_WIRE_HDR_SIZE)
        r->msg_cap = copy - SFB_WIRE_HDR_SIZE;
    r->window = s->msg_cap ? LINK_WINDOW : 1;
    r->released = flush_clock ? start_clock - 1 : INT64_MAX;
    int ret = sfb_topo_open(&r->topo, topology ? topology : "full", sfb__comm_world(c), degree);
    if (ret) goto fail;
    r->Q = sfb_topo_out_degree(r->topo);
    r->links = calloc(r->Q ? r->Q : 1, sizeof *r->links);
    r->scratch = calloc(r->Q ? r->Q : 1, sizeof *r->scratch);
    r->seen = calloc(r->world, sizeof *r->seen);
    r->relay_for = calloc(r->world, sizeof *r->relay_for);
    ret = -ENOMEM;
    if (!r->links || !r->scratch || !r->seen || !r->relay_for) goto fail;
    for (uint32_t k = 0; k < r->Q; k++) r->links[k].dst = sfb_topo_neighbor(r->topo, r->me, k);
    for (uint32_t o = 0; o < r->world; o++)
        if (o != r->me && sfb_topo_forward_links(r->topo, o, r->me, r->scratch))
            r->relay_for[r->nrelay++] = o;
    r->any_relay = r->nrelay > 0;
    /* resumed at start_clock: every origin's earlier frames count as seen */
    for (uint32_t o = 0; o < r->world; o++)
        atomic_store(&r->seen[o].next, (uint64_t)(start_clock > 0 ? start_clock : 0));
    struct sfb__comm_hooks hooks = {on_data, on_sent, on_pass, r};
    if (sfb__comm_world(c) > 1 && (ret = sfb__comm_set_hooks(c, &hooks))) goto fail;
    /* A frame that arrives before this rank's hook is installed would not be
     * forwarded: no rank publishes until every relay is in place. (The
     * shapes barrier in comm ran before the engine opened.) */
    if (sfb__comm_world(c) > 1 && sfb_topo_diameter(r->topo) > 1 && (ret = sfb__comm_barrier(c)))
        goto fail;
    *out = r;
    return 0;
fail:
    sfb__relay_close(&r);
    return ret;
}

static void drop_all(void *arg)
{
    struct sfb__relay *r = arg;
    for (uint32_t k = 0; k < r->Q; k++) {
        for (size_t i = 0; i < r->links[k].n; i++) sfb__buf_put(r->links[k].q[i].buf);
        r->links[k].n = 0;
    }
}

void sfb__relay_close(struct sfb__relay **pr)
{
    struct sfb__relay *r = *pr;
    if (!r) return;
    if (sfb__comm_world(r->c) > 1) sfb__comm_set_hooks(r->c, NULL);
    if (r->links) {
        drop_all(r);
        for (uint32_t k = 0; k < r->Q; k++) free(r->links[k].q);
    }
    free(r->links);
    free(r->scratch);
    for (uint32_t o = 0; r->seen && o < r->world; o++) {
        free(r->seen[o].bits);
        for (size_t w = 0; w < SEEN_WIN; w++) free(r->seen[o].win[w].pu);
    }
    free(r->seen);
    free(r->slot);
    free(r->relay_for);
    sfb_topo_close(&r->topo);
    free(r);
    *pr = NULL;
}

struct pub {
    struct sfb__relay *r;
    struct sfb__buf *buf; /* a reference of its own until the loop has queued it */
    size_t len;
    int64_t clock;
    float priority;
};

static void publish_in_loop(void *arg)
{
    struct pub *p = arg;
    struct sfb__relay *r = p->r;
    uint32_t n = sfb_topo_forward_links(r->topo, r->me, r->me, r->scratch);
    for (uint32_t i = 0; i < n; i++)
        enqueue(r, r->scratch[i], p->buf, 0, p->len, r->flush_clock ? p->clock : INT64_MIN,
                p->clock, p->priority);
    for (uint32_t i = 0; i < n; i++) kick(r, r->scratch[i]);
    sfb__buf_put(p->buf);
    free(p);
}

static void publish_dropped(void *arg)
{
    struct pub *p = arg;
    sfb__buf_put(p->buf);
    free(p);
}

/* Posted, not called: the compute thread goes on to its SSP wait instead of
 * sleeping until the loop thread has queued the frame (a wake-up and a
 * context switch a clock and frame; every later call to the loop, the
 * boundary and the BYE's included, runs after it). */
int sfb__relay_publish(struct sfb__relay *r, struct sfb__buf *buf, size_t len, int64_t clock,
                       float priority)
{
    if (sfb__comm_world(r->c) == 1) return 0;
    struct pub *p = malloc(sizeof *p);
    if (!p) return -ENOMEM;
    *p = (struct pub){r, buf, len, clock, priority};
    sfb__buf_ref(buf);
    int ret = sfb__comm_post(r->c, publish_in_loop, publish_dropped, p);
    if (ret) publish_dropped(p);
    return ret;
}

int sfb__relay_ready(struct sfb__relay *r, int64_t t, int64_t last)
{
    if (!r->flush_clock || t == INT64_MAX) return 1;
    for (uint32_t i = 0; i < r->nrelay; i++) {
        uint32_t o = r->relay_for[i];
        int64_t c = t - (int64_t)sfb_topo_hops(r->topo, o, r->me);
        if (c < 0 || c > last) continue;
        uint64_t need = (uint64_t)c + 1;
        if (atomic_load_explicit(&r->seen[o].next, memory_order_acquire) < need) return 0;
    }
    return 1;
}

struct bound {
    struct sfb__relay *r;
    int64_t t;
};

static void boundary_in_loop(void *arg)
{
    struct bound *b = arg;
    if (b->t > b->r->released) b->r->released = b->t;
    kick_all(b->r);
}

int sfb__relay_boundary(struct sfb__relay *r, int64_t t)
{
    if (sfb__comm_world(r->c) == 1 || !r->flush_clock) return 0;
    struct bound b = {r, t};
    return sfb__comm_call(r->c, boundary_in_loop, &b);
}

uint32_t sfb__relay_max_hops(const struct sfb__relay *r)
{
    uint32_t m = 0;
    for (uint32_t o = 0; o < r->world; o++)
        if (o != r->me) m = SFB_MAX(m, sfb_topo_hops(r->topo, o, r->me));
    return m;
}

double sfb__relay_mean_hops(const struct sfb__relay *r)
{
    if (r->world < 2) return 0;
    double s = 0;
    for (uint32_t o = 0; o < r->world; o++)
        if (o != r->me) s += sfb_topo_hops(r->topo, o, r->me);
    return s / (r->world - 1);
}

uint32_t sfb__relay_diameter(const struct sfb__relay *r)
{
    return sfb_topo_diameter(r->topo);
}

int sfb__relay_flush_clock(const struct sfb__relay *r)
{
    return r->flush_clock;
}

void sfb__relay_stats(const struct sfb__relay *r, struct sfb__relay_stats *st)
{
    st->data_msgs = atomic_load(&r->msgs);
    st->data_bytes = atomic_load(&r->bytes);
    st->bundles = atomic_load(&r->bundles);
    st->forwarded = atomic_load(&r->forwarded);
    st->refused = atomic_load(&r->refused);
    st->queued_bytes = atomic_load(&r->queued);
}

