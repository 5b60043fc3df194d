/* Transport receive path (see transport_rx.h). */
#include "config.h"
#include "src/transport_rx.h"

#include "src/common.h"
#include "src/loop.h"
#include "src/transport_core.h"

#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <string.h>
#include <time.h>

/* Big frames whose body receive is posted at once. Beyond this, announces
 * wait (their wildcard buffer is not reposted meanwhile), so a peer cannot
 * make this rank allocate an unbounded number of frame buffers. */
#define MAX_BODIES 256

static void deliver(struct sfb__transport *t, struct sfb__buf *b, size_t len, uint32_t src)
{
    b->len = len;
    b->src = src;
    stat_add(&t->stats.frames_recv, 1);
    stat_add(&t->stats.bytes_recv, len);
    if (t->s.on_frame) {
        struct sfb__frame f = {b, b->data + b->off, len, src};
        if (t->s.on_frame(t->s.user, &f)) return;
    }
    pthread_mutex_lock(&t->mu);
    if (!t->ovf_head && t->in_count < t->s.inbox_cap) {
        struct sfb__frame *f = &t->inbox[(t->in_head + t->in_count) % t->s.inbox_cap];
        *f = (struct sfb__frame){b, b->data + b->off, len, src};
        t->in_count++;
        pthread_cond_signal(&t->cv_inbox);
    } else {
        /* Inbox full: park the frame and stop reposting receives, so the
         * provider pushes back on the senders. */
        b->next = NULL;
        if (t->ovf_tail) t->ovf_tail->next = b;
        else t->ovf_head = b;
        t->ovf_tail = b;
        atomic_store(&t->ovf_nonempty, 1);
    }
    pthread_mutex_unlock(&t->mu);
}

static void drop(struct sfb__transport *t, struct sfb__buf *b, const char *fmt, uint32_t src,
                 uint64_t x)
{
    SFB_LOG_W(fmt, src, (unsigned long long)x);
    stat_add(&t->stats.dropped, 1);
    sfb__buf_put(b);
}

int sfb__tp_rx_post_wildcard(struct sfb__transport *t)
{
    struct sfb__buf *b;
    if (sfb__pool_get(&t->pool, t->chunk, &b)) return -ENOMEM;
    struct op *o = sfb__tp_op_get(t);
    if (!o) {
        sfb__buf_put(b);
        return -ENOMEM;
    }
    o->kind = OP_RECV;
    o->rbuf = b;
    ssize_t rc = fi_trecv(t->ep, b->data, t->chunk, b->desc, FI_ADDR_UNSPEC, 0, TAG_WILD_IGNORE,
                          &o->ctx);
    if (rc) {
        sfb__tp_op_put(t, o);
        sfb__buf_put(b);
        if (rc != -FI_EAGAIN) sfb__tp_report(t, -1, (int)rc, "fi_trecv failed", NULL);
        return (int)rc;
    }
    return 0;
}

/* Posts the body receive of the announce in `a` (a wildcard buffer holding
 * transport header ++ frame header, a->len bytes, already validated).
 * Returns 0 (posted, or the frame dropped) or -FI_EAGAIN (retry later; `a`
 * is kept by the caller). */
static int start_body(struct sfb__transport *t, struct sfb__buf *a)
{
    uint32_t src, kind, seq;
    uint64_t total;
    sfb__tp_thdr_get(a->data, &src, &kind, &seq, &total);
    size_t h = a->len - THDR_LEN;
    if (t->bodies >= MAX_BODIES) return -FI_EAGAIN;
    struct op *o = sfb__tp_op_get(t);
    if (!o) return -FI_EAGAIN;
    struct sfb__buf *f;
    if (sfb__pool_get(&t->pool, total, &f)) {
        sfb__tp_op_put(t, o);
        drop(t, a, "transport: rank %u: no memory for a %llu-byte frame, dropped", src, total);
        return 0;
    }
    memcpy(f->data, a->data + THDR_LEN, h);
    f->off = 0;
    f->src = src;
    f->len = total;
    o->kind = OP_BODY;
    o->rbuf = f;
    o->want = total - h;
    ssize_t rc = fi_trecv(t->ep, f->data + h, total - h, f->desc, FI_ADDR_UNSPEC,
                          body_tag(src, seq), 0, &o->ctx);
    if (rc) {
        sfb__tp_op_put(t, o);
        sfb__buf_put(f);
        if (rc == -FI_EAGAIN) return -FI_EAGAIN;
        sfb__tp_report(t, (int)src, (int)rc, "fi_trecv of a frame body failed", NULL);
        stat_add(&t->stats.dropped, 1);
    }
    else t->bodies++;
    sfb__buf_put(a);
    return 0;
}

