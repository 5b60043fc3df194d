/* The bandwidth budget's token bucket: see src/loop/pace.h. */
#include "config.h"
#include "src/loop/pace.h"

#include <errno.h>
#include <math.h>

int sfb__pace_init(struct sfb__pace *p, double rate, double burst, double now)
{
    if (!(rate > 0) || !isfinite(rate) || !(burst >= 0) || !isfinite(burst)) return -EINVAL;
    *p = (struct sfb__pace){.rate = rate, .burst = burst, .tokens = burst, .at = now};
    return -pthread_mutex_init(&p->mu, NULL);
}

void sfb__pace_destroy(struct sfb__pace *p)
{
    pthread_mutex_destroy(&p->mu);
}

/* Brings the balance up to `now` (the lock held). A clock that went
 * backwards (another thread's earlier `now`) adds nothing. */
static void refill(struct sfb__pace *p, double now)
{
    if (now > p->at) {
        p->tokens = fmin(p->burst, p->tokens + (now - p->at) * p->rate);
        p->at = now;
    }
}

double sfb__pace_delay(struct sfb__pace *p, double now)
{
    pthread_mutex_lock(&p->mu);
    refill(p, now);
    /* under half a byte owed counts as paid: the rounding of refill must
     * not leave a caller waiting for nanoseconds that never come */
    double wait = p->tokens >= -0.5 ? 0 : -p->tokens / p->rate;
    if (wait > 0 && !p->held) {
        p->held = 1;
        p->held_since = now;
    }
    pthread_mutex_unlock(&p->mu);
    return wait;
}

void sfb__pace_charge(struct sfb__pace *p, uint64_t bytes, double now)
{
    pthread_mutex_lock(&p->mu);
    refill(p, now);
    p->tokens -= (double)bytes;
    p->charged += bytes;
    if (p->held) {
        if (now > p->held_since) p->held_total += now - p->held_since;
        p->held = 0;
    }
    pthread_mutex_unlock(&p->mu);
}

double sfb__pace_held_s(struct sfb__pace *p, double now)
{
    pthread_mutex_lock(&p->mu);
    double s = p->held_total + (p->held && now > p->held_since ? now - p->held_since : 0);
    pthread_mutex_unlock(&p->mu);
    return s;
}
