/* libfabric transport: the wait for frames (sfb__transport_recv), which
 * drives progress in the caller's thread while it can (transport.c, "Who
 * drives progress"); src/transport/transport_impl.h. */
#include "config.h"
#include "src/transport/transport_impl.h"

#include "src/base/fifo.h"
#include "src/base/futex.h"
#include "src/base/util.h"
#include "src/loop/loop.h"

#include <pthread.h>
#include <sched.h>

/* Whether a wait for `units` is over (t->mu held): as the wait below. */
static int inbox_short(const struct sfb__transport *t, uint32_t units)
{
    return t->in_count == 0 || (t->in_units < units && !t->ovf_head);
}

/* How long a driving wait polls without yielding its core, and how many
 * empty passes it makes before it looks at the clock and its inbox again
 * (drive_while_short). */
#define YIELD_AFTER_S 5e-6
#define PASSES_UNSEEN 15

/* A wait that did not drive (the loop thread has the fabric: an
 * oversubscribed host, or the loop was busy) yields its core for up to
 * WAIT_YIELD_S, looking at the inbox's delivery counter between yields,
 * before it sleeps on it: the loop thread that delivers the frame mostly
 * shares that core and is polling anyway, so a yield hands it the core at
 * less cost than a futex sleep and wake-up (4-worker quick start on 2
 * cores: 3.6 -> 2.8 s; 20 us: 3.0-3.5 s, 100-200 us: 2.7-2.8 s, 500 us:
 * 2.8-3.1 s; P = 64 halton unchanged, 8.7-10.6 ms a clock). */
#define WAIT_YIELD_S 100e-6

/* A wait drives progress itself (transport.c, "Who drives progress") for
 * up to spin_s, or while operations are in flight up to INFLIGHT_SPIN_S
 * (as the loop thread would poll: handing a 16 MiB read on tcp over to
 * the loop thread after 2 ms cost 2.5 ms a frame), while it can enter the
 * loop; then it leaves the rest to the loop thread. Not in the loop: the
 * loop thread's own waits (a loop call) have no business blocking. */
struct drive {
    double secs;    /* it took */
    int drove;      /* it did (the loop thread napped meanwhile) */
    int left;       /* sends are left to post */
};

/* Returns with t->mu held. */
static void drive_while_short(struct sfb__transport *t, uint32_t units, double timeout_s,
                              struct drive *d)
{
    *d = (struct drive){0};
    if (!t->caller_progress || sfb__loop_in_thread(t->loop)) {
        pthread_mutex_lock(&t->mu);
        return;
    }
    double t0 = sfb__now(), now = t0;
    double until = t0 + SFB_MIN(t->s.spin_s, timeout_s);
    double cap = t0 + SFB_MIN(SFB_MAX(INFLIGHT_SPIN_S, t->s.spin_s), timeout_s);
    double last = t0; /* of the last pass with work (or the start) */
    int drove = 0, left = 0, in_flight = 0;
    for (;;) {
        pthread_mutex_lock(&t->mu);
        if (!inbox_short(t, units) || t->closing || now >= until) break; /* t->mu held */
        pthread_mutex_unlock(&t->mu);
        /* from now on the loop thread naps, its lock mostly free */
        if (!drove) atomic_store_explicit(&t->driving, 1, memory_order_release);
        drove = 1;
        /* Empty passes in a row, in the loop all along, without reading
         * the clock or the inbox (a clock read was a fifth of a 64-byte
         * hop): only a pass with work delivers here, and only a thread in
         * the loop elsewhere. */
        int work = 0, entered = sfb__loop_try_enter(t->loop);
        if (entered) {
            for (unsigned n = 0; !work && n <= PASSES_UNSEEN; n++)
                work = sfb__tp_drive(t, now, &left, &in_flight);
            sfb__loop_leave(t->loop);
        }
        now = sfb__now();
        if (work) last = now;
        if (work || in_flight) until = SFB_MIN(cap, SFB_MAX(until, now + t->s.spin_s));
        /* The core to whoever holds the loop (the loop thread, between two
         * naps), and after YIELD_AFTER_S of nothing to whoever produces
         * the next completion (a peer, the loop thread). Not sooner: a
         * yield costs ~0.75 us here, more than a 64-byte hop on shm. */
        if (!entered || (!work && now - last > YIELD_AFTER_S)) sched_yield();
    }
    if (drove) atomic_store_explicit(&t->driving, 0, memory_order_release);
    *d = (struct drive){now - t0, drove, left};
}

/* After a drive (t->mu held): still waiting, or sends left to retry, the
 * loop thread takes over, and must look now (it napped, its doorbell flag
 * down, while the caller drove). */
