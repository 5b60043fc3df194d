/* The comm's bandwidth budget: one token bucket per worker (src/loop/pace.h)
 * charged by every data message sfb__comm_send puts on the wire, and a loop
 * timer that wakes the sender (the relay, through the on_sent hook) once
 * the budget has room again. */
#include "config.h"
#include "src/comm/comm_impl.h"
#include "src/loop/loop.h"

/* 10 ms of budget: the depth of the bucket, i.e. the largest burst after
 * an idle spell (a 1-second window then stays within 1 % of the rate). */
#define BUDGET_BURST_S 0.01
/* A timer nobody armed sleeps this long. */
#define BUDGET_IDLE_S 1e6

static void budget_timer(void *arg)
{
    struct sfb__comm *c = arg;
    c->budget.pace_armed = 0;
    if (c->s.on_sent) c->s.on_sent(c->s.user, SFB__COMM_BUDGET_DST, NULL, 0);
}

int sfb__comm_budget_open(struct sfb__comm *c)
{
    if (!(c->s.bandwidth > 0)) return 0;
    double rate = c->s.bandwidth;
    int ret = sfb__pace_init(&c->budget.pace, rate, rate * BUDGET_BURST_S, sfb__now());
    if (ret) return sfb__error(ret, "comm: bandwidth budget of %g bytes/s", rate);
    c->budget.paced = 1;
    ret = sfb__loop_timer_open(c->loop, &c->budget.pace_timer, BUDGET_IDLE_S, 0, budget_timer, c);
    if (ret) return sfb__error(ret, "comm: no timer for the bandwidth budget");
    return 0;
}

void sfb__comm_budget_close(struct sfb__comm *c)
{
    sfb__loop_timer_close(&c->budget.pace_timer);
    if (c->budget.paced) sfb__pace_destroy(&c->budget.pace);
    c->budget.paced = 0;
}

double sfb__comm_budget_wait(struct sfb__comm *c, int wake)
{
    if (!c->budget.paced) return 0;
    double w = sfb__pace_delay(&c->budget.pace, sfb__now());
    if (w > 0 && wake && c->budget.pace_timer && !c->budget.pace_armed) {
        c->budget.pace_armed = 1;
        sfb__loop_timer_rearm(c->budget.pace_timer, w);
    }
    return w;
}

double sfb__comm_budget_rate(const struct sfb__comm *c)
{
    return c->budget.paced ? c->budget.pace.rate : 0;
}

double sfb__comm_budget_held_s(struct sfb__comm *c)
{
    return c->budget.paced ? sfb__pace_held_s(&c->budget.pace, sfb__now()) : 0;
}
