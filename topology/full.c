/* `full`: every node sends to every other directly (offsets 1 … P−1). The
 * requested degree is ignored. */
#include "topology/topo_ops.h"

static int full_offsets(uint32_t nodes, uint32_t degree, uint32_t *out, uint32_t *n)
{
    (void)degree;
    for (uint32_t o = 1; o < nodes; o++) out[o - 1] = o;
    *n = nodes - 1;
    return 0;
}

const struct sfb__topo_ops sfb__topo_full = {
    .name = "full",
    .summary = "full P2P: every node sends to all P-1 others",
    .overlay = 0,
    .offsets = full_offsets,
};
