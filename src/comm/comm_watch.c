/* The watchdog of the loop thread (docs/design.md, "A stuck network
 * thread"). libfabric's shm provider can leave a call spinning for good on
 * a lock that a killed process held (src/transport/transport_stuck.c); the loop
 * thread then runs no heartbeat, no liveness check and no ABORT, and the
 * rank would hang. This thread looks at the transport's fabric-call counter
 * every heartbeat period; when the loop thread has been inside one call
 *   - for max(2 s, silence/4) while a peer of this host has died without a
 *     BYE, or
 *   - for the whole silence timeout (no dead peer to blame),
 * counting from its own last look when that was seconds late (the process
 * stopped and continued: the thread inside did not run either),
 * it gives the thread up (sfb__transport_abandon: only while it is still
 * inside that call) and fails the comm naming the dead peer, so the compute
 * thread returns an error and the process can exit. The thread inside may
 * be the compute thread itself (a caller drives progress in its sends and
 * waits: src/transport/transport.c): it would never return, so the
 * process logs the failure and exits with status 1. */
#include "config.h"
#include "src/comm/comm_impl.h"

#include "src/base/util.h"
#include "src/transport/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct sfb__comm_watch {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
};

/* A peer of this host whose process is gone without a BYE, or -1. */
static int dead_peer(const struct sfb__comm *c)
{
    for (uint32_t p = 0; p < c->world; p++)
        if (!c->live.said_bye[p] && sfb__comm_pid_gone(c, p)) return (int)p;
    return -1;
}

/* One look: 1 when the thread was given up (the watchdog's work is done). */
static int look(struct sfb__comm *c, uint64_t *seen, double *since, double *last)
{
    uint64_t seq = sfb__transport_fabric_seq(c->t);
    double now = sfb__now();
    /* a look seconds late: the process did not run (stopped and continued),
     * the thread inside no more than this one: count from now */
    int away = sfb__gap(last, now, sfb__comm_gap_slack(c)) > 0;
    if (away || !(seq & 1) || seq != *seen) { /* outside a call, or in another one */
        *seen = seq;
        *since = now;
        return 0;
    }
    double stuck = now - *since;
    double soon = c->live.silence_s / 4 > 2.0 ? c->live.silence_s / 4 : 2.0;
    int dead = stuck >= soon ? dead_peer(c) : -1;
    if (dead < 0 && stuck < c->live.silence_s) return 0;
    if (!sfb__transport_abandon(c->t, seq)) return 0; /* the call has just returned */
    atomic_store_explicit(&c->fail.found_here, 1, memory_order_relaxed);
    if (dead >= 0) {
        char also[160];
        sfb__comm_also_gone(c, dead, also, sizeof also);
        /* a death like any other (an elastic job goes on without it: the
         * new fabric's endpoints share nothing with this one) */
        sfb__comm_fail_lost(c, dead,
                            "rank %d died (its process %d is gone)%s; rank %u's network thread "
                            "waited %.1f s in libfabric (%s) on a lock the dead process held, "
                            "and is given up",
                            dead, c->live.peer_pid[dead], also, c->rank, stuck,
                            sfb__transport_provider(c->t));
    } else {
        sfb__comm_fail(c, -1,
                       "rank %u's network thread has been stuck in libfabric (%s) for %.1f s "
                       "(the silence timeout), and is given up",
                       c->rank, sfb__transport_provider(c->t), stuck);
    }
    if (sfb__transport_stuck_in_caller(c->t)) {
        /* The thread inside was the compute thread, driving progress in a
         * send or a wait: it can never return the failure to its caller, so
         * the process says so and exits instead of hanging. */
        SFB_LOG_E("rank %u: the thread stuck in libfabric is the one the job runs on; exiting",
                  c->rank);
        _exit(EXIT_FAILURE);
    }
    return 1;
}

static void *watch_main(void *arg)
{
    struct sfb__comm *c = arg;
    struct sfb__comm_watch *w = c->watch;
    pthread_setname_np(pthread_self(), "sfb-watch"); /* (top -H, perf, gdb) */
    uint64_t seen = 0;
    double since = sfb__now(), last = 0;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec ts;
        sfb__deadline(&ts, c->s.heartbeat_s);
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (w->stop) break;
        pthread_mutex_unlock(&w->mu);
        int done = look(c, &seen, &since, &last);
        pthread_mutex_lock(&w->mu);
        if (done) break;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int sfb__comm_watch_start(struct sfb__comm *c)
{
    struct sfb__comm_watch *w = calloc(1, sizeof *w);
    if (!w) return -ENOMEM;
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 << 10);
    c->watch = w;
    int rc = pthread_create(&w->thread, &at, watch_main, c);
    pthread_attr_destroy(&at);
    if (rc) {
        c->watch = NULL;
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return sfb__error(-rc, "comm: cannot start the watchdog thread");
    }
    return 0;
}

void sfb__comm_watch_stop(struct sfb__comm *c)
{
    struct sfb__comm_watch *w = c->watch;
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    c->watch = NULL;
}
