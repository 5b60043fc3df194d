/* libfabric transport: settings, completions and progress. The protocol and the split into files: src/transport/transport_impl.h. */
#include "config.h"
#include "src/transport/transport_impl.h"

#include "src/loop/bell.h"
#include "src/base/util.h"
#include "src/base/fifo.h"
#include "src/loop/loop.h"

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

void sfb__transport_default_settings(struct sfb__transport_settings *s)
{
    memset(s, 0, sizeof *s);
    /* 256 KiB: above rxm's SAR limit (128 KiB), so on tcp every chunk goes
     * by rendezvous straight from the user buffer instead of being copied
     * through 16 KiB bounce segments; measured 2x the bandwidth of 64 KiB
     * at >= 1 MiB on tcp and no loss on shm (docs/performance.md). */
    s->chunk_size = 256 << 10;
    s->max_frame = (size_t)1 << 30;
    s->rx_depth = 32;
    s->inbox_cap = 1024;
    s->max_sends = 1024;
    s->poll_interval_s = 0.0005;
    s->spin_s = 0.002;
    s->ack_timeout_s = 10.0;
    s->read_window = (size_t)64 << 20;
}

static void complete(struct sfb__transport *t, struct op *o, const struct fi_cq_tagged_entry *e,
                     int err)
{
    switch (o->kind) {
    case OP_SEND: {
        struct sreq *r = o->req;
        if (err) r->failed = 1;
        if (--r->outstanding == 0 && r->all_posted) sfb__tp_sreq_finish(t, r);
        break;
    }
    case OP_READ:
        sfb__tp_read_done(t, o, err); /* keeps o for the ACK */
        return;
    case OP_ACK:
        break;
    case OP_RECV:
        t->rx_deficit++;
        if (err) sfb__buf_put(o->rbuf);
        else if (e->flags & FI_REMOTE_CQ_DATA) sfb__tp_on_whole(t, o->rbuf, e->len, e->data);
        else sfb__tp_on_message(t, o->rbuf, e->len);
        break;
    }
    sfb__tp_op_put(t, o);
}
static int read_cq(struct sfb__transport *t)
{
    struct fi_cq_tagged_entry ent[16];
    int work = 0;
    for (;;) {
        ssize_t n = FAB(t, fi_cq_read(t->cq, ent, SFB_ARRAY_LEN(ent)));
        if (n == -FI_EAGAIN) break;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry e;
            memset(&e, 0, sizeof e);
            if (FAB(t, fi_cq_readerr(t->cq, &e, 0)) < 1) break;
            struct op *o = e.op_context;
            if (!o && e.err != FI_ECANCELED) o = sfb__tp_read_oldest(t); /* shm 1.17: see there */
            /* Canceled receives are ours (close); a canceled read is the
             * peer's doing: tcp drops the connection a read asked the
             * impossible of (a forged address or key). */
            if (e.err != FI_ECANCELED || (o && o->kind == OP_READ)) {
                char buf[256];
                const char *s = fi_cq_strerror(t->cq, e.prov_errno, e.err_data, buf, sizeof buf);
                int peer = !o ? -1
                         : o->kind == OP_SEND ? (int)o->req->dst
                         : o->kind == OP_RECV ? -1
                                              : (int)o->peer;
                sfb__tp_report(t, peer, -e.err, "completion error", s);
            }
            /* A failed read completes as such: refused back to its sender. */
            if (o) complete(t, o, &(struct fi_cq_tagged_entry){0}, e.err ? e.err : FI_EOTHER);
            else stat_add(&t->stats.dropped, 1);
            work = 1;
            continue;
        }
        if (n < 0) {
            sfb__tp_report(t, -1, (int)n, "fi_cq_read failed", NULL);
            break;
        }
        for (ssize_t i = 0; i < n; i++) complete(t, ent[i].op_context, &ent[i], 0);
        work = 1;
        /* Fewer than asked: drained (one provider progress call less; what
         * completes meanwhile is the next pass's). */
        if (n < (ssize_t)SFB_ARRAY_LEN(ent)) break;
    }
    if (work && t->s.on_pass) t->s.on_pass(t->s.user);
    return work;
}

/* Block mode, once idle (progress() polls spin_s after work first). Work
 * done: one more pass at once. Operations the provider must finish by
 * itself (a send waiting for the peer's copy, a queue that was full):
 * nap poll_interval_s; while a big frame is under way (reads, reassembly,
 * an RMA send being read) deaf to the CQ's fd meanwhile (PACE), which over
 * tcp turns readable for every few kilobytes of it: woken by each, the loop
 * made ~100,000 passes a second per rank that read a piece and completed
 * nothing (64 MiB sums on 4 emulated hosts at 1 Gbit/s: 3.8 x gloo's CPU).
 * Otherwise sleep on the CQ's wait fd, or on the doorbell a peer rings when
 * it sends here (bounded by BELL_SLEEP_MAX_S, so a ring that never comes
 * only costs time). */
