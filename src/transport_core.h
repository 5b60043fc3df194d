/* The transport's shared state and the small pieces every transport module
 * uses: posted-operation records (each owns one CQ slot), the 16-byte
 * transport header, tags, counters and error reporting. Internal to
 * src/transport*.c (the only files that include <rdma/fabric.h>).
 *
 * Modules: transport.c (open/close, fabric objects, progress and CQ),
 * transport_tx.c (send queue and posting), transport_rx.c (receive posting,
 * big-frame receive, inbox), transport_pool.c (buffers), this one. */
#ifndef SFB_SRC_TRANSPORT_CORE_H
#define SFB_SRC_TRANSPORT_CORE_H

#include "src/transport.h"
#include "src/transport_pool.h"

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>

/* Transport header: u32 sender rank | kind << 24, u32 sequence, u64 total
 * frame length (ANNOUNCE) or 0 (WHOLE); little-endian. docs/wire.md. */
#define THDR_LEN 16
enum { K_WHOLE = 0, K_ANNOUNCE = 1 };

/* Tags (63 usable bits on shm and rxm): every message a wildcard receive may
 * take has tag 0; a big frame's body has bit 62 set, the sender's rank in
 * bits 32–55 and the frame sequence in bits 0–31, and only its own directed
 * receive matches it. The wildcard receives ignore bits 0–61 but not bit 62,
 * so they can never swallow a body. */
#define TAG_BODY (1ull << 62)
#define TAG_WILD_IGNORE (TAG_BODY - 1)
static inline uint64_t body_tag(uint32_t src, uint32_t seq)
{
    return TAG_BODY | (uint64_t)src << 32 | seq;
}

enum op_kind { OP_SEND = 1, OP_RECV, OP_BODY };

/* One posted libfabric operation; the context must come first (FI_CONTEXT2). */
struct op {
    struct fi_context2 ctx;
    int kind;
    int in_use;
    struct sreq *req;      /* OP_SEND */
    struct sfb__buf *rbuf; /* OP_RECV: receive buffer; OP_BODY: the frame */
    size_t want;           /* OP_BODY: body bytes expected */
    struct op *next;
};

/* A queued or in-flight frame send. */
struct sreq {
    /* Adjacent on purpose: prefix ++ hdr go as one iovec. */
    uint8_t prefix[THDR_LEN];
    uint8_t hdr[SFB__TRANSPORT_HDR_MAX];
    size_t hdr_len;
    struct sfb__buf *buf;
    size_t off, len, total;
    uint32_t dst, seq;
    unsigned outstanding; /* posted operations not yet completed */
    int step;             /* 0 nothing posted, 1 announce posted, 2 all posted */
    int started, failed, in_use;
    struct sreq *next;
};

struct slab {
    struct slab *next;
    void *pad; /* keeps the ops that follow 16-byte aligned */
};

#define OPS_PER_SLAB 256

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
    uint32_t *seq;          /* next frame sequence per destination */
    size_t chunk;           /* receive buffer size */
    size_t max_msg;         /* provider's max_msg_size */
    double last_work;

    /* loop-thread state */
    struct op *free_ops;
    struct slab *op_slabs;
    unsigned ops_out, max_ops; /* posted operations; the CQ holds max_ops */
    struct sreq *pend_head, *pend_tail; /* sends not fully posted */
    unsigned rx_deficit;                /* wildcard receives to repost */
    /* Announces of big frames whose body receive is not posted yet (no
     * free op, -FI_EAGAIN, or too many big frames in flight), oldest first;
     * each is the announce's receive buffer. */
    struct sfb__buf *ann_head, *ann_tail;
    unsigned bodies; /* body receives posted */

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

    struct sfb__pool pool;
    struct sfb__transport_stats stats;
};

static inline void stat_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/* Counts the error and tells the log and settings.on_error. Loop thread. */
void sfb__tp_report(struct sfb__transport *t, int peer, int code, const char *what,
                    const char *detail);

/* A free operation record, or NULL when max_ops are outstanding: every
 * posted operation owns one CQ slot, and providers may drop completions that
 * find the CQ full (libfabric 1.17 shm does, measured). Loop thread. */
struct op *sfb__tp_op_get(struct sfb__transport *t);
void sfb__tp_op_put(struct sfb__transport *t, struct op *o);
/* Releases the buffers posted operations still hold (close). */
void sfb__tp_ops_release(struct sfb__transport *t);
/* Frees the op slabs (close, after the endpoint). */
void sfb__tp_ops_free(struct sfb__transport *t);

/* An absolute CLOCK_MONOTONIC deadline timeout_s from now (condvar waits). */
struct timespec;
void sfb__tp_deadline(struct timespec *ts, double timeout_s);

void sfb__tp_thdr_put(uint8_t *p, uint32_t rank, uint32_t kind, uint32_t seq, uint64_t x);
/* Decodes a transport header: sender rank, kind, sequence, x. */
void sfb__tp_thdr_get(const uint8_t *p, uint32_t *rank, uint32_t *kind, uint32_t *seq, uint64_t *x);

#endif
