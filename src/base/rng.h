/* Small portable PRNG: splitmix64 for seeding, xoshiro256** for the stream,
 * plus uniform, bounded-integer and Gaussian samplers.
 *
 * Every result is a pure function of the seed: only integer arithmetic and
 * IEEE-754 double +, -, *, / and sqrt (all correctly rounded) are used, and
 * the logarithm the Gaussian needs is computed here rather than by libm, whose
 * last-bit results differ between platforms. So the same seed gives bitwise
 * the same numbers on every machine (x86-64, aarch64, ...), as long as the
 * compiler does not contract a*b+c into FMA (the build uses -std=c11, which
 * implies -ffp-contract=off in GCC). Not cryptographic. Not thread-safe per
 * state; give every thread its own state. */
#ifndef SFB_SRC_RNG_H
#define SFB_SRC_RNG_H

#include <stdint.h>

struct sfb__rng {
    uint64_t s[4];
    double spare; /* second Gaussian of the last polar pair */
    int has_spare;
};

/* One step of splitmix64's finalizer: a strong 64-bit mixing function, handy
 * to derive independent seeds (e.g. mix(seed ^ mix(stream))). */
static inline uint64_t sfb__rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* splitmix64 as a generator: advances *state by the golden-ratio step and
 * returns its mix. The small stateless streams (model initialisation, DML's
 * pair sampling, the patch subset) draw from it; sfb__rng_seed fills the
 * xoshiro state with its first four outputs. */
static inline uint64_t sfb__splitmix64(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ULL;
    return sfb__rng_mix(*state);
}

/* Seeds from one 64-bit value (any value, 0 included). */
void sfb__rng_seed(struct sfb__rng *r, uint64_t seed);

/* Seeds an independent stream identified by (seed, stream): use it for
 * per-epoch, per-sample or per-rank streams so results do not depend on the
 * order in which streams are drawn. */
void sfb__rng_seed2(struct sfb__rng *r, uint64_t seed, uint64_t stream);

/* Next 64 random bits. */
uint64_t sfb__rng_next(struct sfb__rng *r);

/* Uniform double in [0, 1), 53 random bits. */
double sfb__rng_uniform(struct sfb__rng *r);

/* Uniform integer in [0, n) without modulo bias (Lemire's method); n > 0. */
uint64_t sfb__rng_below(struct sfb__rng *r, uint64_t n);

/* Standard normal N(0, 1) (Marsaglia's polar method). */
double sfb__rng_gauss(struct sfb__rng *r);

/* Natural logarithm of x > 0, computed portably (see the top comment);
 * accurate to a few ulps. Exposed for generators that need exactly
 * reproducible geometric or exponential draws. */
double sfb__rng_log(double x);

#endif
