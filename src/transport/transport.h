/* Frame transport over libfabric (FI_EP_RDM, FI_TAGGED, FI_AV_TABLE).
 *
 * The transport moves opaque byte frames (normally wire frames, src/wire/wire.h)
 * between ranks. Every libfabric call happens in the loop thread
 * (src/loop/loop.h); other threads talk to it through a bounded send queue and a
 * bounded inbox. Usage:
 *
 *     sfb__transport_default_settings(&s); s.rank = r; ...
 *     sfb__transport_open(&t, &s, loop);      // endpoint up, receives posted
 *     sfb__transport_name(t, &name, &len);    // opaque blob for the bootstrap
 *     ... bootstrap allgathers the P blobs in rank order ...
 *     sfb__transport_set_peers(t, names, lens, P);   // kept; AV entries at first use
 *     sfb__transport_send(t, dst, hdr, hlen, buf, off, len, timeout);
 *     sfb__transport_recv(t, &frame, timeout); ... sfb__buf_put(frame.buf);
 *     sfb__transport_flush(t, timeout); sfb__transport_close(&t);
 *
 * Frames of any size are carried: a frame up to `chunk_size` bytes is one
 * message (header and payload as one gather send); a larger one goes as a
 * first chunk (with a 16-byte prefix giving the total length) and pieces of
 * chunk_size, reassembled by the receiver. Frames from one sender may be
 * delivered out of order (a big frame completes after later small ones); the
 * layers above order by the clocks in the wire header.
 *
 * Errors: functions return 0 or a negative code (-FI_E* pass through).
 */
#ifndef SFB_SRC_TRANSPORT_H
#define SFB_SRC_TRANSPORT_H

#include "src/transport/frame.h"

#include <stddef.h>
#include <stdint.h>

struct sfb__loop;
struct sfb__transport;

/* Largest header that sfb__transport_send() copies inline. */
#define SFB__TRANSPORT_HDR_MAX 128
/* Largest world the tag layout supports (24-bit ranks). */
#define SFB__TRANSPORT_MAX_RANKS (1u << 24)

struct sfb__transport_settings {
    /* libfabric provider name ("shm", "tcp", "verbs", "efa", ...). NULL →
     * env FI_PROVIDER → "shm" if all_local else "tcp". */
    const char *provider;
    int all_local;         /* every rank runs on this host */
    int skip_shm_sweep;    /* shm: another rank of this host removes dead
                              processes' regions (one sweep of /dev/shm per
                              host, not one per rank: O(P), not O(P²)) */
    uint32_t rank;         /* this endpoint's rank */
    uint32_t world;        /* ranks in the job (for the doorbells; 0: none) */
    uint64_t job_key;      /* names the doorbells (src/loop/bell.h) */
    enum sfb__progress progress;
    uint32_t local_ranks;  /* ranks on this host, this one included (auto policy) */
    unsigned cpus;         /* CPUs those ranks share (0: this thread's allowed set) */
    /* Largest fabric message and size of each receive buffer (256 KiB,
     * capped by the provider's max_msg_size). Must be equal on all ranks. */
    size_t chunk_size;
    size_t max_frame;      /* largest frame accepted from a peer (1 GiB) */
    unsigned rx_depth;     /* receive buffers posted for new frames (32) */
    unsigned inbox_cap;    /* frames waiting for sfb__transport_recv (1024) */
    unsigned max_sends;    /* frames queued or in flight (1024) */
    double poll_interval_s; /* sleep bound when polling without a wait fd (0.5 ms) */
    double spin_s;         /* keep polling this long after activity (2 ms) */
    /* An RMA-read frame fails when its receiver has sent nothing at all for
     * this long since the announce (10 s); a slow but live one keeps it. */
    double ack_timeout_s;
    /* Receiving side: bytes of RMA reads in flight plus frames delivered but
     * not yet taken, beyond which further big frames wait unread (64 MiB). */
    size_t read_window;
    /* Loop thread: called for every received frame before the inbox. Return
     * 1 to take it (the callee then owns frame->buf's reference), 0 to let
     * it go to the inbox. May call sfb__transport_send(…, 0.0). NULL: inbox. */
    int (*on_frame)(void *user, struct sfb__frame *frame);
    /* Loop thread: a fabric error (peer = rank or -1), with the provider's
     * error string. The transport keeps running; the caller decides. */
    void (*on_error)(void *user, int peer, int code, const char *msg);
    /* Loop thread: a queued send to `dst` has completed (or failed) and its
     * slice of `buf` (NULL for a header-only frame) is about to be released.
     * Lets a relay know when an out-link is free again. May call
     * sfb__transport_send(…, 0.0). NULL: not called. */
    void (*on_sent)(void *user, uint32_t dst, const struct sfb__buf *buf, int failed);
    /* Loop thread: a pass over the completion queue has ended (it completed
     * at least one operation); the sends its on_frame and on_sent calls
     * queued are posted next. NULL: not called. */
    void (*on_pass)(void *user);
    /* Loop thread, before every send, read or ACK to `peer`: nonzero when
     * its process is gone (same-host peers), and the operation is dropped
     * instead of posted (shm: a process killed inside the provider can
     * leave a lock in its region held, and a send to it would spin for
     * good). The send completes as failed. NULL: never asked. */
    int (*peer_gone)(void *user, uint32_t peer);
    void *user;
};

