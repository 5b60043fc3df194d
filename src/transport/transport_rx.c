/* libfabric transport: wildcard receives, reassembly of big frames,
 * delivery to the inbox (src/transport/transport_impl.h). */
#include "config.h"
#include "src/transport/transport_impl.h"

#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/base/fifo.h"
#include "src/base/futex.h"
#include "src/loop/loop.h"

#include <limits.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <string.h>

/* ---------------- delivery ---------------- */

static void deliver(struct sfb__transport *t, struct sfb__buf *b, size_t len, uint32_t src)
{
    b->len = len;
    b->src = src;
    stat_add(&t->stats.frames_recv, 1);
    stat_add(&t->stats.bytes_recv, len);
    struct sfb__frame fr = {b, b->data + b->off, len, src, 1};
    if (t->s.on_frame && t->s.on_frame(t->s.user, &fr)) return;
    int wake;
    pthread_mutex_lock(&t->mu);
    atomic_fetch_add_explicit(&t->inbox_bytes, len, memory_order_relaxed);
    if (!t->ovf_head && t->in_count < t->s.inbox_cap) {
        struct sfb__frame *f = &t->inbox[(t->in_head + t->in_count) % t->s.inbox_cap];
        *f = fr;
        t->in_count++;
        t->in_units += fr.units;
        /* a receiver waiting for more updates than are in sleeps on */
        wake = t->in_waiting && t->in_units >= t->want_units;
    } else {
        /* Inbox full: park the frame and stop reposting receives, so the
         * provider pushes back on the senders. A receiver waiting for more
         * updates than the inbox holds stops waiting. */
        SFB_FIFO_PUSH(t->ovf_head, t->ovf_tail, b, next);
        atomic_store(&t->ovf_nonempty, 1);
        wake = t->in_waiting;
    }
    atomic_fetch_add_explicit(&t->in_seq, 1, memory_order_relaxed);
    pthread_mutex_unlock(&t->mu);
    /* Woken after the unlock: a receiver woken under the lock would block
     * on it at once, and the unlock would wake it a second time (two
     * context switches a frame where one will do, on a shared core). */
    if (wake) sfb__futex_wake(&t->in_seq, 1);
}

/* ---------------- posting (receives) ---------------- */

int sfb__tp_post_wildcard(struct sfb__transport *t)
{
    struct sfb__buf *b;
    if (sfb__transport_buf_get(t, t->chunk, &b)) return -ENOMEM;
    struct op *o = sfb__tp_op_get(t);
    if (!o) {
        sfb__buf_put(b);
        return -ENOMEM;
    }
    o->kind = OP_RECV;
    o->rbuf = b;
    ssize_t rc = FAB(t, fi_trecv(t->rx_ep, b->data, t->chunk, b->desc, FI_ADDR_UNSPEC, 0, ~0ull, &o->ctx));
    if (rc) {
        sfb__tp_op_put(t, o);
        sfb__buf_put(b);
        if (rc != -FI_EAGAIN) sfb__tp_report(t, -1, (int)rc, "fi_trecv failed", NULL);
        return (int)rc;
    }
    return 0;
}

/* ---------------- RMA frames (receiver side) ---------------- */

static void post_acks(struct sfb__transport *t)
{
    /* Before set_peers nothing can be addressed: ACKs wait (queued work
     * keeps the loop polling). */
    while (t->ack_head && sfb__tp_world(t)) {
        struct op *o = t->ack_head;
        fi_addr_t fa;
        if (sfb__tp_peer_gone(t, o->peer) || (fa = sfb__tp_addr(t, o->peer)) == FI_ADDR_NOTAVAIL) {
            /* nobody to ACK (the sender times the frame out) */
            SFB_FIFO_DROP_HEAD(t->ack_head, t->ack_tail, qnext);
            sfb__tp_op_put(t, o);
            continue;
        }
        if (sfb__tp_contact_closed(t, o->peer)) return;
        ssize_t rc = FAB(t, fi_tsend(t->ep, o->thdr, THDR_LEN, t->mr_local ? o->desc : NULL, fa,
                                     0, &o->ctx));
        sfb__tp_contact(t, o->peer, rc);
        if (rc == 0 || rc == -FI_EAGAIN) sfb__tp_ring(t, o->peer, rc == -FI_EAGAIN);
        if (rc == -FI_EAGAIN) {
            stat_add(&t->stats.eagain, 1);
            return;
        }
        SFB_FIFO_DROP_HEAD(t->ack_head, t->ack_tail, qnext);
        if (rc) {
            /* The sender times the frame out and reports it. */
            sfb__tp_report(t, (int)o->peer, (int)rc, "fi_tsend (RMA ACK) failed", NULL);
            sfb__tp_op_put(t, o);
        }
    }
}