static void announce(struct sfb__transport *t, struct sfb__buf *b, size_t len, uint32_t src,
                     uint64_t total)
{
    size_t h = len - THDR_LEN;
    /* A frame this small would have come whole; the header must precede a
     * non-empty body. */
    if (h > SFB__TRANSPORT_HDR_MAX || total <= t->chunk - THDR_LEN || total > t->s.max_frame ||
        total - h > t->max_msg) {
        drop(t, b, "transport: rank %u announced a frame of %llu bytes, dropped", src, total);
        return;
    }
    b->len = len;
    b->next = NULL;
    /* Keep announces in arrival order: a waiting one goes first. */
    if (t->ann_head || start_body(t, b)) {
        if (t->ann_tail) t->ann_tail->next = b;
        else t->ann_head = b;
        t->ann_tail = b;
    }
}

/* A message landed in a wildcard receive buffer: a whole frame or an
 * announce, told apart by the transport header. */
static void on_message(struct sfb__transport *t, struct sfb__buf *b, size_t len)
{
    if (len < THDR_LEN) {
        SFB_LOG_W("transport: %zu-byte message without transport header dropped", len);
        stat_add(&t->stats.dropped, 1);
        sfb__buf_put(b);
        return;
    }
    uint32_t src, kind, seq;
    uint64_t x;
    sfb__tp_thdr_get(b->data, &src, &kind, &seq, &x);
    uint32_t world = atomic_load(&t->world);
    if ((world && src >= world) || kind > K_ANNOUNCE) {
        drop(t, b, "transport: message from rank %u of kind %llu dropped", src, kind);
        return;
    }
    if (kind == K_WHOLE) {
        b->off = THDR_LEN;
        deliver(t, b, len - THDR_LEN, src);
        return;
    }
    announce(t, b, len, src, x);
}

static void on_body(struct sfb__transport *t, struct op *o, size_t len, int err)
{
    struct sfb__buf *f = o->rbuf;
    t->bodies--;
    if (err) {
        /* The completion error was reported by the CQ reader. */
        stat_add(&t->stats.dropped, 1);
        sfb__buf_put(f);
        return;
    }
    if (len != o->want) {
        drop(t, f, "transport: rank %u: frame body of %llu bytes, not the announced length",
             f->src, len);
        return;
    }
    deliver(t, f, f->len, f->src);
}

void sfb__tp_rx_complete(struct sfb__transport *t, struct op *o, size_t len, int err)
{
    if (o->kind == OP_BODY) {
        on_body(t, o, len, err);
        return;
    }
    t->rx_deficit++;
    if (err) sfb__buf_put(o->rbuf);
    else on_message(t, o->rbuf, len);
}

int sfb__tp_rx_post(struct sfb__transport *t)
{
    int work = 0;
    while (t->ann_head) {
        struct sfb__buf *a = t->ann_head;
        struct sfb__buf *next = a->next;
        if (start_body(t, a)) break;
        t->ann_head = next;
        if (!t->ann_head) t->ann_tail = NULL;
        work = 1;
    }
    /* Backpressure: while frames overflow the inbox, or announces wait, do
     * not repost wildcards. */
    while (t->rx_deficit && !atomic_load(&t->ovf_nonempty) && !t->ann_head) {
        if (sfb__tp_rx_post_wildcard(t)) break;
        t->rx_deficit--;
        work = 1;
    }
    return work;
}

int sfb__transport_recv(struct sfb__transport *t, struct sfb__frame *out, double timeout_s)
{
    struct timespec ts;
    if (timeout_s > 0) sfb__tp_deadline(&ts, timeout_s);
    pthread_mutex_lock(&t->mu);
    while (t->in_count == 0) {
        if (timeout_s <= 0) {
            pthread_mutex_unlock(&t->mu);
            return -EAGAIN;
        }
        if (pthread_cond_timedwait(&t->cv_inbox, &t->mu, &ts) == ETIMEDOUT && t->in_count == 0) {
            pthread_mutex_unlock(&t->mu);
            return -ETIMEDOUT;
        }
    }
    *out = t->inbox[t->in_head];
    t->in_head = (t->in_head + 1) % t->s.inbox_cap;
    t->in_count--;
    int wake = 0;
    if (t->ovf_head) {
        struct sfb__buf *b = t->ovf_head;
        t->ovf_head = b->next;
        if (!t->ovf_head) {
            t->ovf_tail = NULL;
            atomic_store(&t->ovf_nonempty, 0);
            wake = 1; /* the loop may repost receives again */
        }
        t->inbox[(t->in_head + t->in_count) % t->s.inbox_cap] =
            (struct sfb__frame){b, b->data + b->off, b->len, b->src};
        t->in_count++;
    }
    pthread_mutex_unlock(&t->mu);
    if (wake) sfb__loop_async_send(t->async);
    return 0;
}

void sfb__tp_rx_release(struct sfb__transport *t)
{
    while (t->ann_head) {
        struct sfb__buf *b = t->ann_head;
        t->ann_head = b->next;
        sfb__buf_put(b);
    }
    while (t->ovf_head) {
        struct sfb__buf *b = t->ovf_head;
        t->ovf_head = b->next;
        sfb__buf_put(b);
    }
    for (unsigned i = 0; i < t->in_count; i++)
        sfb__buf_put(t->inbox[(t->in_head + i) % t->s.inbox_cap].buf);
}
