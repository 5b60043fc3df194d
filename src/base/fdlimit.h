/* The limit on open files (RLIMIT_NOFILE) a rank of a job of P ranks
 * needs: raised once P is known, before the bootstrap's rendezvous (its
 * rank 0 holds a connection per rank) and again by the comm context. */
#ifndef SFB_SRC_FDLIMIT_H
#define SFB_SRC_FDLIMIT_H

#include <stdint.h>

/* The descriptors a rank plans for: 4 per rank of the world (up to two
 * sockets and a pidfd per peer, a rendezvous connection per rank on rank
 * 0) and 256 more. */
unsigned long sfb__fd_limit_want(uint32_t world);

/* Raises the soft limit towards sfb__fd_limit_want(world), at most to the
 * hard limit, never lowering it; returns the soft limit in force. Where the
 * hard limit is below the need, says so once per process: a warning naming
 * the limit, P and `ulimit -n` if `loud`, at debug level otherwise. */
unsigned long sfb__fd_limit_raise(uint32_t world, int loud);

#endif
