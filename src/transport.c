/* libfabric transport. The only module that includes <rdma/fabric.h>.
 *
 * Threads: every fi_* call on the data path runs in the loop thread (the
 * poller's progress function and loop calls). Other threads only touch the
 * mutex-protected send queue, inbox and buffer pool. Buffer registration
 * (FI_MR_LOCAL providers) is shipped to the loop thread with sfb__loop_call.
 *
 * Message protocol (docs/wire.md, "Transport framing"): every fabric message
 * is at most chunk_size bytes, starts with a 16-byte transport header (sender
 * rank and kind WHOLE/FIRST/PIECE, per-destination frame sequence, total
 * length or piece index), is sent with tag 0, and lands in a pooled receive
 * buffer posted with a match-everything mask. Big frames are reassembled here
 * by (sender, sequence, index), which tolerates out-of-order completions.
 * Varying tags and directed receives are avoided on purpose: libfabric
 * 1.17's shm lost tagged messages whose tags varied (measured here).
 *
 * Every posted operation holds one CQ slot (max_ops outstanding, CQ sized to
 * match) so the CQ can never overrun and drop completions.
 */
#include "config.h"
#include "src/transport.h"

#include "src/common.h"
#include "src/loop.h"

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

const char *sfb__fi_strerror(int code)
{
    return fi_strerror(code);
}

#define THDR_LEN 16
enum { K_WHOLE = 0, K_FIRST = 1, K_PIECE = 2 };
#define NCLASS 48
#define MIN_CLASS 12 /* 4 KiB */

enum op_kind { OP_SEND = 1, OP_RECV };
/* Pieces held while their first chunk is still missing (all frames). */
#define STASH_MAX 4096
/* How long the poller keeps spinning without progress while operations are
 * in flight (see progress()). */
#define INFLIGHT_SPIN_S 0.05

/* One posted libfabric operation; the context must come first (FI_CONTEXT2). */
struct op {
    struct fi_context2 ctx;
    uint8_t thdr[THDR_LEN]; /* transport header of a piece */
    void *desc;             /* of thdr (registered slab), or NULL */
    int kind;
    int in_use;
    struct sreq *req;
    struct sfb__buf *rbuf;
    struct op *next;
};

struct sreq {
    /* Adjacent on purpose: a first chunk sends prefix ++ hdr as one iovec. */
    uint8_t prefix[THDR_LEN];
    uint8_t hdr[SFB__TRANSPORT_HDR_MAX];
    size_t hdr_len;
    struct sfb__buf *buf;
    size_t off, len, total;
    size_t posted; /* frame bytes posted so far */
    uint32_t dst, seq, idx;
    unsigned outstanding;
    int started, all_posted, failed, in_use;
    struct sreq *next;
};

/* A big frame being reassembled. */
struct asm_rec {
    struct sfb__buf *buf;   /* the frame, once the first chunk is in */
    struct sfb__buf *stash; /* pieces that completed before the first chunk */
    size_t total, first_len, piece;
    uint32_t src, seq, npieces, done;
    int have_first, in_use;
    struct asm_rec *next; /* free list / active list */
};

struct slab {
    struct slab *next;
    struct fid_mr *mr;
};

struct sfb__transport {
    struct sfb__transport_settings s;
    struct sfb__loop *loop;
    struct sfb__loop_poller *poller;
    struct sfb__loop_async *async;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fid_mr *slab_mr;
    void *slab_desc;
    int mr_local;
    int wait_fd;
    uint64_t mr_key;
    char prov_name[64];
    uint8_t *name;
    size_t name_len;
    _Atomic uint32_t world; /* written once by set_peers, read by the loop */
    uint32_t *seq; /* next frame sequence per destination */
    size_t chunk;
    double last_work;

    /* loop-thread state */
    struct op *free_ops;
    struct slab *op_slabs, *asm_slabs;
    unsigned ops_out, max_ops; /* posted operations; the CQ holds max_ops */
    struct asm_rec *free_asm;
    struct asm_rec *active; /* frames being reassembled */
    unsigned stashed;
    struct sreq *pend_head, *pend_tail;    /* sends not fully posted */
    unsigned rx_deficit;                   /* wildcard receives to repost */

    /* shared state, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv_space, cv_inbox, cv_flush;
    struct sreq *sreqs; /* max_sends of them */
    struct sreq *free_sreq;
    struct sreq *sub_head, *sub_tail; /* submitted, not yet seen by the loop */
    unsigned in_use;
    struct sfb__frame *inbox; /* ring of inbox_cap */
    unsigned in_head, in_count;
    struct sfb__buf *ovf_head, *ovf_tail; /* frames beyond inbox_cap */
    _Atomic int ovf_nonempty;
    int closing;