struct sfb__transport_stats {
    _Atomic uint64_t frames_sent, bytes_sent, frames_recv, bytes_recv;
    _Atomic uint64_t eagain, errors, dropped;
    /* Progress passes the loop made (sfb__tp_progress): an idle transport
     * makes few, a spinning one tens of thousands a second. */
    _Atomic uint64_t passes;
};

/* Fills defaults (see field comments). Any thread. */
void sfb__transport_default_settings(struct sfb__transport_settings *s);

/* Opens the fabric, domain, CQ, AV and an enabled endpoint, posts the receive
 * buffers and attaches a poller to `loop` (which may or may not be running
 * yet; it must outlive the transport). Any thread except the loop thread.
 * Returns 0; -FI_ENODATA if the provider is not available; another -FI_E* or
 * -ENOMEM. On failure *out is NULL and everything is released. */
/* libfabric's one-time initialisation (fi_ini, on the first fi_getinfo),
 * for a launcher to do once before it forks its workers. Any thread. */
void sfb__transport_preinit(void);

int sfb__transport_open(struct sfb__transport **out, const struct sfb__transport_settings *s,
                        struct sfb__loop *loop);

/* The endpoint's address blob (fi_getname), valid until close. Any thread. */
void sfb__transport_name(const struct sfb__transport *t, const void **name, size_t *len);

/* Name of the provider actually used, e.g. "tcp;ofi_rxm". */
const char *sfb__transport_provider(const struct sfb__transport *t);

/* The largest frame (header and payload) that goes to a peer as one copy
 * into its queue, completing at once, where a larger one costs a
 * rendezvous through the kernel: shm's inject size less the transport's
 * header (shm 1.17: 4096 − 16; above it the receiver reads the sender's
 * memory with process_vm_readv, a system call and a page-table walk, and
 * the send completes only then). 0 for other providers (tcp pays per
 * message, so bigger messages are cheaper). */
size_t sfb__transport_copy_max(const struct sfb__transport *t);

/* Takes the P peers' address blobs, in rank order (this rank's own
 * included). Call once before any send; blobs are copied. A peer goes into
 * the AV when this rank first sends to, reads from or ACKs it (shm maps a
 * peer's region at insert and unmaps every mapped one at close); a failed
 * insert is reported then, naming the rank. Returns 0, -EINVAL (world too
 * large, rank out of range, an empty or > 1 KiB blob) or -ENOMEM. Any
 * thread except the loop thread. */
int sfb__transport_set_peers(struct sfb__transport *t, const void *const *names,
                             const size_t *lens, uint32_t world);

/* Every rank has opened its transport (after the start-up barrier): names
 * that only served to find each other are removed. Any thread. */
void sfb__transport_started(struct sfb__transport *t);

/* A buffer of at least `size` bytes from the pool, with one reference.
 * Returns 0 or -ENOMEM (or the registration error). Any thread. */
