/* The in-process loopback comm: see src/comm/comm_loopback.h. */
#include "config.h"
#include "src/comm/comm_loopback.h"
#include "src/comm/comm_impl.h"
#include "src/base/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LB_READY, LB_RECV, LB_BARRIER, LB_DONE };

/* Quiescent rounds (every rank waits, nothing in flight) without a frame
 * sent in between, after which the job counts as deadlocked. */
#define LB_IDLE_MAX 200

/* A frame in flight or in an inbox: its own copy of the bytes. */
struct lb_msg {
    struct lb_msg *next;
    uint32_t src, dst;
    struct sfb__buf *frame; /* the copy, data[0..len) */
    size_t len;
    struct sfb__buf *orig; /* the sender's buffer, referenced until completion */
};

struct lb_queue {
    struct lb_msg *head, *tail;
};

struct lb_rank {
    struct sfb__loopback *lb;
    struct sfb__comm *c;
    uint32_t rank;
    int state;
    uint64_t barrier_gen; /* the barrier generation it waits to see end */
    struct lb_queue inbox;
    pthread_t th;
    pthread_cond_t cv;
    int ret;
    char why[512]; /* its thread's sfb_last_error() when ret != 0 */
    struct sfb__loopback_stats st;
};

struct sfb__loopback {
    uint32_t world;
    pthread_mutex_t mu; /* held by the rank whose turn it is */
    pthread_cond_t main_cv;
    int64_t turn; /* rank holding the turn, -1: none */
    struct lb_rank *r;
    struct lb_queue net; /* in flight, in send order */
    uint32_t barrier_in, done;
    uint64_t barrier_gen;
    uint64_t sent, sent_at_idle, idle;
    int (*fn)(struct sfb__comm *c, uint32_t r, void *arg);
    void *arg;
    void (*tap)(void *user, uint32_t src, uint32_t dst, uint8_t *frame, size_t len);
    void *tap_user;
};

static void push(struct lb_queue *q, struct lb_msg *m)
{
    m->next = NULL;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
}

static struct lb_msg *pop(struct lb_queue *q)
{
    struct lb_msg *m = q->head;
    if (m && !(q->head = m->next)) q->tail = NULL;
    return m;
}

static void drop(struct lb_queue *q)
{
    struct lb_msg *m;
    while ((m = pop(q))) {
        sfb__buf_put(m->frame);
        sfb__buf_put(m->orig);
        free(m);
    }
}

/* One allocation, data 64-byte aligned like the transport's buffers; no
 * transport, so sfb__buf_put frees it. */
static int lb_buf_get(struct sfb__comm *c, size_t size, struct sfb__buf **out)
{
    (void)c;
    return sfb__comm_buf_plain(size, out);
}

/* Every rank's comm fails with the same reason (as a peer's ABORT would). */
static void fail_all(struct sfb__loopback *lb, const char *fmt, ...) SFB_PRINTF(2, 3);
static void fail_all(struct sfb__loopback *lb, const char *fmt, ...)
{
    char why[sizeof lb->r[0].c->fail.reason];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    for (uint32_t k = 0; k < lb->world; k++) {
        struct sfb__comm *c = lb->r[k].c;
        if (atomic_exchange(&c->fail.failing, 1)) continue;
        snprintf(c->fail.reason, sizeof c->fail.reason, "%s", why);
        c->fail.failed_rank = -1;
        atomic_store(&c->fail.failed, 1);
    }
}

/* Delivers everything in flight, in send order, with what the deliveries
 * send in turn. */
