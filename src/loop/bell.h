/* Doorbells: how a rank whose provider has no wait fd (shm) sleeps instead
 * of polling, and how a sender wakes it.
 *
 * Every rank of a job on this host binds a non-blocking UNIX datagram
 * socket in the abstract namespace, named after the job key and its rank
 * ("\0sfb-bell-<key>-<rank>"): nothing to exchange, nothing left in the
 * file system by a killed process. A sender rings a peer after it has put
 * something in that peer's queue (one empty datagram); the receiver's event
 * loop watches its socket's fd. No lost wake-up: the receiver drains its
 * socket *before* it polls its completion queue, so a ring that comes after
 * the drain leaves the fd readable and the loop does not block.
 *
 * A ring costs one sendto(), so it is made only to a peer that sleeps:
 * each rank has a flag in a small shared-memory segment of the job
 * ("/sfb_bell_<key>", unlinked once every rank has it mapped). Lost wake-up
 * race: the receiver sets its flag (seq_cst), polls its CQ once more, and
 * only then sleeps; the sender posts, fences (seq_cst), then reads the flag:
 * either the receiver's poll sees the message or the sender sees the flag.
 * Rings are coalesced to one per peer per progress pass. A ring that cannot be
 * delivered (peer gone, socket full: it is awake anyway, another network
 * namespace) is dropped: the receiver's bounded sleep makes a missed ring
 * cost time, never a hang. In the loop only (src/loop/loop.h: the loop
 * thread, or a caller that drives progress). */
#ifndef SFB_SRC_BELL_H
#define SFB_SRC_BELL_H

#include <stdint.h>

struct sfb__bell;
/* The flags segment's name in /dev/shm: this prefix and the job key in hex. */
#define SFB__BELL_SHM_PREFIX "sfb_bell_"

/* Binds this rank's doorbell. Returns 0, or a negative errno (the name is
 * taken: another job with the same key). */
int sfb__bell_open(struct sfb__bell **out, uint64_t job_key, uint32_t rank, uint32_t world);
/* The fd to watch for readability. */
int sfb__bell_fd(const struct sfb__bell *b);
/* Empties the socket; returns how many rings were in it. */
unsigned sfb__bell_drain(struct sfb__bell *b);
/* Marks `peer` to be rung by the next sfb__bell_flush (once per pass), if it
 * sleeps then; `always`: whether or not (its queue was full). */
void sfb__bell_mark(struct sfb__bell *b, uint32_t peer, int always);
/* This rank's sleeping flag: set before the last poll ahead of a sleep,
 * cleared when work is found. */
void sfb__bell_sleeping(struct sfb__bell *b, int on);
/* 1 when the flag is set, or when there are no flags (peers ring always). */
int sfb__bell_is_sleeping(const struct sfb__bell *b);
/* Removes the flags' name (every rank has mapped it: after the start-up
 * barrier), so a killed job leaves nothing in /dev/shm. */
void sfb__bell_unlink(struct sfb__bell *b);
/* Rings every marked peer. Returns how many rings were sent. */
unsigned sfb__bell_flush(struct sfb__bell *b);
void sfb__bell_close(struct sfb__bell **b);

#endif
