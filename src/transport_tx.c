/* Transport send path (see transport_tx.h). */
#include "config.h"
#include "src/transport_tx.h"

#include "src/common.h"
#include "src/loop.h"
#include "src/transport_core.h"

#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

int sfb__transport_send(struct sfb__transport *t, uint32_t dst, const void *hdr, size_t hdr_len,
                        struct sfb__buf *buf, size_t off, size_t len, double timeout_s)
{
    if (hdr_len > SFB__TRANSPORT_HDR_MAX || (hdr_len && !hdr) || (len && !buf) ||
        (buf && (off > buf->cap || len > buf->cap - off)))
        return sfb__error(-EINVAL, "transport send: header %zu bytes or slice [%zu, +%zu) invalid",
                          hdr_len, off, len);
    if (len > t->max_msg)
        return sfb__error(-EMSGSIZE, "transport send: %zu-byte payload above %s's max_msg_size %zu",
                          len, t->prov_name, t->max_msg);
    struct timespec ts;
    if (timeout_s > 0) sfb__tp_deadline(&ts, timeout_s);
    pthread_mutex_lock(&t->mu);
    if (dst >= t->world) {
        pthread_mutex_unlock(&t->mu);
        return sfb__error(-EINVAL, "transport send: rank %u outside world of %u", dst, t->world);
    }
    while (!t->free_sreq && !t->closing) {
        if (timeout_s <= 0) {
            pthread_mutex_unlock(&t->mu);
            return -EAGAIN;
        }
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
    r->outstanding = 0;
    r->step = 0;
    r->started = r->failed = 0;
    r->in_use = 1;
    r->next = NULL;
    pthread_mutex_lock(&t->mu);
    if (t->sub_tail) t->sub_tail->next = r;
    else t->sub_head = r;
    t->sub_tail = r;
    pthread_mutex_unlock(&t->mu);
    sfb__loop_async_send(t->async);
    return 0;
}

int sfb__transport_flush(struct sfb__transport *t, double timeout_s)
{
    struct timespec ts;
    sfb__tp_deadline(&ts, timeout_s);
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

void sfb__tp_tx_take_submitted(struct sfb__transport *t)
{
    pthread_mutex_lock(&t->mu);
    struct sreq *h = t->sub_head;
    struct sreq *tl = t->sub_tail;
    t->sub_head = t->sub_tail = NULL;
    pthread_mutex_unlock(&t->mu);
    if (!h) return;
    if (t->pend_tail) t->pend_tail->next = h;
    else t->pend_head = h;
    t->pend_tail = tl;
}

static void sreq_finish(struct sfb__transport *t, struct sreq *r)
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

/* Posts the next message of r: the whole frame, an announce or a body. */
static ssize_t post_one(struct sfb__transport *t, struct sreq *r, struct op *o)
{
    struct iovec iov[2];
    void *desc[2] = {t->slab_desc, r->buf ? r->buf->desc : NULL};
    uint8_t *payload = r->buf ? r->buf->data + r->off : NULL;
    if (r->step == 1) /* the body of a big frame: one message, no copy */
        return fi_tsend(t->ep, payload, r->len, r->buf->desc, r->dst, body_tag(t->s.rank, r->seq),
                        &o->ctx);
    int whole = THDR_LEN + r->total <= t->chunk;
    sfb__tp_thdr_put(r->prefix, t->s.rank, whole ? K_WHOLE : K_ANNOUNCE, r->seq,
                     whole ? 0 : r->total);
    /* prefix and hdr are adjacent in the sreq: one iovec. */
    iov[0] = (struct iovec){r->prefix, THDR_LEN + r->hdr_len};
    size_t cnt = 1;
    if (whole && r->len) iov[cnt++] = (struct iovec){payload, r->len};
    return fi_tsendv(t->ep, iov, t->mr_local ? desc : NULL, cnt, r->dst, 0, &o->ctx);
}

/* Posts what it can of one send. Returns 0 when everything is posted,
 * -FI_EAGAIN to retry later. Hard errors fail the request. */
static int advance_send(struct sfb__transport *t, struct sreq *r)
{
    if (!r->started) {
        r->seq = t->seq[r->dst]++;
        r->started = 1;
    }
    while (r->step < 2) {
        struct op *o = sfb__tp_op_get(t);
        if (!o) return -FI_EAGAIN;
        o->kind = OP_SEND;
        o->req = r;
        ssize_t rc = post_one(t, r, o);
        if (rc == -FI_EAGAIN) {
            sfb__tp_op_put(t, o);
            stat_add(&t->stats.eagain, 1);
            return -FI_EAGAIN;
        }
        if (rc) {
            sfb__tp_op_put(t, o);
            sfb__tp_report(t, (int)r->dst, (int)rc, "fi_tsend failed", NULL);
            r->failed = 1;
            /* An announce without its body would make the peer wait for a
             * body that never comes; a body already posted completes. */
            r->step = 2;
            break;
        }
        r->outstanding++;
        int whole = THDR_LEN + r->total <= t->chunk;
        r->step = whole ? 2 : r->step + 1;
    }
    return 0;
}

int sfb__tp_tx_post(struct sfb__transport *t)
{
    int work = 0;
    while (t->pend_head) {
        struct sreq *r = t->pend_head;
        /* Order is kept across destinations too: simple, and a frame stuck
         * in -FI_EAGAIN is retried first on the next pass. */
        if (advance_send(t, r)) break;
        work = 1;
        t->pend_head = r->next;
        if (!t->pend_head) t->pend_tail = NULL;
        if (r->outstanding == 0) sreq_finish(t, r);
    }
    return work;
}

void sfb__tp_tx_complete(struct sfb__transport *t, struct op *o, int err)
{
    struct sreq *r = o->req;
    if (err) r->failed = 1;
    if (--r->outstanding == 0 && r->step == 2) sreq_finish(t, r);
}

void sfb__tp_tx_release(struct sfb__transport *t)
{
    if (!t->sreqs) return;
    for (unsigned i = 0; i < t->s.max_sends; i++)
        if (t->sreqs[i].in_use && t->sreqs[i].buf) sfb__buf_put(t->sreqs[i].buf);
}
