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
 * A ring costs one sendto() (≈ 2 µs); a sleeping peer's flag in shared
 * memory would save it while the peer is awake, but rings are coalesced to
 * one per peer per progress pass, and block mode is for hosts with more
 * ranks than cores, where peers mostly sleep. A ring that cannot be
 * delivered (peer gone, socket full: it is awake anyway, another network
 * namespace) is dropped: the receiver's bounded sleep makes a missed ring
 * cost time, never a hang. Loop thread only. */
#ifndef SFB_SRC_BELL_H
#define SFB_SRC_BELL_H

#include <stdint.h>

struct sfb__bell;

/* Binds this rank's doorbell. Returns 0, or a negative errno (the name is
 * taken: another job with the same key). */
int sfb__bell_open(struct sfb__bell **out, uint64_t job_key, uint32_t rank, uint32_t world);
/* The fd to watch for readability. */
int sfb__bell_fd(const struct sfb__bell *b);
/* Empties the socket; returns how many rings were in it. */
unsigned sfb__bell_drain(struct sfb__bell *b);
/* Marks `peer` to be rung by the next sfb__bell_flush (once per pass). */
void sfb__bell_mark(struct sfb__bell *b, uint32_t peer);
/* Rings every marked peer. Returns how many rings were sent. */
unsigned sfb__bell_flush(struct sfb__bell *b);
void sfb__bell_close(struct sfb__bell **b);

#endif