int sfb__transport_buf_get(struct sfb__transport *t, size_t size, struct sfb__buf **out);

/* Frees every buffer in the pool (those no one holds; a buffer held now
 * returns to the pool when put, as always), so that what a finished phase
 * used (an engine closed by a replan) leaves the process's memory instead
 * of waiting for a request of its size. Runs in the loop thread; returns 0
 * or the loop's error (stopped: nothing freed). Not from the loop thread. */
int sfb__transport_trim(struct sfb__transport *t);

/* Queues the frame hdr[0..hdr_len) ++ buf->data[off..off+len) for `dst`.
 * hdr (≤ SFB__TRANSPORT_HDR_MAX bytes, may be NULL with hdr_len 0) is copied;
 * buf (may be NULL when len is 0) gains a reference that the transport drops
 * when the send completes, so one buffer can go to many peers and slices of
 * a received buffer can be relayed byte-for-byte. Waits up to timeout_s for
 * queue space (0: never waits — the loop thread must pass 0).
 * Returns 0, -EAGAIN (queue full, timeout 0), -ETIMEDOUT, -EINVAL (bad rank,
 * peers not set, header too long, slice outside buf), -ESHUTDOWN. Any thread. */
int sfb__transport_send(struct sfb__transport *t, uint32_t dst, const void *hdr, size_t hdr_len,
                        struct sfb__buf *buf, size_t off, size_t len, double timeout_s);

/* Takes the oldest received frame, waiting up to timeout_s (0: no wait).
 * Returns 0, -EAGAIN (empty, timeout 0), -ETIMEDOUT. Any thread except the
 * loop thread; normally the compute thread. */
int sfb__transport_recv(struct sfb__transport *t, struct sfb__frame *out, double timeout_s);
/* As sfb__transport_recv, but while waiting, sleeps until frames carrying
 * at least `units` updates (frame.units) are in the inbox, not at the
 * first: a caller that knows it cannot go on with fewer (it lacks updates
 * from that many peers) is woken once, not per frame. At the timeout it
 * takes what is there. units 0 or 1: as sfb__transport_recv. */
int sfb__transport_recv_units(struct sfb__transport *t, struct sfb__frame *out, double timeout_s,
                              uint32_t units);

/* Waits until every queued send has completed (or failed). Returns 0 or
 * -ETIMEDOUT. Not from the loop thread. */
int sfb__transport_flush(struct sfb__transport *t, double timeout_s);

/* Counters (live; read with atomic loads). */
const struct sfb__transport_stats *sfb__transport_stats(const struct sfb__transport *t);

/* A libfabric call that never returns (a lock held by a dead process):
 * sfb__transport_fabric_seq() is odd while a thread in the loop (the loop
 * thread, or a caller that drives progress: src/loop/loop.h) is inside a
 * call that may wait on a peer, and changes with every such call, so a
 * watchdog that sees the same odd value for seconds knows the thread is
 * stuck there. sfb__transport_abandon(t, seq) gives the thread up if
 * it is still inside that call: returns 1, the thread parks for good should
 * the call ever return, the loop counts as stopped (sfb__loop_call fails at
 * once), and sfb__transport_close() only releases what the thread cannot
 * touch (see there). Returns 0 when the call has returned. Any thread.
 * sfb__transport_stuck_in_caller(): the thread given up was not the loop
 * thread but one that had entered the loop (the caller of a send or a
 * wait, which will never return to its own caller). */
uint64_t sfb__transport_fabric_seq(const struct sfb__transport *t);
int sfb__transport_abandon(struct sfb__transport *t, uint64_t seq);
int sfb__transport_abandoned(const struct sfb__transport *t);
int sfb__transport_stuck_in_caller(const struct sfb__transport *t);

/* Detaches from the loop, closes the fabric objects in reverse order and
 * frees every buffer the transport still holds. Queued sends are dropped
 * (call flush first). Buffers handed out must have been put back before
 * close. Sets *t to NULL; NULL is a no-op. Not from the loop thread.
 * An abandoned transport, its loop and the fabric objects stay allocated
 * (the parked thread holds them; reachable, so no leak is reported). */
void sfb__transport_close(struct sfb__transport **t);

#endif
