/* libfabric transport, internals shared by its files. Only the files of src/transport
 * (and this header) include <rdma/fabric.h>.
 *
 * The files, each calling only those listed above it:
 *
 *   fi_errors.c       libfabric's error codes named for sfb_strerror
 *   transport_stuck.c fabric calls that never return (FAB(): a dead peer's
 *                     lock in shm), abandoning a stuck transport (t->stuck)
 *   transport_pool.c  buffer pool (size classes, registration shipped to the
 *                     loop thread, sfb__buf_ref/put) and the op and
 *                     reassembly-record free lists (t->bufs)
 *   transport_peer.c  the peers (t->peers): their address blobs, AV
 *                     insertion at first use, the doorbell ring, error
 *                     reporting
 *   transport_shm.c   shm region names, removal of dead processes' regions,
 *                     a close's wait for first contacts
 *   transport_tx.c    send requests, posting chunks, sfb__transport_send,
 *                     sfb__transport_flush
 *   transport_rx.c    wildcard receives, reassembly, delivery to the inbox
 *   transport.c       settings defaults, CQ reading and completion dispatch,
 *                     the progress poller, a caller's progress pass
 *   transport_wait.c  sfb__transport_recv: the wait, driving progress in the
 *                     caller's thread while it can
 *   transport_setup.c open/close (fabric, domain, endpoints, CQ), the
 *                     progress policy, this rank's name
 *
 * Threads: every fi_* call on the data path runs in the loop (src/loop/loop.h):
 * in the loop thread (the poller's progress function and loop calls) or in
 * a thread that entered it, holding the loop's progress lock (a send posted
 * by its caller, a wait that drives progress: transport.c, "Who drives
 * progress"). Other threads only touch the mutex-protected send queue,
 * inbox and buffer pool. Buffer registration (FI_MR_LOCAL providers) is
 * shipped to the loop with sfb__loop_call.
 *
 * Message protocol (docs/wire.md, "Transport framing"): every fabric message
 * is at most chunk_size bytes, starts with a 16-byte transport header (sender
 * rank and kind, per-destination frame sequence, a 64-bit field), is sent
 * with tag 0, and lands in a pooled receive buffer posted with a
 * match-everything mask. Varying tags and directed receives are avoided on
 * purpose: libfabric 1.17's shm lost tagged messages whose tags varied
 * (measured here).
 *
 * A frame that does not fit one message goes one of two ways:
 *  - RMA (the provider offers FI_RMA reads: shm, tcp;ofi_rxm, verbs, ...):
 *    the sender registers its pooled buffer for remote reads (once, cached
 *    on the buffer) and sends a K_RMA announce (total length, address, key,
 *    frame header length, cookie = its request index, then the frame
 *    header). The receiver takes a pooled buffer of the frame's size,
 *    fi_read()s the body into it (one copy: CMA on shm) and answers K_ACK
 *    (cookie, status). The sender holds its buffer reference until the ACK,
 *    or fails the send when the receiver has been silent for ack_timeout_s
 *    (a slow link or a busy receiver delays the ACK as long as it must).
 *  - chunked (no RMA reads, or SFB_TRANSPORT_RMA=0): K_FIRST with the
 *    total length, then K_PIECEs, reassembled here by (sender, sequence,
 *    index), which tolerates out-of-order completions.
 *
 * Every posted operation holds one CQ slot (max_ops outstanding, CQ sized to
 * match) so the CQ can never overrun and drop completions.
 */
#ifndef SFB_SRC_TRANSPORT_IMPL_H
#define SFB_SRC_TRANSPORT_IMPL_H

#include "src/transport/transport.h"

#include <pthread.h>
#include <rdma/fabric.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define THDR_LEN 16
/* The longest endpoint name this transport takes from a peer. */
#define SFB__TP_NAME_MAX 1024
enum { K_WHOLE = 0, K_FIRST = 1, K_PIECE = 2, K_RMA = 3, K_ACK = 4 };
/* RMA announce after the transport header: u64 address, u64 key, u32 frame
 * header length, u32 cookie (sender's request index); then the header. */
#define ANN_LEN 24
/* Buffer size classes (transport_pool.c): 2^c bytes up to FINE_FROM,
 * then FINE_STEPS a doubling, up to 2^47 bytes */