static void hand_over(struct sfb__transport *t, const struct drive *d, uint32_t units)
{
    int wait = inbox_short(t, units);
    if (!d->drove || (!wait && !d->left)) return;
    pthread_mutex_unlock(&t->mu);
    /* A transfer still under way (a slow link): the loop thread polls on
     * as the caller did, not from its fd. */
    if (wait) atomic_store_explicit(&t->handover, 1, memory_order_release);
    sfb__loop_wake(t->loop);
    pthread_mutex_lock(&t->mu);
}

/* A look that does not wait (timeout 0) with nothing to take makes one
 * progress pass when it can enter the loop, as MPI_Test does: arrivals
 * are taken and queued sends posted whenever the compute thread comes by,
 * not only when it must wait (a trainer whose SSP bound was already met
 * left its peers' frames in the fabric, and its own sends queued, for a
 * loop thread napping up to 2 ms: a quick-start frame took 0.1-0.7 ms to
 * arrive, and the ranks waited for each other every clock). */
static void poll_once(struct sfb__transport *t, uint32_t units)
{
    if (!t->caller_progress || sfb__loop_in_thread(t->loop)) return;
    pthread_mutex_lock(&t->mu);
    int wait = inbox_short(t, units);
    pthread_mutex_unlock(&t->mu);
    if (!wait || !sfb__loop_try_enter(t->loop)) return;
    int left, in_flight;
    sfb__tp_drive(t, sfb__now(), &left, &in_flight);
    sfb__loop_leave(t->loop);
    if (left) sfb__loop_wake(t->loop); /* the loop thread retries them */
}

int sfb__transport_recv(struct sfb__transport *t, struct sfb__frame *out, double timeout_s)
{
    return sfb__transport_recv_units(t, out, timeout_s, 0);
}

int sfb__transport_recv_units(struct sfb__transport *t, struct sfb__frame *out, double timeout_s,
                              uint32_t units)
{
    struct timespec ts;
    struct drive d = {0};
    if (timeout_s > 0) {
        drive_while_short(t, units, timeout_s, &d);
        hand_over(t, &d, units);
    } else {
        poll_once(t, units);
        pthread_mutex_lock(&t->mu);
    }
    /* Wait while the inbox is empty or short of units (parked frames, an
     * inbox full, lost theirs: no threshold then); at the deadline take
     * whatever is there. */
    int rc = 0, timed = 0;
    double yield_until = 0;
    while (timeout_s > 0 && rc != ETIMEDOUT &&
           (t->in_count == 0 || (t->in_units < units && !t->ovf_head))) {
        if (!timed++) {
            sfb__deadline(&ts, SFB_MAX(timeout_s - d.secs, 0));
            /* WAIT_YIELD_S: yield to the loop thread before sleeping */
            if (!d.drove && !sfb__loop_in_thread(t->loop))
                yield_until = sfb__now() + SFB_MIN(WAIT_YIELD_S, timeout_s - d.secs);
        }
        t->want_units = units;
        t->in_waiting = 1;
        /* read under mu, as every delivery bumps it: one after the unlock
         * makes the wait return at once */
        unsigned seen = atomic_load_explicit(&t->in_seq, memory_order_relaxed);
        pthread_mutex_unlock(&t->mu);
        while (atomic_load_explicit(&t->in_seq, memory_order_relaxed) == seen &&
               yield_until > 0 && sfb__now() < yield_until)
            sched_yield();
        rc = atomic_load_explicit(&t->in_seq, memory_order_relaxed) == seen
                 ? sfb__futex_wait(&t->in_seq, seen, &ts)
                 : 0;
        pthread_mutex_lock(&t->mu);
        t->in_waiting = 0;
        t->want_units = 0;
    }
    if (t->in_count == 0) {
        pthread_mutex_unlock(&t->mu);
        return timeout_s > 0 ? -ETIMEDOUT : -EAGAIN;
    }
    *out = t->inbox[t->in_head];
    t->in_head = (t->in_head + 1) % t->s.inbox_cap;
    t->in_count--;
    t->in_units -= out->units;
    size_t was = atomic_fetch_sub_explicit(&t->inbox_bytes, out->len, memory_order_relaxed);
    /* The loop holds RMA reads back while the inbox is full of bytes. */
    size_t half = t->s.read_window / 2;
    int wake = was > half && was - out->len <= half;
    if (t->ovf_head) {
        struct sfb__buf *b = t->ovf_head;
        SFB_FIFO_DROP_HEAD(t->ovf_head, t->ovf_tail, next);
        if (!t->ovf_head) {
            atomic_store(&t->ovf_nonempty, 0);
            wake = 1; /* the loop may repost receives again */
        }
        t->inbox[(t->in_head + t->in_count) % t->s.inbox_cap] =
            (struct sfb__frame){b, b->data + b->off, b->len, b->src, 1};
        t->in_count++;
        t->in_units++;
    }
    pthread_mutex_unlock(&t->mu);
    if (wake) sfb__loop_async_send(t->async);
    return 0;
}

