/* Sharding of a data set's rows over the workers (declared in
 * include/sfb/data.h).
 *
 * The rows are cut, in file order, into blocks of `world` consecutive rows;
 * block b is rotated by an offset o_b drawn from (seed, b), and the row at
 * position q of the block belongs to rank (q + o_b) mod world. So every rank
 * holds exactly one row of every full block (a stratified sample: a sorted
 * file still gives every shard the whole mix), the last partial block adds
 * one row to some ranks (sizes differ by at most 1), and owner, size and the
 * j-th row of a shard are O(1) pure functions of (seed, world, rank, row)
 * — no table, no dependence on the order in which a loader reads. */
#include "config.h"
#include <sfb/data.h>

#include "src/base/util.h"
#include "src/base/rng.h"

#define TAG_SHARD 0x7368617264ull /* "shard" */

/* The rotation of block b: uniform in [0, world) up to a bias < world/2^64. */
static uint32_t rotation(const struct sfb_shard *s, uint64_t b)
{
    if (s->world <= 1) return 0;
    return (uint32_t)(sfb__rng_mix(sfb__rng_mix(s->seed ^ TAG_SHARD) ^ b) % s->world);
}

uint32_t sfb_shard_owner(const struct sfb_shard *s, uint64_t i)
{
    SFB_ARG_OR(s, 0);
    if (s->world <= 1) return 0;
    uint64_t b = i / s->world, q = i % s->world;
    return (uint32_t)((q + rotation(s, b)) % s->world);
}

/* Position in block b of the shard's row. */
static uint64_t position(const struct sfb_shard *s, uint64_t b)
{
    return ((uint64_t)s->rank + s->world - rotation(s, b)) % s->world;
}

uint64_t sfb_shard_rows(const struct sfb_shard *s, uint64_t n)
{
    SFB_ARG_OR(s, 0);
    if (s->world <= 1) return n;
    uint64_t full = n / s->world, rem = n % s->world;
    return full + (rem && position(s, full) < rem);
}

uint64_t sfb_shard_global(const struct sfb_shard *s, uint64_t j)
{
    SFB_ARG_OR(s, 0);
    if (s->world <= 1) return j;
    return j * s->world + position(s, j);
}