static int progress_block(struct sfb__transport *t, int work, int provider_busy, int pending)
{
    if (t->bell) sfb__bell_flush(t->bell);
    if (work || pending || provider_busy || !t->bell) {
        if (t->bell) sfb__bell_sleeping(t->bell, 0);
        if (work) return SFB__POLL_BUSY;
        /* (a small send waiting for its completion naps as before, woken
         * by the fd: its peer's answer is a message away) */
        int streaming = t->rd_head || sfb__tp_reads_in_flight(t, NULL) || t->active || t->acks_due;
        if (pending || provider_busy) return streaming ? SFB__POLL_PACE : SFB__POLL_NAP;
        if (t->wait_fd < 0) return SFB__POLL_NAP;
    } else if (t->wait_fd < 0) {
        /* Doorbell: raise the flag, then poll once more before sleeping
         * (bell.h): a sender that posted before the flag was up is seen by
         * that poll, one after it rings. */
        if (!sfb__bell_is_sleeping(t->bell)) {
            sfb__bell_sleeping(t->bell, 1);
            return SFB__POLL_BUSY;
        }
        return SFB__POLL_SLEEP;
    }
    struct fid *f = &t->cq->fid;
    if (FAB(t, fi_trywait(t->fabric, &f, 1)) != FI_SUCCESS) return SFB__POLL_BUSY;
    return t->acks_due ? SFB__POLL_NAP : SFB__POLL_SLEEP;
}

/* Everything that can move, moved once: completions, submitted sends,
 * receives to repost, reads and ACKs, completions again. A send made in
 * the pass (a relay's forward, a callback's reply) only queues: the pass's
 * own post_sends, or the next pass, posts it. */
static int pass_work(struct sfb__transport *t, double now)
{
    t->in_pass = 1;
    t->pass_now = now;
    int work = read_cq(t);
    int posted = sfb__tp_post_sends(t);
    work |= sfb__tp_post_recvs(t);
    posted |= sfb__tp_post_reads(t);
    /* A send or read just posted may complete at once (an inject, a read
     * on shm): look again, and post what that frees. A receive does not;
     * nothing posted: the next pass looks soon enough. */
    if (posted) {
        work = 1;
        read_cq(t);
        sfb__tp_post_sends(t);
    }
    t->in_pass = 0;
    sfb__tp_check_acks(t, now);
    return work;
}

/* Operations in flight (sends not yet completed, a frame half reassembled,
 * reads, ACKs due) mean a completion is due within microseconds: poll
 * longer than spin_s (up to INFLIGHT_SPIN_S), or a big frame whose chunks
 * complete more than spin_s apart under load would pay a nap (≥ 1 ms:
 * epoll's resolution) per gap. A blocked rank with a wait fd is the
 * exception: naps pace its provider-bound operations (tcp over a slow
 * link: a bundle in flight for 200 ms kept 16 ranks on 2 cores yielding,
 * 20-30 % more CPU for the same clock on the emulated cluster). */
int sfb__tp_in_flight(const struct sfb__transport *t)
{
    unsigned rx_posted = t->s.rx_depth - SFB_MIN(t->rx_deficit, t->s.rx_depth);
    return !(t->block && t->wait_fd >= 0) &&
           (t->ops_out > rx_posted || t->active || t->acks_due || t->rd_head);
}

