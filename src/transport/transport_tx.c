/* libfabric transport: send requests and the posting of their chunks
 * (src/transport/transport_impl.h). */
#include "config.h"
#include "src/transport/transport_impl.h"

#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/base/fifo.h"
#include "src/loop/bell.h"
#include "src/loop/loop.h"

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

/* ---------------- posting ---------------- */

/* Transport header: u32 sender rank | kind << 24, u32 sequence, u64 total
 * length (FIRST) or piece index (PIECE) or 0 (WHOLE); little-endian. */
static void thdr_put(uint8_t *p, uint32_t rank, uint32_t kind, uint32_t seq, uint64_t x)
{
    sfb__put_u32(p, rank | kind << 24);
    sfb__put_u32(p + 4, seq);
    sfb__put_u64(p + 8, x);
}

void sfb__tp_sreq_finish(struct sfb__transport *t, struct sreq *r)
{
    if (!r->failed) {
        stat_add(&t->stats.frames_sent, 1);
        stat_add(&t->stats.bytes_sent, r->total);
    }
    struct sfb__buf *buf = r->buf;
    uint32_t dst = r->dst;
    int failed = r->failed;
    r->buf = NULL;
    pthread_mutex_lock(&t->mu);
    r->in_use = 0;
    r->next = t->free_sreq;
    t->free_sreq = r;
    t->in_use--;
    pthread_cond_signal(&t->cv_space);
    if (t->in_use == 0) pthread_cond_broadcast(&t->cv_flush);
    pthread_mutex_unlock(&t->mu);
    /* After the sreq is free (the callback may send again), before the
     * buffer goes back to its pool (so `buf` identifies this send). */
    if (t->s.on_sent) t->s.on_sent(t->s.user, dst, buf, failed);
    if (buf) sfb__buf_put(buf);
}

/* Posts one send operation `o` of request `r`. -FI_EAGAIN: `o` went back to
 * the pool, retry later; another error: reported as `what` (not when the
 * peer's process is gone: -FI_ENOTCONN), `o` back, the request marked
 * failed. */
static ssize_t post_sendv(struct sfb__transport *t, struct sreq *r, struct op *o,
                          const struct iovec *iov, void **desc, size_t cnt, const uint64_t *data,
                          const char *what)
{
    o->kind = OP_SEND;
    o->req = r;
    fi_addr_t fa;
    if (sfb__tp_peer_gone(t, r->dst) || (fa = sfb__tp_addr(t, r->dst)) == FI_ADDR_NOTAVAIL) {
        /* dropped: the request fails (a failed insert was reported) */
        sfb__tp_op_put(t, o);
        r->failed = 1;
        return -FI_ENOTCONN;
    }
    if (sfb__tp_contact_closed(t, r->dst)) {
        sfb__tp_op_put(t, o);
        return -FI_EAGAIN;
    }
    ssize_t rc;
    if (data) {
        struct fi_msg_tagged m = {.msg_iov = iov, .desc = t->mr_local ? desc : NULL,
                                  .iov_count = cnt, .addr = fa, .context = &o->ctx, .data = *data};
        rc = FAB(t, fi_tsendmsg(t->ep, &m, FI_REMOTE_CQ_DATA));
    } else {
        rc = FAB(t, fi_tsendv(t->ep, iov, t->mr_local ? desc : NULL, cnt, fa, 0, &o->ctx));
    }
    /* posted, or the peer's queue is full: either way it has work */
    sfb__tp_contact(t, r->dst, rc);
    if (rc == 0 || rc == -FI_EAGAIN) sfb__tp_ring(t, r->dst, rc == -FI_EAGAIN);
    if (rc == -FI_EAGAIN) {
        sfb__tp_op_put(t, o);
        stat_add(&t->stats.eagain, 1);
    } else if (rc) {
        sfb__tp_op_put(t, o);
        sfb__tp_report(t, (int)r->dst, (int)rc, what, NULL);
        r->failed = 1;
    }
    return rc;
}

/* A frame too big for one message, from a buffer registered for remote
 * reads: one announce (transport header K_RMA with the total length, then
 * address, key, header length, cookie, then the frame header); the receiver
 * reads the body and answers K_ACK. The ACK counts as one outstanding
 * completion of the request, so the buffer is held until it comes.
 * Returns 1 when the frame is not eligible (chunked path), 0 / -FI_EAGAIN. */
