/* Internal: the ops table every topology implements, and helpers shared by
 * topology/ sources. Adding a topology = one .c with an ops table + one registry
 * line in topology/topo.c. */
#ifndef SFB_TOPOLOGY_TOPO_OPS_H
#define SFB_TOPOLOGY_TOPO_OPS_H

#include <sfb/topo.h>

struct sfb__topo_ops {
    const char *name;
    const char *summary;
    /* 1: an overlay, whose frames relays forward; 0: every node sends to
     * every other itself (the requested degree is ignored). */
    int overlay;
    /* Writes the offsets for `nodes` ≥ 2 nodes and requested degree
     * 1 ≤ degree ≤ nodes − 1 into out (capacity degree + 1), distinct and in
     * [1, nodes − 1], in generation order; sets *n ≥ 1. Must leave
     * gcd(offsets ∪ {nodes}) = 1 (use sfb__topo_gcd_fix). Returns 0. */
    int (*offsets)(uint32_t nodes, uint32_t degree, uint32_t *out, uint32_t *n);
};

extern const struct sfb__topo_ops sfb__topo_full;
extern const struct sfb__topo_ops sfb__topo_halton;
extern const struct sfb__topo_ops sfb__topo_halton_classic;

/* Arithmetic the graphs share (topology/offsets.c). ⌈log₂ n⌉ (0 for n ≤ 1). */
uint32_t sfb__topo_ceil_log2(uint32_t n);

/* If gcd(out[0..*n) ∪ {nodes}) ≠ 1 the graph is not strongly connected:
 * appends offset 1 (the caller's buffer has room for one more). */
void sfb__topo_gcd_fix(uint32_t nodes, uint32_t *out, uint32_t *n);

#endif
