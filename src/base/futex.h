/* A futex word: how one thread sleeps until another changes a counter,
 * without a condition variable. pthread_cond_wait takes its mutex back
 * marked as contended, so every wake-up cost the waiter's next unlock a
 * futex syscall with no one to wake (a third of the futex calls of a
 * 4-worker quick start); a bare futex wait re-locks nothing. Linux only, as
 * the rest of the transport (libfabric's shm provider). */
#ifndef SFB_SRC_BASE_FUTEX_H
#define SFB_SRC_BASE_FUTEX_H

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps while *w == seen, until `until` (CLOCK_MONOTONIC, absolute; NULL:
 * no limit). 0 when woken, when *w had changed already or on a signal;
 * ETIMEDOUT at the deadline. The caller re-checks its condition. */
static inline int sfb__futex_wait(_Atomic unsigned *w, unsigned seen, const struct timespec *until)
{
    long rc = syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, seen,
                      until, NULL, FUTEX_BITSET_MATCH_ANY);
    return rc == -1 && errno == ETIMEDOUT ? ETIMEDOUT : 0;
}

/* Wakes up to n threads sleeping on w (after the change they wait for). */
static inline void sfb__futex_wake(_Atomic unsigned *w, int n)
{
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n, NULL, NULL, 0);
}

#endif
