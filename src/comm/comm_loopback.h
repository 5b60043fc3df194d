/* An in-process loopback comm: `world` ranks in one process, each with its
 * own struct sfb__comm behind the same data path the engines use over
 * libfabric (struct sfb__comm_ops, src/comm/comm.h), so relay, the SFB and
 * FMS engines and the SSP wait run in unit tests without processes.
 *
 * Deterministic: every rank's function runs on its own thread, but only one
 * thread runs at a time (it holds the loopback's lock) and the turn passes
 * only where a rank blocks, in a fixed order. A rank keeps the turn until it
 * waits (a receive with a timeout and an empty inbox, a barrier,
 * sfb__loopback_yield, or its function returns). Then the network is
 * pumped: every frame in flight is delivered in send order (the receiver's
 * comm validates it and offers it to its data hook, which may send more;
 * then the sender's send-completion hook runs), and the turn goes to the
 * next rank after this one (rank order, wrapping) that can go on. When none
 * can, every rank waiting in a receive times out (-ETIMEDOUT); after 200
 * such rounds without a frame sent, or when ranks wait in a barrier that a
 * finished rank will never enter, every rank's comm fails with -SFB_EPEER
 * and a reason (so an engine's wait returns instead of hanging). The same
 * inputs give the same interleaving, the same frames and the same bytes on
 * every run.
 *
 * Not carried: heartbeats, BYE and ABORT (sfb__comm_send_control,
 * sfb__comm_finish and sfb__comm_abort do nothing on a loopback comm). */
#ifndef SFB_SRC_COMM_LOOPBACK_H
#define SFB_SRC_COMM_LOOPBACK_H

#include "src/comm/comm.h"

#include <stddef.h>
#include <stdint.h>

struct sfb__loopback;

/* Per rank: frames this rank sent and received, with their bytes (header
 * and payload, as handed to send). */
struct sfb__loopback_stats {
    uint64_t sent_msgs, sent_bytes, recv_msgs, recv_bytes;
};

/* Opens `world` (≥ 2) ranks; s gives the shapes, max_s and hooks (NULL:
 * defaults). Returns 0, -EINVAL or -ENOMEM; on failure *out is NULL. */
int sfb__loopback_open(struct sfb__loopback **out, uint32_t world,
                       const struct sfb__comm_settings *s);
/* Rank r's comm, owned by the loopback (valid until close). */
struct sfb__comm *sfb__loopback_comm(struct sfb__loopback *lb, uint32_t r);

/* Runs fn(comm of rank r, r, arg) for every rank, scheduled as above, and
 * returns when all have returned: 0 when every fn returned 0, else the
 * first non-zero result in rank order, with that rank's sfb_last_error()
 * (prefixed "rank R: ") as the caller's. rets (NULL or world entries) gets
 * every rank's result. Call from outside the ranks, one run at a time; the
 * ranks' comms keep their state between runs. */
int sfb__loopback_run(struct sfb__loopback *lb,
                      int (*fn)(struct sfb__comm *c, uint32_t r, void *arg), void *arg, int *rets);

/* From inside fn: lets the other ranks run (and the network deliver) before
 * this rank goes on; models a slow rank. */
void sfb__loopback_yield(struct sfb__comm *c);

/* Calls tap(user, src, dst, frame, len) for every frame as it is delivered,
 * before the receiver sees it (NULL: none); the tap may rewrite the bytes
 * (dst's copy: a hostile or broken peer). Outside a run. */
void sfb__loopback_set_tap(struct sfb__loopback *lb,
                           void (*tap)(void *user, uint32_t src, uint32_t dst, uint8_t *frame,
                                       size_t len),
                           void *user);

void sfb__loopback_stats(const struct sfb__loopback *lb, uint32_t r,
                         struct sfb__loopback_stats *st);

/* Drops every frame still queued, closes every comm. NULL is a no-op. */
void sfb__loopback_close(struct sfb__loopback **lb);

#endif
