/* The comm context's failure record: the first failure wins and is what
 * every later check reports (its fields in comm_impl.h, "failure"). Below
 * everything else of the comm context: liveness, stalls, the watchdog and
 * the frame handlers record failures here, and every wait checks here. */
#include "config.h"
#include "src/comm/comm_impl.h"
#include "src/base/util.h"

#include <stdarg.h>
#include <stdio.h>

/* Records the first failure; later ones are logged only (debug level:
 * mostly the first one's echoes). `lost`: the failure is rank `rank`'s
 * death. Loop thread or compute thread. */
static void failv(struct sfb__comm *c, int rank, int lost, const char *fmt, va_list ap)
{
    /* the loop thread, the watchdog and the compute thread may all fail it */
    if (atomic_exchange_explicit(&c->fail.failing, 1, memory_order_acq_rel)) {
        if (sfb__log_enabled(SFB_LOG_DEBUG)) {
            char later[512];
            vsnprintf(later, sizeof later, fmt, ap);
            SFB_LOG_D("after the job failed: %s", later);
        }
        return;
    }
    vsnprintf(c->fail.reason, sizeof c->fail.reason, fmt, ap);
    c->fail.failed_rank = rank;
    c->fail.lost = lost && rank >= 0 ? rank + 1 : 0;
    atomic_store_explicit(&c->fail.failed, 1, memory_order_release);
    if (c->fail.lost && c->s.elastic)
        SFB_LOG_W("%s", c->fail.reason); /* the survivors go on (sfb_job_shrink) */
    else
        SFB_LOG_E("%s", c->fail.reason);
}

void sfb__comm_fail(struct sfb__comm *c, int rank, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    failv(c, rank, 0, fmt, ap);
    va_end(ap);
}

void sfb__comm_fail_lost(struct sfb__comm *c, int rank, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    failv(c, rank, 1, fmt, ap);
    va_end(ap);
}

int sfb__comm_lost(struct sfb__comm *c)
{
    if (!atomic_load_explicit(&c->fail.failed, memory_order_acquire)) return -1;
    return c->fail.lost - 1;
}

int sfb__comm_check(struct sfb__comm *c)
{
    if (!atomic_load_explicit(&c->fail.failed, memory_order_acquire)) return 0;
    return sfb__error(-SFB_EPEER, "%s", c->fail.reason);
}

int sfb__comm_explain(struct sfb__comm *c, int ret)
{
    if (!ret || !c->t) return ret;
    /* the peer's ABORT is sent before it exits, the EOF comes after: give
     * the frame a moment to overtake. An elastic job's survivors go on only
     * when the failure names the dead rank (sfb__comm_lost): a collective
     * broken by a death waits until liveness names it (a process gone for
     * 1 s on this host, silence across hosts), or a survivor's LOST does. */
    double bound = c->s.elastic ? SFB_MAX(1.0, c->live.silence_s + 2 * c->s.heartbeat_s) : 1.0;
    double end = sfb__now() + bound;
    for (;;) {
        int failed = sfb__comm_check(c);
        if (failed) return failed;
        if (sfb__now() >= end) return ret;
        sfb__sleep(0.01);
    }
}

int sfb__comm_peers_know(struct sfb__comm *c)
{
    return atomic_load_explicit(&c->fail.failed, memory_order_acquire) &&
           !atomic_load_explicit(&c->fail.found_here, memory_order_relaxed);
}