    /* buffer pool */
    pthread_mutex_t pool_mu;
    struct sfb__buf *pool[NCLASS];
    _Atomic long bufs_live;

    struct sfb__transport_stats stats;
};

static void stat_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

void sfb__transport_default_settings(struct sfb__transport_settings *s)
{
    memset(s, 0, sizeof *s);
    /* 256 KiB: above rxm's SAR limit (128 KiB), so on tcp every chunk goes
     * by rendezvous straight from the user buffer instead of being copied
     * through 16 KiB bounce segments; measured 2x the bandwidth of 64 KiB
     * at >= 1 MiB on tcp and no loss on shm (docs/performance.md). */
    s->chunk_size = 256 << 10;
    s->max_frame = (size_t)1 << 30;
    s->rx_depth = 32;
    s->inbox_cap = 1024;
    s->max_sends = 1024;
    s->poll_interval_s = 0.0005;
    s->spin_s = 0.002;
}

static void report(struct sfb__transport *t, int peer, int code, const char *what, const char *detail)
{
    stat_add(&t->stats.errors, 1);
    char msg[512];
    snprintf(msg, sizeof msg, "%s (peer rank %d, provider %s): %s: %s", what, peer, t->prov_name,
             fi_strerror(code < 0 ? -code : code), detail ? detail : "");
    SFB_LOG_E("transport: %s", msg);
    if (t->s.on_error) t->s.on_error(t->s.user, peer, code < 0 ? code : -code, msg);
}

/* ---------------- buffer pool ---------------- */

static unsigned size_class(size_t size)
{
    unsigned c = MIN_CLASS;
    while (c < NCLASS - 1 && ((size_t)1 << c) < size) c++;
    return c;
}

struct reg_op {
    struct sfb__transport *t;
    struct sfb__buf *b;
    int rc;
};

static void reg_in_loop(void *arg)
{
    struct reg_op *r = arg;
    struct sfb__transport *t = r->t;
    struct fid_mr *mr;
    r->rc = fi_mr_reg(t->domain, r->b->data, r->b->cap, FI_SEND | FI_RECV, 0, t->mr_key++, 0, &mr,
                      NULL);
    if (r->rc == 0) {
        r->b->mr = mr;
        r->b->desc = fi_mr_desc(mr);
    }
}

static void buf_free(struct sfb__buf *b)
{
    if (b->mr) fi_close(&((struct fid_mr *)b->mr)->fid);
    atomic_fetch_sub(&b->t->bufs_live, 1);
    free(b);
}

int sfb__transport_buf_get(struct sfb__transport *t, size_t size, struct sfb__buf **out)
{
    unsigned c = size_class(size);
    if (((size_t)1 << c) < size) return sfb__error(-ENOMEM, "transport: buffer of %zu bytes", size);
    pthread_mutex_lock(&t->pool_mu);
    struct sfb__buf *b = t->pool[c];
    if (b) t->pool[c] = b->next;
    pthread_mutex_unlock(&t->pool_mu);
    if (!b) {
        size_t cap = (size_t)1 << c;
        b = malloc(sizeof *b + 64 + cap);
        if (!b) return sfb__error(-ENOMEM, "transport: out of memory for a %zu-byte buffer", cap);
        memset(b, 0, sizeof *b);
        b->data = (uint8_t *)(((uintptr_t)(b + 1) + 63) & ~(uintptr_t)63);
        b->cap = cap;
        b->cls = c;
        b->t = t;
        atomic_fetch_add(&t->bufs_live, 1);
        if (t->mr_local) {
            struct reg_op r = {t, b, 0};
            int rc = sfb__loop_call(t->loop, reg_in_loop, &r);
            if (rc || r.rc) {
                free(b);
                atomic_fetch_sub(&t->bufs_live, 1);
                return sfb__error(rc ? rc : r.rc, "transport: fi_mr_reg of %zu bytes: %s", cap,
                                  fi_strerror(-(rc ? rc : r.rc)));
            }
        }
    }
    atomic_store(&b->refs, 1);
    b->next = NULL;
    b->len = 0;
    b->off = 0;
    *out = b;
    return 0;
}