#define MIN_CLASS 12 /* 4 KiB */
#define FINE_FROM 20 /* 1 MiB */
#define FINE_STEPS 8
#define NCLASS (FINE_FROM + (47 - FINE_FROM) * FINE_STEPS + 1)

enum op_kind { OP_SEND = 1, OP_RECV, OP_READ, OP_ACK };
/* The shared-memory region libfabric 1.17's shm provider maps per endpoint
 * with its default queue sizes (the sfb_* files in /dev/shm of a job);
 * its fi_getinfo offers nothing unless /dev/shm has room for one per
 * online CPU (smr_shm_space_check). */
#define SHM_REGION_MIB 16u /* transport_setup.c, transport_peer.c */

/* RMA reads in flight at once on the receiving side (their bytes are
 * bounded by settings.read_window): bounds the memory a burst of announces
 * takes and the transfers the provider juggles (tcp;ofi_rxm slowed 8x with
 * 200 x 16 MiB reads posted at once). */
#define MAX_READS 8
/* Pieces held while their first chunk is still missing (all frames). */
#define STASH_MAX 4096
/* How long the poller keeps spinning without progress while operations are
 * in flight (see progress()). */
#define INFLIGHT_SPIN_S 0.05
/* Block mode with a doorbell: the longest sleep (a ring that never comes,
 * from another network namespace, say, costs at most this). */
#define BELL_SLEEP_MAX_S 0.05

/* transport_peer.c. Block mode: peer `p` is to be rung at the end of this
 * progress pass if it sleeps (always: whether or not; its queue was full). */
void sfb__tp_ring(struct sfb__transport *t, uint32_t p, int always);
/* ... and what posting an operation to `p` returned (rc): an operation
 * accepted makes first contact with p; -FI_EAGAIN before any was accepted
 * may mean a connection request is out (sfb__tp_shm_settle). */
enum { CONTACT_NONE, CONTACT_ASKED, CONTACT_MADE };
void sfb__tp_contact(struct sfb__transport *t, uint32_t p, ssize_t rc);

/* One posted libfabric operation; the context must come first (FI_CONTEXT2). */
struct op {
    struct fi_context2 ctx;
    uint8_t thdr[THDR_LEN + ANN_LEN]; /* transport header (+ RMA announce) */
    void *desc;             /* of thdr (registered slab), or NULL */
    uint32_t peer, seq, cookie; /* OP_READ / OP_ACK */
    double started;             /* OP_READ: when posted */
    struct op *qnext;       /* ACKs waiting for -FI_EAGAIN to clear */
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
    int rma, awaiting_ack; /* sent by RMA read; ACK still due */
    double announced; /* when the RMA announce was posted */
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

/* The transport's state by concern: each part is owned by the file of its
 * concern (transport_peer.c, transport_pool.c, transport_stuck.c); the rest
 * belongs to set-up (transport_setup.c) and the data path (transport.c,
 * transport_rx.c, transport_tx.c). */

/* The peers (transport_peer.c; set once by sfb__transport_set_peers). */
struct tp_peers {
    _Atomic uint32_t world; /* written once by set_peers, read by the loop */
    uint32_t *seq; /* next frame sequence per destination */
    fi_addr_t *addr;  /* per rank r: [2r] where to send (its rx_ep), [2r+1] where to
                       * read from (its ep); FI_ADDR_NOTAVAIL until first used */
    uint8_t *names;   /* the peers' address blobs, rank r's at [name_off[r], name_off[r+1]):
                       * a count (1 or 2), then that many endpoint names of one length,
                       * the receiving endpoint's first */
    size_t *name_off;
    double *heard; /* loop thread: when anything last came from each rank */
    uint8_t *contact; /* loop thread: CONTACT_* per rank (sfb__tp_contact) */
};

/* The buffer pool (any thread, under pool_mu) and the op and reassembly
 * records' free lists (loop thread): transport_pool.c. */
struct tp_pool {
    pthread_mutex_t pool_mu;
    struct sfb__buf *pool[NCLASS];
    _Atomic long bufs_live;
    struct op *free_ops;
    struct slab *op_slabs, *asm_slabs;
    struct asm_rec *free_asm;
};

/* A libfabric call that never returns (transport_stuck.c): fab_seq is odd
 * while the loop thread is inside one (fab_n is its private copy);
 * FAB_ABANDONED once the watchdog gave the thread up. */
struct tp_stuck {
    _Atomic uint64_t fab_seq;
    uint64_t fab_n;
    int debug_stall; /* SFB_DEBUG_STALL_SEND_TO_DEAD: hang like a held lock would */
    _Atomic int in_caller; /* the thread given up had entered the loop (a visitor) */
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
    struct fid_ep *ep;    /* sends, ACKs; answers peers' reads of its frames */
    struct fid_ep *rx_ep; /* receives and reads: ep itself unless split */
    int split;            /* two endpoints, one connection per direction (tcp) */
    struct fid_mr *slab_mr;
    void *slab_desc;
    int mr_local;
    int rma;           /* provider offers FI_RMA reads: big frames go by RMA */
    int cq_data;       /* a WHOLE message's header goes as remote CQ data (transport_tx.c) */
    int mr_virt_addr;  /* FI_MR_VIRT_ADDR: remote addresses are pointers */
    double next_ack_check;
    double ack_look, ack_excused; /* the last ACK check, and the last one that ran late */
    unsigned acks_due; /* RMA sends waiting for their ACK (loop thread) */
    int wait_fd;
    int block;               /* never spin (progress policy, see progress()) */
    struct sfb__bell *bell;  /* block mode without a CQ wait fd (shm) */
    uint64_t mr_key;
    char prov_name[64];
    char shm_name[128]; /* shm: our region's name in /dev/shm, else "" */
    uint8_t *name;
    size_t name_len;
    size_t chunk;
    double last_work; /* the loop thread's last pass that did work */
    double pass_now;  /* when the current pass began (what it hears is heard then) */
    int bell_armed; /* drain the doorbell before the next pass (sfb__tp_progress) */

