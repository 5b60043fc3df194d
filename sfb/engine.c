/* What the sync engines share (sfb/sync.h): the accounting of applied
 * updates and the wait loop. */
#include "config.h"
#include "sfb/sync.h"
#include "src/base/util.h"
#include "src/comm/comm.h"
#include "src/ssp/ssp.h"

void sfb__sync_count_applied(uint64_t *hist, struct sfb__sync_clock *acct, int64_t now_clock,
                             int64_t clock, int64_t required)
{
    int64_t st = now_clock - clock - 1;
    if (st < 0) st = 0;
    hist[st < SFB_STALENESS_BINS - 1 ? st : SFB_STALENESS_BINS - 1]++;
    if (st > acct->staleness) acct->staleness = st;
    acct->applied++;
    if (clock > required) acct->applied_early++;
}

void sfb__sync_take_arrived(struct sfb__comm *c, void (*take)(void *priv, struct sfb__frame *f),
                            void *priv)
{
    struct sfb__frame f;
    while (sfb__comm_recv(c, &f, 0) == 0) take(priv, &f);
}

/* Origins whose applied clock is still below `required`. */
static uint32_t behind(const struct sfb__ssp *ssp, int64_t required)
{
    uint32_t n = 0;
    for (uint32_t o = 0; o < ssp->world; o++) n += sfb__ssp_applied(ssp, o) < required;
    return n;
}

int sfb__sync_wait(struct sfb__comm *c, struct sfb__ssp *ssp, const struct sfb__sync_waiter *w,
                   int64_t required, int64_t limit, int64_t now_clock,
                   struct sfb__sync_clock *acct)
{
    double t0 = sfb__now(), apply0 = acct->apply_s, held0 = sfb__comm_budget_held_s(c);
    int ret = 0;
    for (;;) {
        struct sfb__frame f;
        if (sfb__comm_world(c) > 1) sfb__sync_take_arrived(c, w->take, w->priv);
        /* a frame taken may have failed the job (an update no replica may
         * apply): say so now, even if the wait has what it needs */
        if ((ret = sfb__comm_check(c))) break;
        if ((ret = w->progress(w->priv, limit, now_clock, required, acct))) break;
        if (sfb__ssp_min_applied(ssp) >= required) break;
        if ((ret = sfb__comm_check_wait(c, required, t0, w->stall_check ? ssp : NULL))) break;
        if (sfb__comm_world(c) == 1) {
            ret = sfb__error(-EDEADLK, "waiting for updates in a job of one worker");
            break;
        }
        /* Oversubscribed hosts pay a context switch per wake-up: sleep
         * until the updates still missing can have arrived. */
        uint32_t need = w->one_frame_per_origin ? behind(ssp, required) : 0;
        if (sfb__comm_recv_units(c, &f, 0.05, need) == 0) w->take(w->priv, &f);
    }
    double waited = (sfb__now() - t0) - (acct->apply_s - apply0);
    acct->wait_s += waited;
    /* the part of the wait during which this rank's own data waited for its
     * budget: the job is bound by the budget, not by slow peers */
    acct->budget_wait_s += SFB_MIN(waited, sfb__comm_budget_held_s(c) - held0);
    return ret;
}