/* One pass: progress everything, then decide how long the loop may sleep. */
static int progress_pass(struct sfb__transport *t)
{
    double now = sfb__now();
    int work = pass_work(t, now);
    if (work || atomic_exchange_explicit(&t->handover, 0, memory_order_acq_rel)) t->last_work = now;
    int in_flight = sfb__tp_in_flight(t);
    int spinning = now - t->last_work < (in_flight ? INFLIGHT_SPIN_S : t->s.spin_s);
    int pending = t->pend_head || t->rd_head || t->ack_head || atomic_load(&t->sub_pending) ||
                  (t->rx_deficit && !atomic_load(&t->ovf_nonempty));
    /* Block mode polls too while work is fresh (spin_s after the last
     * completion): the next one is usually microseconds away, and a yield
     * hands the core to whoever produces it at less cost than a sleep and a
     * doorbell wake-up (P = 64 halton on 2 cores: 31 ms per clock against
     * 79 ms sleeping at once and 34 ms never sleeping). Only an idle rank
     * sleeps. */
    unsigned rx_posted = t->s.rx_depth - SFB_MIN(t->rx_deficit, t->s.rx_depth);
    if (t->block && !spinning)
        return progress_block(t, work, t->ops_out > rx_posted + sfb__tp_reads_in_flight(t, NULL), pending);
    if (t->bell) {
        sfb__bell_flush(t->bell);
        sfb__bell_sleeping(t->bell, 0);
    }
    /* Busy: poll (also with a wait fd: sleeping in epoll and waking on the
     * CQ fd costs a context switch per message, the better part of a small
     * frame's latency on tcp). Idle: sleep on the wait fd, or nap. */
    if (t->wait_fd < 0 || pending || spinning) {
        /* An idle spin pass gives the core away: on a machine with fewer
         * cores than busy threads, the thread that would produce the next
         * completion (this process's compute thread, the peer) needs it. */
        if (spinning && !work) sched_yield();
        return spinning ? SFB__POLL_BUSY : SFB__POLL_NAP;
    }
    struct fid *f = &t->cq->fid;
    if (FAB(t, fi_trywait(t->fabric, &f, 1)) != FI_SUCCESS) return SFB__POLL_BUSY;
    /* Sends waiting for their ACK are timed (check_acks): wake on the fd or
     * the nap timer, whichever comes first. */
    return t->acks_due ? SFB__POLL_NAP : SFB__POLL_SLEEP;
}

/* The poller. The doorbell is drained before the CQ is read (a ring after
 * that leaves the fd readable), but only after a pass that may have let a
 * ring in: one that raised the sleeping flag or ended in a wait. Peers ring
 * a rank only while its flag is up (rarely also when its queue was full:
 * such rings wait until the rank next raises its flag), so the passes of a
 * spin skip a recv() each. */
int sfb__tp_progress(void *arg)
{
    struct sfb__transport *t = arg;
    atomic_fetch_add_explicit(&t->stats.passes, 1, memory_order_relaxed);
    /* A caller drives progress in its wait (sfb__tp_drive): the loop
     * thread stays out of its way, looking in every poll_interval_s
     * without watching the CQ's fd or the doorbell meanwhile. */
    if (atomic_load_explicit(&t->driving, memory_order_acquire)) {
        t->slept = 0;
        return SFB__POLL_AWAY;
    }
    if (t->bell && t->bell_armed) sfb__bell_drain(t->bell);
    int st = progress_pass(t);
    if (t->bell) t->bell_armed = st != SFB__POLL_BUSY || sfb__bell_is_sleeping(t->bell);
    t->slept = st == SFB__POLL_SLEEP;
    return st;
}

/* ---- Who drives progress ----
 * A message should go from the thread that has it to the fabric, and from
 * the fabric to the thread that waits for it, without a hand-off between
 * threads (two context switches a hop, most of a small message's latency).
 * The loop's progress lock (src/loop/loop.h) makes that safe: a thread that
 * takes it without waiting is in the loop and may do what the loop thread
 * does.
 *  - A send posts at once in the caller's thread when it can enter the
 *    loop (else, as before, it queues and wakes the loop thread); a send
 *    made in the loop outside a pass (a timer's, a loop call's) posts at
 *    once too, one made in a pass waits for the pass's post_sends.
 *  - A wait with nothing to take drives progress itself for up to spin_s
 *    (sfb__transport_recv_units), delivering to its own inbox; meanwhile
 *    the loop thread naps instead of polling against it. Then it sleeps on
 *    the inbox and the loop thread takes over (woken, so that it sleeps on
 *    its doorbell or wait fd as it should).
 *  - The loop thread keeps everything else: timers (heartbeats, liveness,
 *    pacing), relaying while the compute thread is busy in a GEMM, and the
 *    progress of a rank whose compute thread does not wait.
 * Work a caller does leaves the loop thread's spin (last_work) alone: a
 * compute thread that will be back within the clock needs the core more
 * than a loop thread polling for it. */
int sfb__tp_drive(struct sfb__transport *t, double now, int *left, int *in_flight)
{
    if (t->bell && t->bell_armed) {
        sfb__bell_drain(t->bell);
        t->bell_armed = 0;
    }
    int work = pass_work(t, now);
    *left = sfb__tp_post_all(t);
    *in_flight = sfb__tp_in_flight(t);
    if (t->bell) {
        sfb__bell_flush(t->bell);
        sfb__bell_sleeping(t->bell, 0);
    }
    return work;
}