    /* Progress in the caller (transport.c, "Who drives progress"): state in
     * the loop (the loop thread's or a visitor's, under the loop's lock). */
    int caller_progress; /* callers post and drive (set up: choose_progress) */
    int in_pass;       /* a progress pass runs: a send made in it only queues */
    int slept;         /* the loop thread's last pass chose to sleep */
    _Atomic int driving;     /* a caller is driving progress now: the loop thread naps */
    _Atomic int sub_pending; /* sends submitted, not yet moved to pend (sub_head) */
    _Atomic int handover;    /* a caller stopped driving while still waiting: the loop
                              * thread takes over as if it had just done the work */

    /* loop-thread state */
    unsigned ops_out, max_ops; /* posted operations; the CQ holds max_ops */
    struct asm_rec *active; /* frames being reassembled */
    unsigned stashed;
    struct sreq *pend_head, *pend_tail;    /* sends not fully posted */
    unsigned rx_deficit;                   /* wildcard receives to repost */
    struct sfb__buf *rd_head, *rd_tail;    /* RMA announces not yet read */
    struct op *reads[MAX_READS];           /* RMA reads in flight (slots) */
    struct op *ack_head, *ack_tail;        /* ACKs to (re)post */
    int contacts_closed; /* closing: no first contact is started (sfb__tp_shm_settle) */

    /* shared state, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv_space, cv_flush;
    struct sreq *sreqs; /* max_sends of them */
    struct sreq *free_sreq;
    struct sreq *sub_head, *sub_tail; /* submitted, not yet seen by the loop */
    unsigned in_use;
    struct sfb__frame *inbox; /* ring of inbox_cap */
    unsigned in_head, in_count;
    uint64_t in_units;   /* units of the frames in the inbox */
    uint32_t want_units; /* the waiting receiver's threshold (0: none waits with one) */
    int in_waiting;      /* a receiver sleeps on in_seq */
    _Atomic unsigned in_seq; /* bumped by every delivery: the receiver's futex word */
    struct sfb__buf *ovf_head, *ovf_tail; /* frames beyond inbox_cap */
    _Atomic int ovf_nonempty;
    _Atomic size_t inbox_bytes; /* frames delivered, not yet taken by recv */
    int closing;


    struct sfb__transport_stats stats;