static int advance_rma(struct sfb__transport *t, struct sreq *r)
{
    if (!r->rma) {
        if (!t->rma || !r->len || r->total <= t->chunk - THDR_LEN ||
            r->len > t->info->ep_attr->max_msg_size || sfb__tp_buf_rma(t, r->buf))
            return 1;
        r->rma = 1;
    }
    struct op *o = sfb__tp_op_get(t);
    if (!o) return -FI_EAGAIN;
    if (!r->started) {
        r->seq = t->peers.seq[r->dst]++;
        r->started = 1;
    }
    uint8_t *p = r->buf->data + r->off;
    uint64_t addr = t->mr_virt_addr ? (uint64_t)(uintptr_t)p : (uint64_t)(p - r->buf->data);
    thdr_put(o->thdr, t->s.rank, K_RMA, r->seq, r->total);
    sfb__put_u64(o->thdr + THDR_LEN, addr);
    sfb__put_u64(o->thdr + THDR_LEN + 8, fi_mr_key(r->buf->mr));
    sfb__put_u32(o->thdr + THDR_LEN + 16, (uint32_t)r->hdr_len);
    sfb__put_u32(o->thdr + THDR_LEN + 20, (uint32_t)(r - t->sreqs));
    struct iovec iov[2] = {{o->thdr, THDR_LEN + ANN_LEN}, {r->hdr, r->hdr_len}};
    void *desc[2] = {o->desc, t->slab_desc};
    ssize_t rc = post_sendv(t, r, o, iov, desc, r->hdr_len ? 2 : 1, NULL,
                            "fi_tsendv (RMA announce) failed");
    if (rc == -FI_EAGAIN) return -FI_EAGAIN;
    if (!rc) {
        r->outstanding += 2; /* the announce and the ACK */
        r->awaiting_ack = 1;
        t->acks_due++;
        r->announced = sfb__now();
    }
    r->all_posted = 1;
    return 0;
}

/* An ACK: x = cookie | status << 32. Checked against the request it names,
 * since the peer is not trusted. */
void sfb__tp_on_ack(struct sfb__transport *t, uint32_t src, uint32_t seq, uint64_t x)
{
    uint32_t cookie = (uint32_t)x;
    struct sreq *r = cookie < t->s.max_sends ? &t->sreqs[cookie] : NULL;
    /* awaiting_ack is the loop's own: 0 in every free request, so the
     * other fields are only read on a request in flight. */
    if (!r || !r->awaiting_ack || r->dst != src || r->seq != seq) {
        SFB_LOG_W("transport: stray ACK (rank %u, frame %u, cookie %u) dropped", src, seq, cookie);
        stat_add(&t->stats.dropped, 1);
        return;
    }
    if (x >> 32) {
        r->failed = 1;
        sfb__tp_report(t, (int)src, -FI_EIO, "RMA frame refused by the receiver", NULL);
    }
    r->awaiting_ack = 0;
    t->acks_due--;
    if (--r->outstanding == 0) sfb__tp_sreq_finish(t, r);
}

/* A receiver that has said nothing at all for ack_timeout_s since the
 * announce (dead, or wedged) fails the send instead of holding it forever;
 * one that is merely slow to read keeps it. Scans at most every 100 ms.
 * Checks seconds apart (the process stopped and continued) count from the
 * late one: nothing was read meanwhile. */
void sfb__tp_check_acks(struct sfb__transport *t, double now)
{
    if (!t->rma) return;
    if (sfb__gap(&t->ack_look, now, SFB_MAX(2.0, t->s.ack_timeout_s / 4)) > 0) t->ack_excused = now;
    if (now < t->next_ack_check) return;
    t->next_ack_check = now + 0.1;
    for (unsigned i = 0; i < t->s.max_sends; i++) {
        struct sreq *r = &t->sreqs[i];
        if (!r->awaiting_ack) continue; /* (then peers are set: heard exists) */
        double quiet =
            now - SFB_MAX(SFB_MAX(r->announced, t->peers.heard[r->dst]), t->ack_excused);
        if (quiet < t->s.ack_timeout_s) continue;
        char d[96];
        snprintf(d, sizeof d, "no ACK for RMA frame %u, nothing from the peer for %.1f s", r->seq,
                 quiet);
        sfb__tp_report(t, (int)r->dst, -FI_ETIMEDOUT, "RMA frame not acknowledged", d);
        r->failed = 1;
        r->awaiting_ack = 0;
        t->acks_due--;
        if (--r->outstanding == 0) sfb__tp_sreq_finish(t, r);
    }
}