/* Queues the ACK (status 0) or refusal (1) of an RMA frame on op o. */
static void send_ack(struct sfb__transport *t, struct op *o, uint32_t status)
{
    o->kind = OP_ACK;
    o->rbuf = NULL;
    sfb__put_u32(o->thdr, t->s.rank | (uint32_t)K_ACK << 24);
    sfb__put_u32(o->thdr + 4, o->seq);
    sfb__put_u64(o->thdr + 8, o->cookie | (uint64_t)status << 32);
    SFB_FIFO_PUSH(t->ack_head, t->ack_tail, o, qnext);
    post_acks(t);
}

/* A read in flight holds a slot (from `from`, to `to`): NULL → op when
 * posted, op → NULL when done. */
static void read_slot(struct sfb__transport *t, struct op *from, struct op *to)
{
    for (unsigned i = 0; i < MAX_READS; i++)
        if (t->reads[i] == from) {
            t->reads[i] = to;
            return;
        }
}

/* Reads in flight; their bytes in *bytes. */
unsigned sfb__tp_reads_in_flight(const struct sfb__transport *t, size_t *bytes)
{
    unsigned n = 0;
    size_t sum = 0;
    for (unsigned i = 0; i < MAX_READS; i++)
        if (t->reads[i]) {
            n++;
            sum += t->reads[i]->rbuf->len;
        }
    if (bytes) *bytes = sum;
    return n;
}

struct sfb__buf *sfb__tp_fairest(struct sfb__buf *head, struct op *const *reads,
                                struct sfb__buf **prev)
{
    struct sfb__buf *pick = NULL, *p = NULL;
    unsigned best = UINT_MAX;
    *prev = NULL;
    for (struct sfb__buf *a = head; a && best; p = a, a = a->next) {
        unsigned k = 0;
        for (unsigned i = 0; i < MAX_READS; i++) k += reads[i] && reads[i]->peer == a->src;
        if (k < best) {
            best = k;
            pick = a;
            *prev = p;
        }
    }
    return pick;
}

/* The fairest announce (sfb__tp_fairest) to the head of the queue. */
static void front_fairest(struct sfb__transport *t)
{
    struct sfb__buf *prev, *pick = sfb__tp_fairest(t->rd_head, t->reads, &prev);
    if (!prev) return; /* (the head already) */
    prev->next = pick->next;
    if (t->rd_tail == pick) t->rd_tail = prev;
    pick->next = t->rd_head;
    t->rd_head = pick;
}

/* Posts ACKs, then one fi_read per announce (validated in on_message) into
 * a pooled buffer of the frame's size: the body straight from the sender's
 * buffer, the frame header from the announce. At most MAX_READS at once,
 * within read_window; the rest wait, each next one the oldest from a peer
 * with the fewest reads in flight (front_fairest). */