static void pump(struct sfb__loopback *lb)
{
    struct lb_msg *m;
    while ((m = pop(&lb->net))) {
        struct lb_rank *d = &lb->r[m->dst];
        struct sfb__comm *from = lb->r[m->src].c;
        struct sfb__buf *orig = m->orig;
        uint32_t src = m->src, dst = m->dst;
        if (lb->tap) lb->tap(lb->tap_user, src, dst, m->frame->data, m->len);
        d->st.recv_msgs++;
        d->st.recv_bytes += m->len;
        struct sfb__frame f = {m->frame, m->frame->data, m->len, src, 1};
        m->orig = NULL; /* the sender's reference is dropped below, not again by drop() */
        if (sfb__comm_deliver(d->c, &f))
            free(m); /* taken with its reference */
        else
            push(&d->inbox, m);
        sfb__comm_pass_hook(d->c);
        if (from->s.on_sent) from->s.on_sent(from->s.user, dst, orig, 0);
        sfb__buf_put(orig);
    }
}

static int runnable(const struct sfb__loopback *lb, const struct lb_rank *r)
{
    return r->state == LB_READY || (r->state == LB_RECV && r->inbox.head) ||
           (r->state == LB_BARRIER && r->barrier_gen != lb->barrier_gen);
}

/* Passes the turn on from rank `from` (which waits, yields or is done). */
static void hand_on(struct sfb__loopback *lb, uint32_t from)
{
    pump(lb);
    for (;;) {
        for (uint32_t i = 1; i <= lb->world; i++) {
            struct lb_rank *r = &lb->r[(from + i) % lb->world];
            if (runnable(lb, r)) {
                lb->turn = r->rank;
                pthread_cond_signal(&r->cv);
                return;
            }
        }
        if (lb->done == lb->world) {
            lb->turn = -1;
            pthread_cond_signal(&lb->main_cv);
            return;
        }
        /* Quiescent: nothing in flight, nobody can go on. */
        int recv = 0;
        for (uint32_t k = 0; k < lb->world; k++)
            recv |= lb->r[k].state == LB_RECV;
        if (lb->sent != lb->sent_at_idle) {
            lb->sent_at_idle = lb->sent;
            lb->idle = 0;
        }
        if (!recv)
            fail_all(lb,
                     "loopback: ranks wait in a barrier that %u finished rank(s) will never "
                     "enter",
                     lb->done);
        else if (++lb->idle > LB_IDLE_MAX)
            fail_all(lb,
                     "loopback: every rank waits for frames and none is in flight "
                     "(deadlock after %d idle rounds)",
                     LB_IDLE_MAX);
        /* the waits time out (or, failed, end) */
        for (uint32_t k = 0; k < lb->world; k++)
            if (lb->r[k].state == LB_RECV || (!recv && lb->r[k].state == LB_BARRIER))
                lb->r[k].state = LB_READY;
    }
}

static void wait_turn(struct sfb__loopback *lb, struct lb_rank *r)
{
    while (lb->turn != (int64_t)r->rank)
        pthread_cond_wait(&r->cv, &lb->mu);
}

/* The running rank gives up the turn in `state` until it is its turn again. */
static void block(struct lb_rank *r, int state)
{
    r->state = state;
    hand_on(r->lb, r->rank);
    wait_turn(r->lb, r);
    r->state = LB_READY;
}

static int lb_send(struct sfb__comm *c, uint32_t dst, const void *hdr, size_t hdr_len,
                   struct sfb__buf *buf, size_t off, size_t len, double timeout_s)
{
    (void)timeout_s; /* the loopback's queue has no bound */
    struct lb_rank *me = c->impl;
    struct sfb__loopback *lb = me->lb;
    if (dst >= lb->world || dst == me->rank)
        return sfb__error(-EINVAL, "loopback: rank %u sends to rank %u of %u", me->rank, dst,
                          lb->world);
    if (len && (!buf || off > buf->cap || len > buf->cap - off))
        return sfb__error(-EINVAL, "loopback: slice %zu+%zu outside its buffer", off, len);
    struct lb_msg *m = calloc(1, sizeof *m);
    if (!m) return -ENOMEM;
    int ret = lb_buf_get(c, hdr_len + len, &m->frame);
    if (ret) {
        free(m);
        return ret;
    }
    if (hdr_len) memcpy(m->frame->data, hdr, hdr_len);
    if (len) memcpy(m->frame->data + hdr_len, buf->data + off, len);
    m->src = me->rank;
    m->dst = dst;
    m->len = hdr_len + len;
    m->orig = buf;
    if (buf) sfb__buf_ref(buf);
    push(&lb->net, m);
    lb->sent++;
    me->st.sent_msgs++;
    me->st.sent_bytes += m->len;
    return 0;
}

