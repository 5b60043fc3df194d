/* The bandwidth budget's token bucket (src/loop/pace.c), with explicit
 * times: the long-run rate, the depth of a burst, a message larger than the
 * balance, the held time, a clock that goes backwards. */
#include "src/base/util.h"
#include "src/loop/pace.h"
#include "test.h"

#include <errno.h>

static int test_rejects_bad_values(void)
{
    struct sfb__pace p;
    ASSERT_EQ(sfb__pace_init(&p, 0, 100, 0), -EINVAL);
    ASSERT_EQ(sfb__pace_init(&p, -5, 100, 0), -EINVAL);
    ASSERT_EQ(sfb__pace_init(&p, 1e6, -1, 0), -EINVAL);
    return 0;
}

/* Messages sent whenever allowed, for 10 s: bytes sent over any window of
 * 1 s after the first stay within one message and the burst of rate · 1 s. */
static int test_long_run_rate(void)
{
    struct sfb__pace p;
    const double rate = 1e6, burst = 1e4, msg = 3000;
    ASSERT_OK(sfb__pace_init(&p, rate, burst, 0));
    double t = 0, sent_at[20000];
    int n = 0;
    while (t < 10 && n < 20000) {
        double w = sfb__pace_delay(&p, t);
        if (w > 0) {
            t += w;
            continue;
        }
        sfb__pace_charge(&p, (uint64_t)msg, t);
        sent_at[n++] = t;
    }
    ASSERT_LT(n, 20000);
    ASSERT_EQ(p.charged, (uint64_t)(n * msg));
    /* 10 s: burst + 10 · rate, give or take a message */
    ASSERT_LE(n * msg, burst + 10 * rate + msg);
    ASSERT_GE(n * msg, 10 * rate - msg);
    for (double a = 1; a + 1 <= 10; a += 0.25) {
        double bytes = 0;
        for (int i = 0; i < n; i++) bytes += (sent_at[i] >= a && sent_at[i] < a + 1) * msg;
        ASSERT_LE(bytes, rate + burst + msg);
        ASSERT_GE(bytes, rate - burst - msg);
    }
    sfb__pace_destroy(&p);
    return 0;
}

/* A message larger than the balance goes, and is owed: the next waits
 * exactly until the debt is paid. The bucket never holds more than burst. */
static int test_debt_and_depth(void)
{
    struct sfb__pace p;
    ASSERT_OK(sfb__pace_init(&p, 1000, 500, 0));
    ASSERT(sfb__pace_delay(&p, 0) == 0);
    sfb__pace_charge(&p, 2500, 0); /* balance 500 - 2500 = -2000 */
    ASSERT_NEAR(sfb__pace_delay(&p, 0), 2.0, 1e-12);
    ASSERT_NEAR(sfb__pace_delay(&p, 1.5), 0.5, 1e-12);
    ASSERT(sfb__pace_delay(&p, 2.0) == 0);
    /* idle for 100 s: at most burst accrues */
    ASSERT(sfb__pace_delay(&p, 102) == 0);
    sfb__pace_charge(&p, 600, 102);
    ASSERT_NEAR(sfb__pace_delay(&p, 102), 0.1, 1e-12);
    /* a time from the past (another thread's) adds nothing */
    ASSERT_NEAR(sfb__pace_delay(&p, 50), 0.1, 1e-12);
    sfb__pace_destroy(&p);
    return 0;
}

/* Held: from the first refusal to the next send; not while idle. */
static int test_held_time(void)
{
    struct sfb__pace p;
    ASSERT_OK(sfb__pace_init(&p, 100, 0, 0));
    sfb__pace_charge(&p, 100, 0);      /* owes 1 s */
    ASSERT(sfb__pace_delay(&p, 0.25) > 0); /* held from 0.25 */
    ASSERT(sfb__pace_delay(&p, 0.5) > 0);  /* still the same hold */
    ASSERT_NEAR(sfb__pace_held_s(&p, 0.75), 0.5, 1e-12);
    ASSERT(sfb__pace_delay(&p, 1.0) == 0);
    sfb__pace_charge(&p, 50, 1.0);     /* held 0.25 .. 1.0 */
    ASSERT_NEAR(sfb__pace_held_s(&p, 5.0), 0.75, 1e-12);
    /* idle: nobody refused, nothing held */
    ASSERT(sfb__pace_delay(&p, 9.0) == 0);
    ASSERT_NEAR(sfb__pace_held_s(&p, 9.0), 0.75, 1e-12);
    sfb__pace_destroy(&p);
    return 0;
}

static const struct test_case tests[] = {
    {"rejects_bad_values", test_rejects_bad_values},
    {"long_run_rate", test_long_run_rate},
    {"debt_and_depth", test_debt_and_depth},
    {"held_time", test_held_time},
};
TEST_MAIN(tests)