void sfb__buf_ref(struct sfb__buf *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void sfb__buf_put(struct sfb__buf *b)
{
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
    struct sfb__transport *t = b->t;
    pthread_mutex_lock(&t->pool_mu);
    b->next = t->pool[b->cls];
    t->pool[b->cls] = b;
    pthread_mutex_unlock(&t->pool_mu);
}

/* ---------------- ops and reassembly records (loop thread) ---------------- */

/* NULL when max_ops operations are outstanding: every posted operation owns
 * one CQ slot, and providers may drop completions that find the CQ full
 * (libfabric 1.17 shm does, measured), so posting stops there. */
static struct op *op_get(struct sfb__transport *t)
{
    if (t->ops_out >= t->max_ops) return NULL;
    if (!t->free_ops) {
        /* Grows in slabs until the steady state is reached; never shrinks.
         * Registered when the provider needs it: pieces send op->thdr. */
        enum { N = 256 };
        struct slab *sl = calloc(1, sizeof *sl + N * sizeof(struct op));
        if (!sl) return NULL;
        struct op *ops = (struct op *)(sl + 1);
        void *desc = NULL;
        if (t->mr_local) {
            int rc = fi_mr_reg(t->domain, ops, N * sizeof(struct op), FI_SEND, 0, t->mr_key++, 0,
                               &sl->mr, NULL);
            if (rc) {
                free(sl);
                return NULL;
            }
            desc = fi_mr_desc(sl->mr);
        }
        sl->next = t->op_slabs;
        t->op_slabs = sl;
        for (int i = 0; i < N; i++) {
            ops[i].desc = desc;
            ops[i].next = t->free_ops;
            t->free_ops = &ops[i];
        }
    }
    struct op *o = t->free_ops;
    t->free_ops = o->next;
    o->kind = 0;
    o->req = NULL;
    o->rbuf = NULL;
    o->in_use = 1;
    t->ops_out++;
    return o;
}

static void op_put(struct sfb__transport *t, struct op *o)
{
    o->in_use = 0;
    o->next = t->free_ops;
    t->free_ops = o;
    t->ops_out--;
}

static struct asm_rec *asm_get(struct sfb__transport *t)
{
    if (!t->free_asm) {
        enum { N = 64 };
        struct slab *sl = calloc(1, sizeof *sl + N * sizeof(struct asm_rec));
        if (!sl) return NULL;
        sl->next = t->asm_slabs;
        t->asm_slabs = sl;
        struct asm_rec *a = (struct asm_rec *)(sl + 1);
        for (int i = 0; i < N; i++) {
            a[i].next = t->free_asm;
            t->free_asm = &a[i];
        }
    }
    struct asm_rec *a = t->free_asm;
    t->free_asm = a->next;
    memset(a, 0, sizeof *a);
    a->in_use = 1;
    return a;
}

static void asm_put(struct sfb__transport *t, struct asm_rec *a)
{
    a->in_use = 0;
    a->next = t->free_asm;
    t->free_asm = a;
}

/* ---------------- delivery ---------------- */

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

/* ---------------- posting ---------------- */

static void put32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Transport header: u32 sender rank | kind << 24, u32 sequence, u64 total
 * length (FIRST) or piece index (PIECE) or 0 (WHOLE); little-endian. */
static void thdr_put(uint8_t *p, uint32_t rank, uint32_t kind, uint32_t seq, uint64_t x)
{
    put32le(p, rank | kind << 24);
    put32le(p + 4, seq);
    put64le(p + 8, x);
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

/* Posts what it can of one send. Returns 0 when everything is posted,
 * -FI_EAGAIN to retry later. Hard errors fail the request. */
static int advance_send(struct sfb__transport *t, struct sreq *r)
{
    size_t room = t->chunk - THDR_LEN;
    while (!r->all_posted) {
        struct iovec iov[2];
        void *desc[2];
        size_t cnt, nbytes;
        if (!r->started) {
            r->seq = t->seq[r->dst]++;
            r->started = 1;
        }
        struct op *o = op_get(t);
        if (!o) return -FI_EAGAIN;
        if (r->posted == 0) {
            /* Transport header, frame header and the start of the payload:
             * prefix and hdr are adjacent in the sreq, so 2 iovecs. */
            nbytes = SFB_MIN(r->total, room);
            thdr_put(r->prefix, t->s.rank, nbytes == r->total ? K_WHOLE : K_FIRST, r->seq,
                     nbytes == r->total ? 0 : r->total);
            size_t h = SFB_MIN(r->hdr_len, nbytes);
            iov[0] = (struct iovec){r->prefix, THDR_LEN + h};
            desc[0] = t->slab_desc;
            cnt = 1;
            if (nbytes > h) {
                iov[1] = (struct iovec){r->buf->data + r->off, nbytes - h};
                desc[1] = r->buf->desc;
                cnt = 2;
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
        o->kind = OP_SEND;
        o->req = r;
        ssize_t rc = fi_tsendv(t->ep, iov, t->mr_local ? desc : NULL, cnt, r->dst, 0, &o->ctx);
        if (rc == -FI_EAGAIN) {
            op_put(t, o);
            stat_add(&t->stats.eagain, 1);
            return -FI_EAGAIN;
        }
        if (rc) {
            op_put(t, o);
            report(t, (int)r->dst, (int)rc, "fi_tsendv failed", NULL);
            r->failed = 1;
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

static int post_sends(struct sfb__transport *t)
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

static int post_wildcard(struct sfb__transport *t)
{
    struct sfb__buf *b;
    if (sfb__transport_buf_get(t, t->chunk, &b)) return -ENOMEM;
    struct op *o = op_get(t);
    if (!o) {
        sfb__buf_put(b);
        return -ENOMEM;
    }
    o->kind = OP_RECV;
    o->rbuf = b;
    ssize_t rc = fi_trecv(t->ep, b->data, t->chunk, b->desc, FI_ADDR_UNSPEC, 0, ~0ull, &o->ctx);
    if (rc) {
        op_put(t, o);
        sfb__buf_put(b);
        if (rc != -FI_EAGAIN) report(t, -1, (int)rc, "fi_trecv failed", NULL);
        return (int)rc;
    }
    return 0;
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
    asm_put(t, a);
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
    asm_put(t, a);
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
    struct asm_rec *a = asm_get(t);
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

/* A message landed in a receive buffer: a whole frame, a first chunk or a
 * piece, told apart by the transport header. Completions may come out of
 * order (eager vs. rendezvous), so chunks are matched by (sender, sequence,
 * index), not by arrival. */
static void on_message(struct sfb__transport *t, struct sfb__buf *b, size_t len)
{
    if (len < THDR_LEN) {
        SFB_LOG_W("transport: %zu-byte message without transport header dropped", len);
        stat_add(&t->stats.dropped, 1);
        sfb__buf_put(b);
        return;
    }
    uint32_t w0 = get32le(b->data), seq = get32le(b->data + 4);
    uint64_t x = get64le(b->data + 8);
    uint32_t src = w0 & 0xffffffu, kind = w0 >> 24;
    if ((t->world && src >= t->world) || kind > K_PIECE) {
        SFB_LOG_W("transport: message with sender %u, kind %u dropped (world of %u)", src, kind,
                  t->world);
        stat_add(&t->stats.dropped, 1);
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

static int post_recvs(struct sfb__transport *t)
{
    int work = 0;
    /* Backpressure: while frames overflow the inbox, do not repost. */
    while (t->rx_deficit && !atomic_load(&t->ovf_nonempty)) {
        if (post_wildcard(t)) break;
        t->rx_deficit--;
        work = 1;
    }
    return work;
}

static void complete(struct sfb__transport *t, struct op *o, size_t len, uint64_t tag, int err)
{
    switch (o->kind) {
    case OP_SEND: {
        struct sreq *r = o->req;
        if (err) r->failed = 1;
        if (--r->outstanding == 0 && r->all_posted) sreq_finish(t, r);
        break;
    }
    case OP_RECV:
        t->rx_deficit++;
        if (err) sfb__buf_put(o->rbuf);
        else on_message(t, o->rbuf, len);
        break;
    }
    op_put(t, o);
}
static int read_cq(struct sfb__transport *t)
{
    struct fi_cq_tagged_entry ent[16];
    int work = 0;
    for (;;) {
        ssize_t n = fi_cq_read(t->cq, ent, SFB_ARRAY_LEN(ent));
        if (n == -FI_EAGAIN) break;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry e;
            memset(&e, 0, sizeof e);
            if (fi_cq_readerr(t->cq, &e, 0) < 1) break;
            struct op *o = e.op_context;
            if (e.err != FI_ECANCELED) {
                char buf[256];
                const char *s = fi_cq_strerror(t->cq, e.prov_errno, e.err_data, buf, sizeof buf);
                int peer = !o ? -1
                         : o->kind == OP_SEND ? (int)o->req->dst
                                              : -1;
                report(t, peer, -e.err, "completion error", s);
            }
            if (o) complete(t, o, 0, 0, e.err ? e.err : FI_EOTHER);
            work = 1;
            continue;
        }
        if (n < 0) {
            report(t, -1, (int)n, "fi_cq_read failed", NULL);
            break;
        }
        for (ssize_t i = 0; i < n; i++) complete(t, ent[i].op_context, ent[i].len, ent[i].tag, 0);
        work = 1;
    }
    return work;
}

/* The poller: progress everything, then decide how long the loop may sleep. */
static int progress(void *arg)
{
    struct sfb__transport *t = arg;
    int work = read_cq(t);
    work |= post_sends(t);
    work |= post_recvs(t);
    work |= read_cq(t);
    double now = sfb__now();
    if (work) t->last_work = now;
    /* Operations in flight (sends not yet completed, a frame half
     * reassembled) mean a completion is due within microseconds: keep
     * polling longer than spin_s, or a big frame whose chunks complete
     * more than spin_s apart under load would pay a nap (≥ 1 ms: epoll's
     * resolution) per gap. Bounded, so a dead peer does not burn a core. */
    unsigned rx_posted = t->s.rx_depth - SFB_MIN(t->rx_deficit, t->s.rx_depth);
    int in_flight = t->ops_out > rx_posted || t->active;
    int spinning = now - t->last_work < (in_flight ? INFLIGHT_SPIN_S : t->s.spin_s);
    int pending = t->pend_head || (t->rx_deficit && !atomic_load(&t->ovf_nonempty));
    if (t->wait_fd < 0 || pending) {
        /* An idle spin pass gives the core away: on a machine with fewer
         * cores than busy threads, the thread that would produce the next
         * completion (this process's compute thread, the peer) needs it. */
        if (spinning && !work) sched_yield();
        return spinning ? SFB__POLL_BUSY : SFB__POLL_NAP;
    }
    struct fid *f = &t->cq->fid;
    return fi_trywait(t->fabric, &f, 1) == FI_SUCCESS ? SFB__POLL_SLEEP : SFB__POLL_BUSY;
}

/* Async: move submitted sends into the loop's pending list. */
static void on_async(void *arg)
{
    struct sfb__transport *t = arg;
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

/* ---------------- open / close ---------------- */

static int open_cq(struct sfb__transport *t)
{
    t->max_ops = t->s.rx_depth + 2048;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD,
                            .size = t->max_ops + 64};
    t->wait_fd = -1;
    if (fi_cq_open(t->domain, &ca, &t->cq, NULL) == 0) {
        int fd = -1;
        struct fid *f = &t->cq->fid;
        /* shm accepts the attribute but cannot wait (-FI_ENOSYS): poll it. */
        if (fi_control(&t->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0 &&
            fi_trywait(t->fabric, &f, 1) != -FI_ENOSYS) {
            t->wait_fd = fd;
            return 0;
        }
        fi_close(&t->cq->fid);
        t->cq = NULL;
    }
    ca.wait_obj = FI_WAIT_NONE;
    int rc = fi_cq_open(t->domain, &ca, &t->cq, NULL);
    return rc ? sfb__error(rc, "transport: fi_cq_open: %s", fi_strerror(-rc)) : 0;
}

/* The shm provider names its region after the pid by default
 * ("<pid>:<dom>:<ep>" in /dev/shm). A process killed with SIGKILL leaves its
 * region behind, and a later process that gets the same pid then fails with
 * EBUSY. So: a name of our own with a random part, and removal of the
 * regions of our own dead processes (the pid is the name's last field). */
static void shm_reap_dead(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "sfb_", 4) != 0) continue;
        const char *us = strrchr(e->d_name, '_');
        char *end;
        long pid = us ? strtol(us + 1, &end, 10) : 0;
        if (pid <= 0 || *end) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char path[300];
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        if (unlink(path) == 0) SFB_LOG_D("transport: removed %s of dead process %ld", path, pid);
    }
    closedir(d);
}

static int shm_name(struct sfb__transport *t)
{
    shm_reap_dead();
    char name[128];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(name, sizeof name, "sfb_%08lx%08lx_%u_%ld", (unsigned long)ts.tv_nsec,
             (unsigned long)ts.tv_sec & 0xffffffffu, t->s.rank, (long)getpid());
    int rc = fi_setname(&t->ep->fid, name, strlen(name) + 1);
    return rc ? sfb__error(rc, "transport: fi_setname(%s): %s", name, fi_strerror(-rc)) : 0;
}

static int open_fabric(struct sfb__transport *t)
{
    const char *prov = t->s.provider;
    if (!prov || !*prov) prov = getenv("FI_PROVIDER");
    if (!prov || !*prov) prov = t->s.all_local ? "shm" : "tcp";
    struct fi_info *hints = fi_allocinfo();
    if (!hints) return -ENOMEM;
    hints->caps = FI_TAGGED;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->av_type = FI_AV_TABLE;
    hints->fabric_attr->prov_name = strdup(prov);
    /* A socket-based provider picks an interface by itself; when every rank
     * is on this host, bind loopback: other interfaces may come and go (test
     * namespaces, VPNs) and are of no use here. FI_TCP_IFACE still wins. */
    const char *node = NULL;
    uint64_t flags = 0;
    if (t->s.all_local && !getenv("FI_TCP_IFACE") &&
        (!strncmp(prov, "tcp", 3) || !strncmp(prov, "udp", 3) || !strcmp(prov, "sockets"))) {
        node = "127.0.0.1";
        flags = FI_SOURCE;
    }
    int rc = fi_getinfo(FI_VERSION(1, 9), node, NULL, flags, hints, &t->info);
    fi_freeinfo(hints);
    if (rc) return sfb__error(rc, "transport: no FI_EP_RDM tagged provider \"%s\": %s", prov,
                              fi_strerror(-rc));
    struct fi_info *fi = t->info;
    snprintf(t->prov_name, sizeof t->prov_name, "%s", fi->fabric_attr->prov_name);
    if (fi->tx_attr->iov_limit < 2)
        return sfb__error(-FI_ENOSYS, "transport: provider %s has iov_limit %zu (need 2)",
                          t->prov_name, fi->tx_attr->iov_limit);
    t->mr_local = (fi->domain_attr->mr_mode & FI_MR_LOCAL) || (fi->mode & FI_LOCAL_MR);
    size_t maxmsg = fi->ep_attr->max_msg_size;
    t->chunk = SFB_MIN(t->s.chunk_size, maxmsg);
    if (t->chunk < 4096)
        return sfb__error(-FI_ENOSYS, "transport: provider %s: max_msg_size %zu too small",
                          t->prov_name, maxmsg);
    if ((rc = fi_fabric(fi->fabric_attr, &t->fabric, NULL)))
        return sfb__error(rc, "transport: fi_fabric(%s): %s", t->prov_name, fi_strerror(-rc));
    if ((rc = fi_domain(t->fabric, fi, &t->domain, NULL)))
        return sfb__error(rc, "transport: fi_domain(%s): %s", t->prov_name, fi_strerror(-rc));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    if ((rc = fi_av_open(t->domain, &aa, &t->av, NULL)))
        return sfb__error(rc, "transport: fi_av_open: %s", fi_strerror(-rc));
    if ((rc = open_cq(t))) return rc;
    if ((rc = fi_endpoint(t->domain, fi, &t->ep, NULL)))
        return sfb__error(rc, "transport: fi_endpoint: %s", fi_strerror(-rc));
    if (!strcmp(t->prov_name, "shm") && (rc = shm_name(t))) return rc;
    if ((rc = fi_ep_bind(t->ep, &t->av->fid, 0)) ||
        (rc = fi_ep_bind(t->ep, &t->cq->fid, FI_TRANSMIT | FI_RECV)) || (rc = fi_enable(t->ep)))
        return sfb__error(rc, "transport: endpoint setup: %s", fi_strerror(-rc));
    size_t len = 0;
    rc = fi_getname(&t->ep->fid, NULL, &len);
    if (rc != -FI_ETOOSMALL && rc != 0)
        return sfb__error(rc, "transport: fi_getname: %s", fi_strerror(-rc));
    if (!(t->name = calloc(1, len + 1))) return -ENOMEM;
    if ((rc = fi_getname(&t->ep->fid, t->name, &len)))
        return sfb__error(rc, "transport: fi_getname: %s", fi_strerror(-rc));
    t->name_len = len;
    if (t->mr_local) {
        size_t n = (size_t)t->s.max_sends * sizeof(struct sreq);
        if ((rc = fi_mr_reg(t->domain, t->sreqs, n, FI_SEND, 0, t->mr_key++, 0, &t->slab_mr, NULL)))
            return sfb__error(rc, "transport: fi_mr_reg: %s", fi_strerror(-rc));
        t->slab_desc = fi_mr_desc(t->slab_mr);
    }
    return 0;
}

int sfb__transport_open(struct sfb__transport **out, const struct sfb__transport_settings *s,
                        struct sfb__loop *loop)
{
    *out = NULL;
    struct sfb__transport *t = calloc(1, sizeof *t);
    if (!t) return -ENOMEM;
    t->s = *s;
    t->loop = loop;
    t->wait_fd = -1;
    if (!t->s.chunk_size) t->s.chunk_size = 256 << 10;
    if (!t->s.max_frame) t->s.max_frame = (size_t)1 << 30;
    if (!t->s.rx_depth) t->s.rx_depth = 32;
    if (!t->s.inbox_cap) t->s.inbox_cap = 1024;
    if (!t->s.max_sends) t->s.max_sends = 1024;
    if (t->s.chunk_size < 4096) t->s.chunk_size = 4096;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->pool_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv_space, &ca);
    pthread_cond_init(&t->cv_inbox, &ca);
    pthread_cond_init(&t->cv_flush, &ca);
    pthread_condattr_destroy(&ca);
    int rc;
    if (s->rank >= SFB__TRANSPORT_MAX_RANKS) {
        rc = sfb__error(-EINVAL, "transport: rank %u too large", s->rank);
        goto fail;
    }
    t->sreqs = calloc(t->s.max_sends, sizeof *t->sreqs);
    t->inbox = calloc(t->s.inbox_cap, sizeof *t->inbox);
    if (!t->sreqs || !t->inbox) {
        rc = -ENOMEM;
        goto fail;
    }
    for (unsigned i = 0; i < t->s.max_sends; i++) {
        t->sreqs[i].next = t->free_sreq;
        t->free_sreq = &t->sreqs[i];
    }
    if ((rc = open_fabric(t))) goto fail;
    /* Nothing runs in the loop for this transport yet: post from here. */
    for (unsigned i = 0; i < t->s.rx_depth; i++)
        if (post_wildcard(t)) t->rx_deficit++;
    t->last_work = sfb__now();
    if ((rc = sfb__loop_async_open(loop, &t->async, on_async, t))) goto fail;
    if ((rc = sfb__loop_poller_open(loop, &t->poller, t->wait_fd, t->s.poll_interval_s, progress, t)))
        goto fail;
    SFB_LOG_D("transport: rank %u on %s (%s CQ, chunk %zu, mr_local %d)", s->rank,
              t->prov_name, t->wait_fd >= 0 ? "fd" : "polled", t->chunk, t->mr_local);
    *out = t;
    return 0;
fail:
    sfb__transport_close(&t);
    return rc;
}

void sfb__transport_name(const struct sfb__transport *t, const void **name, size_t *len)
{
    *name = t->name;
    *len = t->name_len;
}

const char *sfb__transport_provider(const struct sfb__transport *t)
{
    return t->prov_name;
}

struct peers_op {
    struct sfb__transport *t;
    const void *const *names;
    const size_t *lens;
    uint32_t world;
    int rc;
};

static void peers_in_loop(void *arg)
{
    struct peers_op *p = arg;
    struct sfb__transport *t = p->t;
    /* Providers read a fixed-size address (shm: a 256-byte name slot), so
     * each blob goes through a zero-padded copy. */
    uint8_t pad[1024];
    for (uint32_t i = 0; i < p->world; i++) {
        if (p->lens[i] == 0 || p->lens[i] > sizeof pad) {
            p->rc = sfb__error(-EINVAL, "transport: address of rank %u has %zu bytes", i, p->lens[i]);
            return;
        }
        memset(pad, 0, sizeof pad);
        memcpy(pad, p->names[i], p->lens[i]);
        fi_addr_t fa = FI_ADDR_NOTAVAIL;
        int rc = fi_av_insert(t->av, pad, 1, &fa, 0, NULL);
        if (rc != 1) {
            p->rc = sfb__error(rc < 0 ? rc : -EINVAL, "transport: fi_av_insert of rank %u: %s", i,
                               fi_strerror(rc < 0 ? -rc : FI_EINVAL));
            return;
        }
        if (fa != i) {
            p->rc = sfb__error(-EPROTO, "transport: AV gave fi_addr %llu to rank %u",
                               (unsigned long long)fa, i);
            return;
        }
    }
    p->rc = 0;
}

int sfb__transport_set_peers(struct sfb__transport *t, const void *const *names,
                             const size_t *lens, uint32_t world)
{
    if (t->world) return sfb__error(-EINVAL, "transport: peers already set");
    if (world == 0 || world > SFB__TRANSPORT_MAX_RANKS || t->s.rank >= world)
        return sfb__error(-EINVAL, "transport: world size %u with rank %u", world, t->s.rank);
    t->seq = calloc(world, sizeof *t->seq);
    if (!t->seq) return -ENOMEM;
    struct peers_op p = {t, names, lens, world, 0};
    int rc = sfb__loop_call(t->loop, peers_in_loop, &p);
    if (rc || p.rc) return rc ? rc : p.rc;
    pthread_mutex_lock(&t->mu);
    t->world = world;
    pthread_mutex_unlock(&t->mu);
    return 0;
}

static void deadline(struct timespec *ts, double timeout_s)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    double s = (double)ts->tv_sec + 1e-9 * (double)ts->tv_nsec + timeout_s;
    ts->tv_sec = (time_t)s;
    ts->tv_nsec = (long)((s - (double)ts->tv_sec) * 1e9);
}

int sfb__transport_send(struct sfb__transport *t, uint32_t dst, const void *hdr, size_t hdr_len,
                        struct sfb__buf *buf, size_t off, size_t len, double timeout_s)
{
    if (hdr_len > SFB__TRANSPORT_HDR_MAX || (hdr_len && !hdr) || (len && !buf) ||
        (buf && (off > buf->cap || len > buf->cap - off)))
        return sfb__error(-EINVAL, "transport send: header %zu bytes or slice [%zu, +%zu) invalid",
                          hdr_len, off, len);
    struct timespec ts;
    if (timeout_s > 0) deadline(&ts, timeout_s);
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
    r->posted = 0;
    r->idx = 0;
    r->outstanding = 0;
    r->started = r->all_posted = r->failed = 0;
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

int sfb__transport_recv(struct sfb__transport *t, struct sfb__frame *out, double timeout_s)
{
    struct timespec ts;
    if (timeout_s > 0) deadline(&ts, timeout_s);
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

int sfb__transport_flush(struct sfb__transport *t, double timeout_s)
{
    struct timespec ts;
    deadline(&ts, timeout_s);
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

const struct sfb__transport_stats *sfb__transport_stats(const struct sfb__transport *t)
{
    return &t->stats;
}

static void close_fid(struct fid *f, const char *what)
{
    int rc = fi_close(f);
    if (rc) SFB_LOG_W("transport: closing %s: %s", what, fi_strerror(-rc));
}

void sfb__transport_close(struct sfb__transport **tp)
{
    struct sfb__transport *t = *tp;
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->closing = 1;
    pthread_cond_broadcast(&t->cv_space);
    pthread_mutex_unlock(&t->mu);
    /* After these the loop never runs transport code again. */
    sfb__loop_poller_close(&t->poller);
    sfb__loop_async_close(&t->async);
    if (t->ep) close_fid(&t->ep->fid, "endpoint");
    if (t->av) close_fid(&t->av->fid, "address vector");
    if (t->cq) close_fid(&t->cq->fid, "completion queue");
    /* Release the buffers the transport still references. */
    for (struct slab *sl = t->op_slabs; sl; sl = sl->next) {
        struct op *ops = (struct op *)(sl + 1);
        for (int i = 0; i < 256; i++)
            if (ops[i].in_use && ops[i].kind == OP_RECV) sfb__buf_put(ops[i].rbuf);
    }
    for (struct asm_rec *a = t->active; a; a = a->next) {
        if (a->buf) sfb__buf_put(a->buf);
        while (a->stash) {
            struct sfb__buf *b = a->stash;
            a->stash = b->next;
            sfb__buf_put(b);
        }
    }
    if (t->sreqs)
        for (unsigned i = 0; i < t->s.max_sends; i++)
            if (t->sreqs[i].in_use && t->sreqs[i].buf) sfb__buf_put(t->sreqs[i].buf);
    while (t->ovf_head) {
        struct sfb__buf *b = t->ovf_head;
        t->ovf_head = b->next;
        sfb__buf_put(b);
    }
    for (unsigned i = 0; i < t->in_count; i++)
        sfb__buf_put(t->inbox[(t->in_head + i) % t->s.inbox_cap].buf);
    for (int c = 0; c < NCLASS; c++)
        while (t->pool[c]) {
            struct sfb__buf *b = t->pool[c];
            t->pool[c] = b->next;
            buf_free(b);
        }
    long live = atomic_load(&t->bufs_live);
    if (live) SFB_LOG_W("transport: %ld buffers still held by the caller at close", live);
    if (t->slab_mr) close_fid(&t->slab_mr->fid, "memory region");
    for (struct slab *sl = t->op_slabs; sl; sl = sl->next)
        if (sl->mr) close_fid(&sl->mr->fid, "memory region");
    if (t->domain) close_fid(&t->domain->fid, "domain");
    if (t->fabric) close_fid(&t->fabric->fid, "fabric");
    if (t->info) fi_freeinfo(t->info);
    while (t->op_slabs) {
        struct slab *sl = t->op_slabs;
        t->op_slabs = sl->next;
        free(sl);
    }
    while (t->asm_slabs) {
        struct slab *sl = t->asm_slabs;
        t->asm_slabs = sl->next;
        free(sl);
    }
    free(t->sreqs);
    free(t->inbox);
    free(t->seq);
    free(t->name);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->pool_mu);
    pthread_cond_destroy(&t->cv_space);
    pthread_cond_destroy(&t->cv_inbox);
    pthread_cond_destroy(&t->cv_flush);
    free(t);
    *tp = NULL;
}