/* The turn passes rank by rank: a wait ends at the first frame (units is
 * only a hint). */
static int lb_recv(struct sfb__comm *c, struct sfb__frame *out, double timeout_s, uint32_t units)
{
    (void)units;
    struct lb_rank *me = c->impl;
    if (!me->inbox.head && timeout_s > 0) block(me, LB_RECV);
    struct lb_msg *m = pop(&me->inbox);
    if (!m) return timeout_s > 0 ? -ETIMEDOUT : -EAGAIN;
    *out = (struct sfb__frame){m->frame, m->frame->data, m->len, m->src, 1};
    free(m);
    return 0;
}

static int lb_call(struct sfb__comm *c, void (*fn)(void *), void *arg)
{
    (void)c; /* the hooks run under the same lock as this rank */
    fn(arg);
    return 0;
}

static int lb_post(struct sfb__comm *c, void (*fn)(void *), void (*dropped)(void *), void *arg)
{
    (void)dropped; /* runs at once */
    return lb_call(c, fn, arg);
}

static int lb_barrier(struct sfb__comm *c)
{
    struct lb_rank *me = c->impl;
    struct sfb__loopback *lb = me->lb;
    uint64_t gen = lb->barrier_gen;
    if (++lb->barrier_in == lb->world) {
        lb->barrier_in = 0;
        lb->barrier_gen++;
        return 0;
    }
    me->barrier_gen = gen;
    block(me, LB_BARRIER);
    if (lb->barrier_gen != gen) return 0;
    lb->barrier_in--;
    int ret = sfb__comm_check(c);
    return ret ? ret : sfb__error(-SFB_EPEER, "loopback: barrier broken");
}

static const struct sfb__comm_ops loop_ops = {
    .buf_get = lb_buf_get,
    .send = lb_send,
    .recv = lb_recv,
    .call = lb_call,
    .post = lb_post,
    .barrier = lb_barrier,
};

/* A comm as sfb__comm_open leaves it for world > 1, minus the fabric. */
static int open_comm(struct lb_rank *r, uint32_t world, const struct sfb__comm_settings *s)
{
    struct sfb__comm *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    r->c = c;
    c->s = *s;
    c->rank = r->rank;
    c->world = world;
    c->job_key = 0x5fb100bac4ull;
    c->job = (struct sfb__wire_job){.job_key = c->job_key,
                                   .world_size = world,
                                   .max_s = s->max_s,
                                   .max_payload = (uint64_t)1 << 32,
                                   .stats = &c->wstats};
    c->ops = &loop_ops;
    c->impl = r;
    int ret = sfb__comm_copy_shapes(c, s->shapes, s->nshapes);
    return ret ? ret : sfb__comm_peers_alloc(c);
}

int sfb__loopback_open(struct sfb__loopback **out, uint32_t world,
                       const struct sfb__comm_settings *s)
{
    *out = NULL;
    struct sfb__comm_settings def;
    if (!s) {
        sfb__comm_default_settings(&def);
        s = &def;
    }
    if (world < 2 || world > 4096)
        return sfb__error(-EINVAL, "loopback: %u ranks (2..4096)", world);
    struct sfb__loopback *lb = calloc(1, sizeof *lb);
    if (!lb) return -ENOMEM;
    lb->world = world;
    lb->turn = -1;
    pthread_mutex_init(&lb->mu, NULL);
    pthread_cond_init(&lb->main_cv, NULL);
    int ret = -ENOMEM;
    if (!(lb->r = calloc(world, sizeof *lb->r))) goto fail;
    for (uint32_t k = 0; k < world; k++) {
        lb->r[k] = (struct lb_rank){.lb = lb, .rank = k};
        pthread_cond_init(&lb->r[k].cv, NULL);
    }
    for (uint32_t k = 0; k < world; k++) {
        if ((ret = open_comm(&lb->r[k], world, s))) goto fail;
    }
    *out = lb;
    return 0;
fail:
    sfb__loopback_close(&lb);
    return ret;
}