int sfb__tp_post_reads(struct sfb__transport *t)
{
    int work = 0;
    post_acks(t);
    size_t reading;
    unsigned n;
    /* Announces that came before set_peers wait for it, like the ACKs. */
    uint32_t world = sfb__tp_world(t);
    while (world && t->rd_head && (n = sfb__tp_reads_in_flight(t, &reading)) < MAX_READS) {
        front_fairest(t);
        struct sfb__buf *a = t->rd_head;
        if (a->src >= world) { /* unchecked when it came: no world yet */
            SFB_LOG_W("transport: RMA announce from rank %u dropped (world of %u)", a->src, world);
            stat_add(&t->stats.dropped, 1);
            SFB_FIFO_DROP_HEAD(t->rd_head, t->rd_tail, next);
            sfb__buf_put(a);
            work = 1;
            continue;
        }
        const uint8_t *p = a->data + THDR_LEN;
        uint64_t total = sfb__get_u64(a->data + 8);
        /* Backpressure on big frames: bytes being read plus bytes waiting in
         * the inbox stay within read_window (one frame always may go). */
        size_t queued = atomic_load_explicit(&t->inbox_bytes, memory_order_relaxed);
        if ((n || queued) && reading + queued + total > t->s.read_window) break;
        struct op *o = sfb__tp_op_get(t);
        if (!o) break;
        uint32_t hlen = sfb__get_u32(p + 16);
        o->peer = a->src;
        o->seq = sfb__get_u32(a->data + 4);
        o->cookie = sfb__get_u32(p + 20);
        struct sfb__buf *d = NULL;
        ssize_t rc = -FI_ENOMEM;
        if (sfb__tp_peer_gone(t, a->src)) { /* its memory is gone with it */
            SFB_FIFO_DROP_HEAD(t->rd_head, t->rd_tail, next);
            sfb__tp_op_put(t, o);
            sfb__buf_put(a);
            work = 1;
            continue;
        }
        if (sfb__tp_contact_closed(t, a->src)) {
            sfb__tp_op_put(t, o);
            break;
        }
        fi_addr_t fa = sfb__tp_read_addr(t, a->src);
        if (fa != FI_ADDR_NOTAVAIL && sfb__transport_buf_get(t, total, &d) == 0) {
            memcpy(d->data, p + ANN_LEN, hlen);
            d->len = total;
            d->off = 0;
            d->src = a->src;
            o->kind = OP_READ;
            o->rbuf = d;
            rc = FAB(t, fi_read(t->rx_ep, d->data + hlen, total - hlen, t->mr_local ? d->desc : NULL,
                                fa, sfb__get_u64(p), sfb__get_u64(p + 8), &o->ctx));
            sfb__tp_contact(t, a->src, rc);
            if (rc == 0) sfb__tp_ring(t, a->src, 0);
            if (rc == -FI_EAGAIN) {
                sfb__tp_op_put(t, o);
                sfb__buf_put(d);
                stat_add(&t->stats.eagain, 1);
                break;
            }
        }
        SFB_FIFO_DROP_HEAD(t->rd_head, t->rd_tail, next);
        if (!rc) {
            o->started = sfb__now();
            read_slot(t, NULL, o);
        } else {
            sfb__tp_report(t, (int)a->src, (int)rc, "fi_read of an RMA frame failed", NULL);
            stat_add(&t->stats.dropped, 1);
            sfb__buf_put(d);
            send_ack(t, o, 1);
        }
        sfb__buf_put(a);
        work = 1;
    }
    return work;
}

/* Completion of an fi_read: the frame goes the way of every other, then the
 * op carries the ACK (delivery first: it is on the ping-pong's critical
 * path, the ACK only frees the sender's buffer). */
void sfb__tp_read_done(struct sfb__transport *t, struct op *o, int err)
{
    struct sfb__buf *d = o->rbuf;
    read_slot(t, o, NULL);
    if (err) {
        stat_add(&t->stats.dropped, 1);
        sfb__buf_put(d);
        send_ack(t, o, 1);
        return;
    }
    deliver(t, d, d->len, d->src);
    send_ack(t, o, 0);
}

/* The read a completion error without context belongs to: libfabric 1.17's
 * shm reports a failed read (a forged address or key) that way, and its
 * reads complete in order, so it is the oldest one in flight. Other
 * providers give every error its context. NULL when no read is in flight. */
struct op *sfb__tp_read_oldest(struct sfb__transport *t)
{
    struct op *o = NULL;
    for (unsigned i = 0; i < MAX_READS; i++)
        if (t->reads[i] && (!o || t->reads[i]->started < o->started)) o = t->reads[i];
    return o;
}

