/* libfabric transport: a fabric call that never returns (transport_impl.h,
 * FAB()). libfabric 1.17's shm provider guards each process's region with a
 * spinlock in shared memory: a sender takes the receiver's, a receiver its
 * own to progress. A process killed while holding one leaves it held, and
 * every later send to it (or progress of the region it was writing to)
 * spins for good. Two defences: the operations to a peer whose process is
 * gone are not posted (sfb__tp_peer_gone), which leaves only the
 * microseconds between a death and the check; and the watchdog
 * (src/comm/comm_watch.c) gives up a thread stuck inside a call anyway. */
#include "config.h"
#include "src/transport/transport_impl.h"

#include "src/base/util.h"
#include "src/loop/loop.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

/* Abandoned transports stay allocated (their parked thread holds them):
 * kept here so that leak checkers see them reachable. */
static pthread_mutex_t abandoned_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sfb__transport **abandoned;
static size_t n_abandoned;

static _Noreturn void park(void)
{
    for (;;) pause();
}

void sfb__tp_fab_park(struct sfb__transport *t)
{
    (void)t;
    SFB_LOG_W("transport: a libfabric call returned after the network thread was given up; "
              "the thread stays parked");
    park();
}

int sfb__tp_peer_gone(struct sfb__transport *t, uint32_t peer)
{
    if (!t->s.peer_gone || !t->s.peer_gone(t->s.user, peer)) return 0;
    if (t->stuck.debug_stall) {
        /* Test hook: hang in the call the way a lock left held would. */
        SFB_LOG_W("transport: SFB_DEBUG_STALL_SEND_TO_DEAD: stuck sending to rank %u", peer);
        sfb__tp_fab_enter(t);
        park();
    }
    stat_add(&t->stats.dropped, 1);
    return 1;
}

uint64_t sfb__transport_fabric_seq(const struct sfb__transport *t)
{
    return atomic_load_explicit(&t->stuck.fab_seq, memory_order_acquire);
}

int sfb__transport_abandon(struct sfb__transport *t, uint64_t seq)
{
    if (!(seq & 1) || seq == FAB_ABANDONED) return 0;
    if (!atomic_compare_exchange_strong_explicit(&t->stuck.fab_seq, &seq, FAB_ABANDONED,
                                                 memory_order_acq_rel, memory_order_acquire))
        return 0;
    /* Every fabric call runs in the loop: a visitor in it is the thread inside. */
    atomic_store(&t->stuck.in_caller, sfb__loop_visited(t->loop));
    sfb__loop_abandon(t->loop);
    return 1;
}

int sfb__transport_stuck_in_caller(const struct sfb__transport *t)
{
    return t && atomic_load(&t->stuck.in_caller);
}

int sfb__transport_abandoned(const struct sfb__transport *t)
{
    return t && atomic_load_explicit(&t->stuck.fab_seq, memory_order_acquire) == FAB_ABANDONED;
}

void sfb__tp_keep_abandoned(struct sfb__transport *t)
{
    pthread_mutex_lock(&abandoned_mu);
    struct sfb__transport **a = realloc(abandoned, (n_abandoned + 1) * sizeof *a);
    if (a) {
        abandoned = a;
        abandoned[n_abandoned++] = t;
    }
    pthread_mutex_unlock(&abandoned_mu);
}