struct sfb__comm *sfb__loopback_comm(struct sfb__loopback *lb, uint32_t r)
{
    return r < lb->world ? lb->r[r].c : NULL;
}

static void *rank_main(void *arg)
{
    struct lb_rank *r = arg;
    struct sfb__loopback *lb = r->lb;
    pthread_mutex_lock(&lb->mu);
    wait_turn(lb, r);
    r->ret = lb->fn(r->c, r->rank, lb->arg);
    if (r->ret) snprintf(r->why, sizeof r->why, "%s", sfb_last_error());
    r->state = LB_DONE;
    lb->done++;
    hand_on(lb, r->rank);
    pthread_mutex_unlock(&lb->mu);
    return NULL;
}

int sfb__loopback_run(struct sfb__loopback *lb,
                      int (*fn)(struct sfb__comm *c, uint32_t r, void *arg), void *arg, int *rets)
{
    pthread_mutex_lock(&lb->mu);
    lb->fn = fn;
    lb->arg = arg;
    lb->done = 0;
    lb->turn = -1;
    lb->idle = 0;
    uint32_t started = 0;
    int ret = 0;
    for (; started < lb->world; started++) {
        struct lb_rank *r = &lb->r[started];
        r->state = LB_READY;
        r->ret = 0;
        if (pthread_create(&r->th, NULL, rank_main, r)) {
            ret = sfb__error(-EAGAIN, "loopback: cannot start the thread of rank %u", started);
            break;
        }
    }
    if (started < lb->world) {
        /* the started ranks run alone: the others count as finished */
        fail_all(lb, "loopback: rank %u could not start", started);
        for (uint32_t k = started; k < lb->world; k++)
            lb->r[k].state = LB_DONE;
        lb->done = lb->world - started;
    }
    if (started) {
        lb->turn = 0;
        pthread_cond_signal(&lb->r[0].cv);
    }
    while (lb->done < lb->world)
        pthread_cond_wait(&lb->main_cv, &lb->mu);
    pump(lb); /* what the last rank sent reaches the inboxes */
    pthread_mutex_unlock(&lb->mu);
    for (uint32_t k = 0; k < started; k++)
        pthread_join(lb->r[k].th, NULL);
    for (uint32_t k = 0; k < lb->world; k++) {
        if (rets) rets[k] = lb->r[k].ret;
        if (!ret && k < started && lb->r[k].ret)
            ret = sfb__error(lb->r[k].ret, "rank %u: %s", k, lb->r[k].why);
    }
    return ret;
}

void sfb__loopback_yield(struct sfb__comm *c)
{
    block(c->impl, LB_READY);
}

void sfb__loopback_set_tap(struct sfb__loopback *lb,
                           void (*tap)(void *user, uint32_t src, uint32_t dst, uint8_t *frame,
                                       size_t len),
                           void *user)
{
    lb->tap = tap;
    lb->tap_user = user;
}

void sfb__loopback_stats(const struct sfb__loopback *lb, uint32_t r, struct sfb__loopback_stats *st)
{
    *st = r < lb->world ? lb->r[r].st : (struct sfb__loopback_stats){0};
}

void sfb__loopback_close(struct sfb__loopback **plb)
{
    struct sfb__loopback *lb = *plb;
    if (!lb) return;
    drop(&lb->net);
    for (uint32_t k = 0; lb->r && k < lb->world; k++) {
        drop(&lb->r[k].inbox);
        pthread_cond_destroy(&lb->r[k].cv);
        sfb__comm_close(&lb->r[k].c);
    }
    free(lb->r);
    pthread_cond_destroy(&lb->main_cv);
    pthread_mutex_destroy(&lb->mu);
    free(lb);
    *plb = NULL;
}