/* An announce: checked here, read when an op is free (post_reads). */
static void on_announce(struct sfb__transport *t, struct sfb__buf *b, size_t len, uint32_t src,
                        uint64_t total)
{
    uint32_t hlen = len >= THDR_LEN + ANN_LEN ? sfb__get_u32(b->data + THDR_LEN + 16) : 0;
    const char *why = NULL;
    if (!t->rma) why = "RMA not enabled here";
    else if (len < THDR_LEN + ANN_LEN || hlen > SFB__TRANSPORT_HDR_MAX ||
             len != THDR_LEN + ANN_LEN + hlen)
        why = "malformed announce";
    else if (total <= hlen || total > t->s.max_frame) why = "frame length out of range";
    if (why) {
        SFB_LOG_W("transport: RMA announce (%zu bytes, length %llu) from rank %u dropped: %s", len,
                  (unsigned long long)total, src, why);
        stat_add(&t->stats.dropped, 1);
        sfb__buf_put(b);
        return;
    }
    /* One that must wait behind others gives its chunk-sized receive buffer
     * back: a burst of announces would otherwise hold chunk_size each. */
    struct sfb__buf *c;
    if (t->rd_head && b->cap > len && sfb__transport_buf_get(t, len, &c) == 0) {
        memcpy(c->data, b->data, len);
        sfb__buf_put(b);
        b = c;
    }
    b->src = src;
    SFB_FIFO_PUSH(t->rd_head, t->rd_tail, b, next);
    sfb__tp_post_reads(t);
}

