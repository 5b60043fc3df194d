/* `halton` and `halton-classic` offsets (docs/design.md §Topology).
 *
 * All arithmetic is exact integer arithmetic: φ_b(n) = a / b^m with the digits
 * of n mirrored, so ⌊x·φ_b(n)⌋ = ⌊x·a / b^m⌋ and no floating-point rounding
 * can make two machines (or the Python checker) disagree on an offset.
 */
#include "topology/topo_ops.h"

/* Radical inverse of n in `base` as num / den (den = base^digits). */
static void radical_inverse(uint64_t n, uint64_t base, uint64_t *num, uint64_t *den)
{
    uint64_t a = 0, d = 1;
    while (n > 0) {
        a = a * base + n % base;
        d *= base;
        n /= base;
    }
    *num = a;
    *den = d;
}

/* Adds o to out if new; returns 1 if added. The list is at most ~log P long
 * (Q ≥ P−1 never gets here), so a linear scan is cheapest. */
static int add_unique(uint32_t *out, uint32_t *n, uint32_t o)
{
    for (uint32_t i = 0; i < *n; i++)
        if (out[i] == o) return 0;
    out[(*n)++] = o;
    return 1;
}

static void complete(uint32_t nodes, uint32_t *out, uint32_t *n)
{
    for (uint32_t o = 1; o < nodes; o++) out[o - 1] = o;
    *n = nodes - 1;
}

/* o_k = 2^j_k + ⌊2^j_k · φ₃(k+1)⌋, clipped to [1, P−1].
 * j_k = round(k·(L−1)/(Q−1)) for Q ≤ L (round half up; Q = 1: j = 0, the
 * ring), j_k = k mod L for Q > L. A duplicate is skipped and the next k
 * taken. Q ≥ P−1 gives the complete digraph. For L < Q < P−1 the scales can
 * run out of distinct values (e.g. L divisible by 3 pins the last base-3
 * digit of k+1 per scale), so k stops at 16·(P+Q) and the degree may come
 * out below Q. */
static int halton_offsets(uint32_t nodes, uint32_t degree, uint32_t *out, uint32_t *n)
{
    if (degree >= nodes - 1) {
        complete(nodes, out, n);
        return 0;
    }
    uint32_t L = sfb__topo_ceil_log2(nodes);
    uint64_t kmax = 16 * ((uint64_t)nodes + degree);
    *n = 0;
    for (uint64_t k = 0; *n < degree && k < kmax; k++) {
        uint64_t j;
        if (degree == 1)
            j = 0;
        else if (degree <= L)
            j = (2 * k * (L - 1) + (degree - 1)) / (2 * (uint64_t)(degree - 1));
        else
            j = k % L;
        uint64_t num, den, o;
        radical_inverse(k + 1, 3, &num, &den);
        /* j ≤ L − 1 ≤ 23 and den ≤ 3(k+1) < 2^31: no overflow. */
        o = ((uint64_t)1 << j) + ((num << j) / den);
        if (o > nodes - 1) o = nodes - 1;
        add_unique(out, n, (uint32_t)o);
    }
    sfb__topo_gcd_fix(nodes, out, n);
    return 0;
}

/* o_l = 1 + ⌊(P−1)·φ₂(l)⌋, l = 1, 2, …, duplicates skipped. Every value in
 * [1, P−1] appears once 2^bits(l) ≥ P−1, so the loop ends for Q < P−1. */
static int classic_offsets(uint32_t nodes, uint32_t degree, uint32_t *out, uint32_t *n)
{
    if (degree >= nodes - 1) {
        complete(nodes, out, n);
        return 0;
    }
    *n = 0;
    for (uint64_t l = 1; *n < degree; l++) {
        uint64_t num, den;
        radical_inverse(l, 2, &num, &den);
        add_unique(out, n, (uint32_t)(1 + ((uint64_t)(nodes - 1) * num) / den));
    }
    sfb__topo_gcd_fix(nodes, out, n);
    return 0;
}

const struct sfb__topo_ops sfb__topo_halton = {
    .name = "halton",
    .summary = "circulant overlay, log2(P) dyadic scales placed by base-3 Halton points",
    .overlay = 1,
    .offsets = halton_offsets,
};

const struct sfb__topo_ops sfb__topo_halton_classic = {
    .name = "halton-classic",
    .summary = "MALT-style overlay: offsets 1 + floor((P-1)*phi2(l)); diameter grows ~linearly",
    .overlay = 1,
    .offsets = classic_offsets,
};
