/* Spin locks that yield on an oversubscribed host: see spin_yield.h. */
#include "src/launch/spin_yield.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Tries before the first yield (a few microseconds): a holder that is
 * running releases within that (libfabric's shm holds its region lock for
 * a queue insert); one that is not would be waited on for the rest of the
 * time slice. */
#define SPINS 64

static atomic_int yielding = -1; /* -1: not yet read from the environment */
static atomic_ullong yields;

void sfb__spin_yield_set(int on)
{
    atomic_store_explicit(&yielding, on < 0 ? -1 : on != 0, memory_order_relaxed);
}

int sfb__spin_yield_enabled(void)
{
    int y = atomic_load_explicit(&yielding, memory_order_relaxed);
    if (y < 0) {
        /* getenv only: no allocation, no lock (this may run inside one) */
        const char *e = getenv("SFB_SPIN_YIELD");
        y = e && !strcmp(e, "1");
        atomic_store_explicit(&yielding, y, memory_order_relaxed);
    }
    return y;
}

unsigned long long sfb__spin_yields(void)
{
    return atomic_load_explicit(&yields, memory_order_relaxed);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Binds in place of libc's for the libraries loaded after the program or
 * the preloaded library that defines it (libfabric and its providers). The
 * lock is taken with pthread_spin_trylock, so the lock word keeps libc's
 * meaning and libc's pthread_spin_unlock releases it. */
__attribute__((visibility("default"))) int pthread_spin_lock(pthread_spinlock_t *lock)
{
    for (unsigned i = 0;; i++) {
        if (pthread_spin_trylock(lock) == 0) return 0;
        if (i >= SPINS && sfb__spin_yield_enabled()) {
            atomic_fetch_add_explicit(&yields, 1, memory_order_relaxed);
            sched_yield();
        } else {
            cpu_relax();
        }
    }
}