static void asm_drop(struct sfb__transport *t, struct asm_rec *a, const char *why)
{
    SFB_LOG_W("transport: frame %u from rank %u dropped: %s", a->seq, a->src, why);
    stat_add(&t->stats.dropped, 1);
    if (a->buf) sfb__buf_put(a->buf);
    while (a->stash) {
        struct sfb__buf *b = a->stash;
        a->stash = b->next;
        t->stashed--;
        sfb__buf_put(b);
    }
    /* Unlink from the active list. */
    for (struct asm_rec **pp = &t->active; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    sfb__tp_asm_put(t, a);
}

static void asm_finish_if_done(struct sfb__transport *t, struct asm_rec *a)
{
    if (!a->have_first || a->done < a->npieces) return;
    struct sfb__buf *b = a->buf;
    a->buf = NULL;
    for (struct asm_rec **pp = &t->active; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    sfb__tp_asm_put(t, a);
    deliver(t, b, b->len, b->src);
}

/* Copies piece `idx` (len bytes at p) into the frame. Returns 0 or -1 when
 * the piece does not fit the frame (the frame is then dropped). */
static int asm_place(struct sfb__transport *t, struct asm_rec *a, uint32_t idx, const uint8_t *p,
                     size_t len)
{
    if (idx >= a->npieces) return -1;
    size_t off = a->first_len + (size_t)idx * a->piece;
    size_t want = SFB_MIN(a->piece, a->total - off);
    if (len != want) return -1;
    memcpy(a->buf->data + off, p, len);
    a->done++;
    return 0;
}

static struct asm_rec *asm_find(struct sfb__transport *t, uint32_t src, uint32_t seq)
{
    for (struct asm_rec *a = t->active; a; a = a->next)
        if (a->src == src && a->seq == seq) return a;
    struct asm_rec *a = sfb__tp_asm_get(t);
    if (!a) return NULL;
    a->src = src;
    a->seq = seq;
    a->next = t->active;
    t->active = a;
    return a;
}

static void first_chunk(struct sfb__transport *t, struct asm_rec *a, struct sfb__buf *b, size_t len,
                        uint64_t total)
{
    const char *why = NULL;
    size_t first = len - THDR_LEN;
    uint64_t npieces = 0;
    if (a->have_first) why = "duplicate first chunk";
    else if (first == 0 || total <= first || total > t->s.max_frame) why = "frame length out of range";
    else if ((npieces = (total - first + first - 1) / first) > UINT32_MAX) why = "too many pieces";
    if (!why && sfb__transport_buf_get(t, total, &a->buf)) why = "out of memory for the frame";
    if (why) {
        sfb__buf_put(b);
        asm_drop(t, a, why);
        return;
    }
    a->have_first = 1;
    a->total = total;
    a->first_len = first;
    a->piece = first; /* every piece carries as much as the first chunk */
    a->npieces = (uint32_t)npieces;
    a->buf->len = total;
    a->buf->off = 0;
    a->buf->src = a->src;
    memcpy(a->buf->data, b->data + THDR_LEN, first);
    sfb__buf_put(b);
    /* Pieces that completed before the first chunk. */
    while (a->stash) {
        struct sfb__buf *s = a->stash;
        a->stash = s->next;
        t->stashed--;
        int bad = asm_place(t, a, s->idx, s->data + THDR_LEN, s->len - THDR_LEN);
        sfb__buf_put(s);
        if (bad) {
            asm_drop(t, a, "piece does not fit the frame");
            return;
        }
    }
    asm_finish_if_done(t, a);
}

/* A message's sender and kind, checked (the peer is not trusted): 1 when
 * they are valid (kinds up to `max_kind`), else the message is dropped and
 * counted. */
static int heard_from(struct sfb__transport *t, struct sfb__buf *b, uint32_t src, uint32_t kind,
                      uint32_t max_kind)
{
    uint32_t world = sfb__tp_world(t);
    if ((world && src >= world) || kind > max_kind) {
        SFB_LOG_W("transport: message with sender %u, kind %u dropped (world of %u)", src, kind,
                  world);
        stat_add(&t->stats.dropped, 1);
        sfb__buf_put(b);
        return 0;
    }
    /* world is published after heard (set_peers): reading it first orders them. */
    if (src < world) t->peers.heard[src] = t->pass_now;
    return 1;
}

void sfb__tp_on_whole(struct sfb__transport *t, struct sfb__buf *b, size_t len, uint64_t data)
{
    uint32_t w0 = (uint32_t)data, src = w0 & 0xffffffu, kind = w0 >> 24;
    if (!heard_from(t, b, src, kind, K_WHOLE)) return;
    b->off = 0;
    deliver(t, b, len, src);
}

/* A message landed in a receive buffer: a whole frame, a first chunk or a
 * piece, told apart by the transport header. Completions may come out of
 * order (eager vs. rendezvous), so chunks are matched by (sender, sequence,
 * index), not by arrival. */
void sfb__tp_on_message(struct sfb__transport *t, struct sfb__buf *b, size_t len)
{
    if (len < THDR_LEN) {
        SFB_LOG_W("transport: %zu-byte message without transport header dropped", len);
        stat_add(&t->stats.dropped, 1);
        sfb__buf_put(b);
        return;
    }
    uint32_t w0 = sfb__get_u32(b->data), seq = sfb__get_u32(b->data + 4);
    uint64_t x = sfb__get_u64(b->data + 8);
    uint32_t src = w0 & 0xffffffu, kind = w0 >> 24;
    if (!heard_from(t, b, src, kind, K_ACK)) return;
    if (kind == K_RMA) {
        on_announce(t, b, len, src, x);
        return;
    }
    if (kind == K_ACK) {
        if (len == THDR_LEN) sfb__tp_on_ack(t, src, seq, x);
        else stat_add(&t->stats.dropped, 1);
        sfb__buf_put(b);
        return;
    }
    if (kind == K_WHOLE) {
        b->off = THDR_LEN;
        deliver(t, b, len - THDR_LEN, src);
        return;
    }
    struct asm_rec *a = asm_find(t, src, seq);
    if (!a) {
        SFB_LOG_W("transport: out of memory for reassembly, message from rank %u dropped", src);
        stat_add(&t->stats.dropped, 1);
        sfb__buf_put(b);
        return;
    }
    if (kind == K_FIRST) {
        first_chunk(t, a, b, len, x);
        return;
    }
    if (x >= UINT32_MAX) {
        sfb__buf_put(b);
        asm_drop(t, a, "piece index out of range");
        return;
    }
    if (a->have_first) {
        int bad = asm_place(t, a, (uint32_t)x, b->data + THDR_LEN, len - THDR_LEN);
        sfb__buf_put(b);
        if (bad) asm_drop(t, a, "piece does not fit the frame");
        else asm_finish_if_done(t, a);
        return;
    }
    /* Early piece: keep its buffer until the first chunk arrives. Bounded,
     * so a misbehaving peer cannot make us hold every buffer. */
    if (t->stashed >= STASH_MAX) {
        sfb__buf_put(b);
        asm_drop(t, a, "too many pieces waiting for their first chunk");
        return;
    }
    b->idx = (uint32_t)x;
    b->len = len;
    b->next = a->stash;
    a->stash = b;
    t->stashed++;
}

int sfb__tp_post_recvs(struct sfb__transport *t)
{
    int work = 0;
    /* Backpressure: while frames overflow the inbox, do not repost. */
    while (t->rx_deficit && !atomic_load(&t->ovf_nonempty)) {
        if (sfb__tp_post_wildcard(t)) break;
        t->rx_deficit--;
        work = 1;
    }
    return work;
}