    struct tp_peers peers;
    struct tp_pool bufs;
    struct tp_stuck stuck;
};

static inline void stat_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/* transport_stuck.c. A libfabric call that can wait on a lock in a peer's
 * shared memory (shm 1.17 takes the receiver's region spinlock to send, its
 * own to progress): a process killed while holding one leaves every caller
 * spinning for good. FAB() marks such a call for the watchdog (comm_watch.c):
 * if it gives the thread up while inside, the call parks the thread for
 * good should it ever return, instead of running on into freed memory. */
#define FAB_ABANDONED UINT64_MAX
static inline void sfb__tp_fab_enter(struct sfb__transport *t)
{
    atomic_store_explicit(&t->stuck.fab_seq, ++t->stuck.fab_n, memory_order_release);
}
void sfb__tp_fab_park(struct sfb__transport *t);
static inline ssize_t sfb__tp_fab_leave(struct sfb__transport *t, ssize_t rc)
{
    uint64_t inside = t->stuck.fab_n;
    if (!atomic_compare_exchange_strong_explicit(&t->stuck.fab_seq, &inside, ++t->stuck.fab_n,
                                                 memory_order_acq_rel, memory_order_acquire))
        sfb__tp_fab_park(t);
    return rc;
}
#define FAB(t, call) (sfb__tp_fab_enter(t), sfb__tp_fab_leave((t), (call)))
/* Whether a send, read or ACK to `peer` must not be posted: its process is
 * gone (settings.peer_gone), so its region's lock may be held for good. */
int sfb__tp_peer_gone(struct sfb__transport *t, uint32_t peer);
/* Whether an operation to `p` must wait (stays queued, as on -FI_EAGAIN):
 * it would be a first contact after the close's settle, which no peer could
 * take safely (sfb__tp_contact, transport_shm.c). */
static inline int sfb__tp_contact_closed(const struct sfb__transport *t, uint32_t p)
{
    return t->contacts_closed && t->peers.contact[p] == CONTACT_NONE;
}
/* Close of an abandoned transport: kept allocated and reachable. */
void sfb__tp_keep_abandoned(struct sfb__transport *t);

/* transport_peer.c: the world size, 0 until sfb__transport_set_peers
 * (any thread; the peers' arrays are valid once it is not 0). */
uint32_t sfb__tp_world(const struct sfb__transport *t);
/* (loop thread) rank p's fi_addr, inserted into the AV at first use;
 * FI_ADDR_NOTAVAIL when p is outside the world (none before set_peers), or
 * (reported) when the insert fails. */
fi_addr_t sfb__tp_addr(struct sfb__transport *t, uint32_t p);
/* ... and the address to read rank p's RMA frames from (its sending endpoint). */
fi_addr_t sfb__tp_read_addr(struct sfb__transport *t, uint32_t p);
/* Rank p's endpoint name `which` (0: where it receives, 1: where it answers
 * reads; the same when it runs one endpoint) in its address blob, *len
 * bytes (p < world, after set_peers). */
const uint8_t *sfb__tp_peer_name(const struct sfb__transport *t, uint32_t p, unsigned which,
                                 size_t *len);

/* transport_shm.c (open): sweeps /dev/shm of our dead processes' regions
 * (unless skip_shm_sweep) and names this endpoint's region
 * "sfb_<random>_<rank>_<pid>" (t->shm_name). */
int sfb__tp_shm_name(struct sfb__transport *t);
/* ... (open): the signal dispositions before libfabric's open
 * (sfb__tp_shm_signals_opened takes them). */
struct sfb__tp_sigs {
    struct sigaction act[16];
    int have[16];
};
void sfb__tp_shm_signals_before(struct sfb__tp_sigs *s);
/* ... (after the open): libfabric's shm provider installed handlers that
 * unlink this process's regions; a child forked from now on gets back the
 * dispositions they replaced (pthread_atfork), so that a signal ending it
 * (multiprocessing.Pool.terminate's SIGTERM) leaves its parent's regions. */
void sfb__tp_shm_signals_opened(const struct sfb__tp_sigs *before);
/* ... (close, before the endpoint's): waits, up to FIRST_CONTACT_S, until
 * every peer this endpoint asked for a first contact has taken the request,
 * is gone, or has closed its own endpoint; shm only. */
void sfb__tp_shm_settle(struct sfb__transport *t);

/* transport_peer.c: an error, counted and handed to on_error naming the
 * peer (-1: none), which reports it (logged here only at debug level;
 * at error level when there is no on_error). */
void sfb__tp_report(struct sfb__transport *t, int peer, int code, const char *what, const char *detail);
/* ... its text: "WHAT (peer rank PEER, provider PROV): CODE'S TEXT: DETAIL",
 * without the peer when it is -1, without the detail when it is empty or
 * the code's text again. */
void sfb__tp_error_text(char *buf, size_t n, int peer, const char *prov, int code,
                        const char *what, const char *detail);
/* transport.c: the loop's poller (progress everything, then say how long
 * the loop may sleep), and transport_tx.c: its async hook (submitted sends
 * to the pending list); transport_setup.c registers them. */
int sfb__tp_progress(void *arg);
void sfb__tp_on_async(void *arg);
/* transport.c, a visitor: one progress pass in the caller's thread.
 * Returns 1 when it did work; *left: sends are left for later (the loop
 * thread must retry them); *in_flight: as sfb__tp_in_flight after it. */
int sfb__tp_drive(struct sfb__transport *t, double now, int *left, int *in_flight);
/* transport.c, in the loop: operations are in flight whose completion
 * is due soon (polling on for it beats sleeping). */
int sfb__tp_in_flight(const struct sfb__transport *t);

/* transport_pool.c (loop thread, except buffers) */
/* A class's buffer size, and the class of the smallest buffer ≥ size (any
 * thread) */
size_t sfb__tp_class_bytes(unsigned c);
unsigned sfb__tp_size_class(size_t size);
void sfb__tp_buf_free(struct sfb__buf *b);
struct op *sfb__tp_op_get(struct sfb__transport *t);
void sfb__tp_op_put(struct sfb__transport *t, struct op *o);
struct asm_rec *sfb__tp_asm_get(struct sfb__transport *t);
void sfb__tp_asm_put(struct sfb__transport *t, struct asm_rec *a);

/* transport_pool.c: registers b for remote reads (loop thread), caches it */
int sfb__tp_buf_rma(struct sfb__transport *t, struct sfb__buf *b);

/* transport_rx.c (loop thread) */
int sfb__tp_post_wildcard(struct sfb__transport *t);
int sfb__tp_post_reads(struct sfb__transport *t);
/* The RMA reads posted (of MAX_READS) and, bytes non-NULL, their bytes. */
unsigned sfb__tp_reads_in_flight(const struct sfb__transport *t, size_t *bytes);
/* The announce to read next among those waiting (head, linked by next): the
 * oldest from a peer with the fewest of reads[MAX_READS] in flight; *prev
 * its predecessor (NULL: the head). In announce order alone one peer's
 * burst took every read slot while the others' frames waited, and this
 * rank's link carried a share of one peer's uplink at a time (FMS: every
 * rank pushes its chunks to every owner at once; 64 MiB sums on 4 emulated
 * hosts at 1 Gbit/s ran at 0.71 x gloo's ring, 0.94 x this way). */
struct sfb__buf *sfb__tp_fairest(struct sfb__buf *head, struct op *const *reads,
                                struct sfb__buf **prev);
void sfb__tp_read_done(struct sfb__transport *t, struct op *o, int err);
struct op *sfb__tp_read_oldest(struct sfb__transport *t);
void sfb__tp_on_message(struct sfb__transport *t, struct sfb__buf *b, size_t len);
/* A WHOLE message whose transport header came as remote CQ data (`data`:
 * its first 8 bytes; transport_tx.c): the frame is all of the message. */
void sfb__tp_on_whole(struct sfb__transport *t, struct sfb__buf *b, size_t len, uint64_t data);
int sfb__tp_post_recvs(struct sfb__transport *t);

/* transport_tx.c (loop thread) */
void sfb__tp_sreq_finish(struct sfb__transport *t, struct sreq *r);
int sfb__tp_post_sends(struct sfb__transport *t);
/* In the loop, outside a pass: posts the submitted sends as a pass would
 * (a send made meanwhile queues and goes in the next round); 1 when sends
 * are left (the queue is full). sfb__tp_post_now: the same for a send made
 * outside a pass; 1 when the loop thread must be woken: sends are left for
 * it to retry, or it sleeps with operations now in flight. */
int sfb__tp_post_all(struct sfb__transport *t);
int sfb__tp_post_now(struct sfb__transport *t);
void sfb__tp_on_ack(struct sfb__transport *t, uint32_t src, uint32_t seq, uint64_t x);
void sfb__tp_check_acks(struct sfb__transport *t, double now);

#endif