/* Posts what it can of one send. Returns 0 when everything is posted,
 * -FI_EAGAIN to retry later. Hard errors fail the request. */
static int advance_send(struct sfb__transport *t, struct sreq *r)
{
    size_t room = t->chunk - THDR_LEN;
    if (!r->posted) {
        int rc = advance_rma(t, r);
        if (rc <= 0) return rc;
    }
    while (!r->all_posted) {
        struct iovec iov[2];
        void *desc[2];
        size_t cnt, nbytes;
        uint64_t data, *with = NULL;
        if (!r->started) {
            r->seq = t->peers.seq[r->dst]++;
            r->started = 1;
        }
        struct op *o = sfb__tp_op_get(t);
        if (!o) return -FI_EAGAIN;
        if (r->posted == 0) {
            /* Transport header, frame header and the start of the payload:
             * prefix and hdr are adjacent in the sreq, so 2 iovecs. */
            nbytes = SFB_MIN(r->total, room);
            int whole = nbytes == r->total;
            thdr_put(r->prefix, t->s.rank, whole ? K_WHOLE : K_FIRST, r->seq,
                     whole ? 0 : r->total);
            size_t h = SFB_MIN(r->hdr_len, nbytes);
            /* A WHOLE message's header (its first 8 bytes: the last 8 are
             * 0) as remote CQ data, where the provider carries 8 bytes:
             * 16 bytes less on the wire, and a 4 KiB frame stays within
             * shm's 4 KiB inject buffer (docs/wire.md). */
            with = whole && t->cq_data && r->total ? &data : NULL;
            if (with) data = sfb__get_u64(r->prefix);
            size_t skip = with ? THDR_LEN : 0;
            iov[0] = (struct iovec){r->prefix + skip, THDR_LEN - skip + h};
            desc[0] = t->slab_desc;
            cnt = iov[0].iov_len ? 1 : 0;
            if (nbytes > h) {
                iov[cnt] = (struct iovec){r->buf->data + r->off, nbytes - h};
                desc[cnt] = r->buf->desc;
                cnt++;
            }
        } else {
            /* The frame header always fits in the first chunk (room ≥ 4080),
             * so a piece is one slice of the payload. */
            nbytes = SFB_MIN(room, r->total - r->posted);
            thdr_put(o->thdr, t->s.rank, K_PIECE, r->seq, r->idx);
            iov[0] = (struct iovec){o->thdr, THDR_LEN};
            desc[0] = o->desc;
            iov[1] = (struct iovec){r->buf->data + r->off + (r->posted - r->hdr_len), nbytes};
            desc[1] = r->buf->desc;
            cnt = 2;
        }
        ssize_t rc = post_sendv(t, r, o, iov, desc, cnt, with, "fi_tsendv failed");
        if (rc == -FI_EAGAIN) return -FI_EAGAIN;
        if (rc) {
            r->all_posted = 1;
            break;
        }
        r->outstanding++;
        if (r->posted > 0) r->idx++;
        r->posted += nbytes;
        if (r->posted >= r->total) r->all_posted = 1;
    }
    return 0;
}

/* Async: move submitted sends into the loop's pending list. */
void sfb__tp_on_async(void *arg)
{
    struct sfb__transport *t = arg;
    if (!atomic_exchange_explicit(&t->sub_pending, 0, memory_order_acq_rel)) return;
    pthread_mutex_lock(&t->mu);
    struct sreq *h = t->sub_head;
    struct sreq *tl = t->sub_tail;
    t->sub_head = t->sub_tail = NULL;
    pthread_mutex_unlock(&t->mu);
    SFB_FIFO_SPLICE(t->pend_head, t->pend_tail, h, tl, next);
}

int sfb__tp_post_sends(struct sfb__transport *t)
{
    int work = 0;
    sfb__tp_on_async(t); /* sends submitted since (no lock unless there are some) */
    while (t->pend_head) {
        struct sreq *r = t->pend_head;
        /* Order is kept across destinations too: simple, and a frame stuck
         * in -FI_EAGAIN is retried first on the next pass. */
        if (advance_send(t, r)) break;
        work = 1;
        SFB_FIFO_DROP_HEAD(t->pend_head, t->pend_tail, next);
        if (r->outstanding == 0) sfb__tp_sreq_finish(t, r);
    }
    return work;
}

/* Posts the submitted sends as a pass would: a send made meanwhile (a
 * callback of a send that failed at once) only queues, and is posted by the
 * next round. Returns 1 when sends are left (the queue is full). */
