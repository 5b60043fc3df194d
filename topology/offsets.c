/* Arithmetic the overlay graphs share (topology/topo_ops.h): the default
 * degree's ⌈log₂ P⌉ and the gcd fix that keeps a circulant graph strongly
 * connected. Below the graphs (halton.c) and the registry (topo.c), which
 * calls the graphs. */
#include "topology/topo_ops.h"

uint32_t sfb__topo_ceil_log2(uint32_t n)
{
    uint32_t l = 0;
    while (l < 32 && ((uint64_t)1 << l) < n) l++;
    return l;
}

static uint32_t gcd32(uint32_t a, uint32_t b)
{
    while (b) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

void sfb__topo_gcd_fix(uint32_t nodes, uint32_t *out, uint32_t *n)
{
    uint32_t g = nodes;
    for (uint32_t i = 0; i < *n; i++) g = gcd32(g, out[i]);
    if (g != 1) out[(*n)++] = 1; /* g ≠ 1 implies 1 is not an offset */
}
