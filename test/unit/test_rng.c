/* PRNG: reference vectors of splitmix64 and xoshiro256**, sampler
 * statistics, the portable logarithm, and seed/stream independence. */
#include "src/base/rng.h"
#include "test.h"

#include <stdint.h>

static int splitmix_reference(void)
{
    /* splitmix64 from state 0: published first outputs. */
    struct sfb__rng r;
    sfb__rng_seed(&r, 0);
    ASSERT(r.s[0] == 0xe220a8397b1dcdafull);
    ASSERT(r.s[1] == 0x6e789e6aa1b965f4ull);
    ASSERT(r.s[2] == 0x06c45d188009454full);
    return 0;
}

static int xoshiro_reference(void)
{
    /* xoshiro256** from state {1, 2, 3, 4} (reference implementation). */
    struct sfb__rng r = {.s = {1, 2, 3, 4}};
    ASSERT(sfb__rng_next(&r) == 11520ull);
    ASSERT(sfb__rng_next(&r) == 0ull);
    ASSERT(sfb__rng_next(&r) == 1509978240ull);
    ASSERT(sfb__rng_next(&r) == 1215971899390074240ull);
    return 0;
}

static int uniform_stats(void)
{
    struct sfb__rng r;
    sfb__rng_seed(&r, 12345);
    enum { N = 200000 };
    double sum = 0, sum2 = 0, lo = 1, hi = 0;
    for (int i = 0; i < N; i++) {
        double u = sfb__rng_uniform(&r);
        ASSERT(u >= 0.0 && u < 1.0);
        sum += u;
        sum2 += u * u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    ASSERT_NEAR(sum / N, 0.5, 0.005);
    ASSERT_NEAR(sum2 / N - (sum / N) * (sum / N), 1.0 / 12, 0.002);
    ASSERT(lo < 1e-3);
    ASSERT(hi > 0.999);
    return 0;
}

static int below_unbiased(void)
{
    struct sfb__rng r;
    sfb__rng_seed(&r, 7);
    int count[7] = {0};
    enum { N = 70000 };
    for (int i = 0; i < N; i++) {
        uint64_t v = sfb__rng_below(&r, 7);
        ASSERT_LT(v, 7);
        count[v]++;
    }
    for (int i = 0; i < 7; i++) ASSERT_NEAR(count[i], N / 7, 400);
    ASSERT_EQ(sfb__rng_below(&r, 1), 0);
    /* Large bounds stay in range. */
    for (int i = 0; i < 1000; i++) ASSERT(sfb__rng_below(&r, UINT64_MAX - 3) < UINT64_MAX - 3);
    return 0;
}

static int gauss_stats(void)
{
    struct sfb__rng r;
    sfb__rng_seed(&r, 99);
    enum { N = 200000 };
    double sum = 0, sum2 = 0, sum4 = 0;
    int beyond2 = 0;
    for (int i = 0; i < N; i++) {
        double g = sfb__rng_gauss(&r);
        ASSERT(isfinite(g));
        sum += g;
        sum2 += g * g;
        sum4 += g * g * g * g;
        beyond2 += fabs(g) > 2.0;
    }
    ASSERT_NEAR(sum / N, 0.0, 0.01);
    ASSERT_NEAR(sum2 / N, 1.0, 0.01);
    ASSERT_NEAR(sum4 / N, 3.0, 0.1);                 /* kurtosis of a normal */
    ASSERT_NEAR((double)beyond2 / N, 0.0455, 0.003); /* P(|g| > 2) */
    return 0;
}

static int portable_log(void)
{
    struct sfb__rng r;
    sfb__rng_seed(&r, 3);
    ASSERT(sfb__rng_log(1.0) == 0.0);
    for (int i = 0; i < 100000; i++) {
        double x = sfb__rng_uniform(&r);
        if (x == 0.0) continue;
        x = ldexp(x, (int)sfb__rng_below(&r, 200) - 100);
        double want = log(x), got = sfb__rng_log(x);
        if (!(fabs(got - want) <= 4 * fabs(want) * 0x1p-52 + 0x1p-60))
            TEST_FAIL_AT("log(%.17g): %.17g vs libm %.17g", x, got, want);
    }
    return 0;
}

static int streams_differ(void)
{
    struct sfb__rng a, b, c;
    sfb__rng_seed2(&a, 1, 0);
    sfb__rng_seed2(&b, 1, 1);
    sfb__rng_seed2(&c, 2, 0);
    uint64_t x = sfb__rng_next(&a), y = sfb__rng_next(&b), z = sfb__rng_next(&c);
    ASSERT(x != y && x != z && y != z);
    sfb__rng_seed2(&b, 1, 0);
    ASSERT(sfb__rng_next(&b) == x);
    /* Golden value: the same on every machine. */
    ASSERT(x == 0xc77b6107c66edf7bull);
    return 0;
}

static const struct test_case tests[] = {
    {"splitmix_reference", splitmix_reference},
    {"xoshiro_reference", xoshiro_reference},
    {"uniform_stats", uniform_stats},
    {"below_unbiased", below_unbiased},
    {"gauss_stats", gauss_stats},
    {"portable_log", portable_log},
    {"streams_differ", streams_differ},
};

TEST_MAIN(tests)