int sfb__tp_post_all(struct sfb__transport *t)
{
    t->in_pass = 1;
    for (int round = 0; round < 4; round++) {
        sfb__tp_post_sends(t);
        if (t->pend_head || !atomic_load_explicit(&t->sub_pending, memory_order_acquire)) break;
    }
    t->in_pass = 0;
    return t->pend_head || atomic_load_explicit(&t->sub_pending, memory_order_acquire);
}

int sfb__tp_post_now(struct sfb__transport *t)
{
    unsigned before = t->ops_out;
    int left = sfb__tp_post_all(t);
    if (t->bell) sfb__bell_flush(t->bell);
    return left || (t->slept && t->ops_out != before);
}

int sfb__transport_send(struct sfb__transport *t, uint32_t dst, const void *hdr, size_t hdr_len,
                        struct sfb__buf *buf, size_t off, size_t len, double timeout_s)
{
    if (hdr_len > SFB__TRANSPORT_HDR_MAX || (hdr_len && !hdr) || (len && !buf) ||
        (buf && (off > buf->cap || len > buf->cap - off)))
        return sfb__error(-EINVAL, "transport send: header %zu bytes or slice [%zu, +%zu) invalid",
                          hdr_len, off, len);
    struct timespec ts;
    int timed = 0;
    pthread_mutex_lock(&t->mu);
    if (dst >= t->peers.world) {
        pthread_mutex_unlock(&t->mu);
        return sfb__error(-EINVAL, "transport send: rank %u outside world of %u", dst,
                          t->peers.world);
    }
    while (!t->free_sreq && !t->closing) {
        if (timeout_s <= 0) {
            pthread_mutex_unlock(&t->mu);
            return -EAGAIN;
        }
        if (!timed++) sfb__deadline(&ts, timeout_s);
        if (pthread_cond_timedwait(&t->cv_space, &t->mu, &ts) == ETIMEDOUT && !t->free_sreq) {
            pthread_mutex_unlock(&t->mu);
            return -ETIMEDOUT;
        }
    }
    if (t->closing) {
        pthread_mutex_unlock(&t->mu);
        return -ESHUTDOWN;
    }
    struct sreq *r = t->free_sreq;
    t->free_sreq = r->next;
    t->in_use++;
    pthread_mutex_unlock(&t->mu);
    /* Prefix and header live in the (registered) sreq slab. */
    memset(r->prefix, 0, sizeof r->prefix);
    if (hdr_len) memcpy(r->hdr, hdr, hdr_len);
    r->hdr_len = hdr_len;
    r->buf = len ? buf : NULL;
    if (r->buf) sfb__buf_ref(buf);
    r->off = off;
    r->len = len;
    r->total = hdr_len + len;
    r->dst = dst;
    r->posted = 0;
    r->idx = 0;
    r->outstanding = 0;
    r->started = r->all_posted = r->failed = 0;
    r->rma = 0; /* awaiting_ack is 0 in a free request (loop-owned) */
    r->in_use = 1;
    pthread_mutex_lock(&t->mu);
    SFB_FIFO_PUSH(t->sub_head, t->sub_tail, r, next);
    atomic_store_explicit(&t->sub_pending, 1, memory_order_release);
    pthread_mutex_unlock(&t->mu);
    /* Posted now by whoever is in the loop, or can enter it (transport.c,
     * "Who drives progress"); a pass posts what is sent in it. Else, or
     * when sends are left for later, the loop thread is woken for them. */
    int wake = 1;
    if (sfb__loop_in_thread(t->loop)) {
        wake = !t->in_pass && sfb__tp_post_now(t);
    } else if (sfb__loop_try_enter(t->loop)) {
        wake = sfb__tp_post_now(t);
        sfb__loop_leave(t->loop);
    }
    if (wake) sfb__loop_async_send(t->async);
    return 0;
}

int sfb__transport_flush(struct sfb__transport *t, double timeout_s)
{
    struct timespec ts;
    sfb__deadline(&ts, timeout_s);
    pthread_mutex_lock(&t->mu);
    while (t->in_use) {
        if (pthread_cond_timedwait(&t->cv_flush, &t->mu, &ts) == ETIMEDOUT && t->in_use) {
            pthread_mutex_unlock(&t->mu);
            return sfb__error(-ETIMEDOUT, "transport: %u sends still pending", t->in_use);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return 0;
}
