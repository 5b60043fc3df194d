/* splitmix64 + xoshiro256** (Blackman & Vigna, public domain reference
 * algorithms), with samplers built only from correctly rounded operations so
 * that results are identical on every machine. */
#include "src/base/rng.h"

#include <math.h>

/* 64×64→128-bit products (GCC and Clang on 64-bit targets). */
__extension__ typedef unsigned __int128 u128;

void sfb__rng_seed(struct sfb__rng *r, uint64_t seed)
{
    /* splitmix64 stream: consecutive outputs fill the state; they are never
     * all zero, which xoshiro requires. */
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = sfb__splitmix64(&x);
    r->has_spare = 0;
    r->spare = 0.0;
}

void sfb__rng_seed2(struct sfb__rng *r, uint64_t seed, uint64_t stream)
{
    /* Mixing the stream id before combining keeps (seed, stream) and
     * (seed + 1, stream - 1) apart. */
    sfb__rng_seed(r, seed ^ sfb__rng_mix(stream + 0x632be59bd9b4e019ULL));
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t sfb__rng_next(struct sfb__rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double sfb__rng_uniform(struct sfb__rng *r)
{
    return (double)(sfb__rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t sfb__rng_below(struct sfb__rng *r, uint64_t n)
{
    /* Lemire, "Fast random integer generation in an interval" (2019). */
    u128 m = (u128)sfb__rng_next(r) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t thresh = (0 - n) % n;
        while (lo < thresh) {
            m = (u128)sfb__rng_next(r) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

double sfb__rng_log(double x)
{
    /* x = m·2^e with m in [sqrt(1/2), sqrt(2)); log m = 2·atanh(s),
     * s = (m-1)/(m+1), |s| < 0.1716, so 12 odd terms reach double precision.
     * frexp and ldexp are exact. */
    int e;
    double m = frexp(x, &e); /* m in [0.5, 1) */
    if (m < 0.70710678118654752440) {
        m *= 2.0;
        e -= 1;
    }
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    double term = s, sum = 0.0;
    for (int k = 1; k <= 25; k += 2) {
        sum += term / (double)k;
        term *= s2;
    }
    /* ln 2 split in a high part exact in few bits and a low correction keeps
     * e·ln2 accurate for large |e|. */
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    return (double)e * ln2_hi + ((double)e * ln2_lo + 2.0 * sum);
}

double sfb__rng_gauss(struct sfb__rng *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u, v, q;
    do {
        u = 2.0 * sfb__rng_uniform(r) - 1.0;
        v = 2.0 * sfb__rng_uniform(r) - 1.0;
        q = u * u + v * v;
    } while (q >= 1.0 || q == 0.0);
    double f = sqrt(-2.0 * sfb__rng_log(q) / q);
    r->spare = v * f;
    r->has_spare = 1;
    return u * f;
}
