/* Deterministic minibatch sampler over this rank's shard (see sfb/data.h).
 *
 * Each rank permutes only its own rows each epoch (Fisher-Yates driven by
 * the stream (seed, epoch) of src/base/rng.c; with world > 1 the seed is mixed
 * with the rank, so ranks do not walk their shards in lockstep) and reads
 * consecutive slices of it: no coordination, O(N/P) memory. The
 * permutation of the current epoch is cached: consecutive clocks cost
 * O(batch). With one worker this is exactly the whole-set sampler. */
#include "config.h"
#include <sfb/data.h>
#include "src/data/data_internal.h"

#include "src/base/util.h"
#include "src/base/rng.h"

#include <inttypes.h>
#include <string.h>

#define TAG_RANK 0x72616e6bull /* "rank" */

struct sfb_sampler {
    uint64_t n, seed, clocks_per_epoch;
    uint32_t rank, world, batch;
    uint64_t epoch; /* epoch held in perm; valid if have_perm */
    int have_perm;
    uint64_t *perm;
    /* sfb__sampler_open_union: one sampler per emulated rank (else NULL) */
    struct sfb_sampler **part;
    uint32_t nparts;
    uint64_t shard_seed;
};

int sfb__sampler_open_rows(struct sfb_sampler **out, uint64_t n_local, uint64_t n_common,
                           uint32_t rank, uint32_t world, uint32_t batch, uint64_t seed)
{
    *out = NULL;
    if (world == 0 || rank >= world || batch == 0) {
        return sfb__error(-SFB_EUSAGE, "sampler: invalid rank %" PRIu32 " / world %" PRIu32
                          " / batch %" PRIu32 " (need rank < world, batch >= 1)",
                          rank, world, batch);
    }
    if (n_common < batch || n_local < n_common) {
        return sfb__error(-SFB_EUSAGE, "sampler: a shard of %" PRIu64 " samples (of %" PRIu32
                          " workers' shards the smallest) is fewer than one clock's batch of %"
                          PRIu32, n_common, world, batch);
    }
    if (n_local > SIZE_MAX / sizeof(uint64_t)) return sfb__error(-ENOMEM, "sampler: n too large");
    struct sfb_sampler *s = calloc(1, sizeof *s);
    if (!s) return sfb__error(-ENOMEM, "sampler: out of memory");
    s->perm = malloc((size_t)n_local * sizeof *s->perm);
    if (!s->perm) {
        free(s);
        return sfb__error(-ENOMEM, "sampler: out of memory for %" PRIu64 " samples", n_local);
    }
    s->n = n_local;
    s->seed = world > 1 ? sfb__rng_mix(seed ^ sfb__rng_mix(TAG_RANK + rank)) : seed;
    s->rank = rank;
    s->world = world;
    s->batch = batch;
    s->clocks_per_epoch = n_common / batch;
    *out = s;
    return 0;
}

int sfb_sampler_open(struct sfb_sampler **out, uint64_t n, uint32_t rank, uint32_t world,
                     uint32_t batch, uint64_t seed)
{
    SFB_ENTER();
    SFB_ARG(out);
    *out = NULL;
    if (world == 0 || rank >= world || batch == 0)
        return sfb__sampler_open_rows(out, 0, 0, rank, world, batch, seed);
    if (n / world < batch) {
        return sfb__error(-SFB_EUSAGE, "sampler: %" PRIu64 " samples over %" PRIu32 " workers "
                          "leave %" PRIu64 " per worker, fewer than one clock's batch of %"
                          PRIu32, n, world, n / world, batch);
    }
    struct sfb_shard sh = {rank, world, seed};
    return sfb__sampler_open_rows(out, sfb_shard_rows(&sh, n), n / world, rank, world, batch,
                                  seed);
}

int sfb__sampler_open_union(struct sfb_sampler **out, uint64_t n, uint32_t world, uint32_t batch,
                            uint64_t seed)
{
    *out = NULL;
    if (world == 0 || batch % world)
        return sfb__error(-SFB_EUSAGE, "sampler: a batch of %" PRIu32 " cannot be split over %"
                          PRIu32 " emulated workers", batch, world);
    struct sfb_sampler *s = calloc(1, sizeof *s);
    if (!s || !(s->part = calloc(world, sizeof *s->part))) {
        free(s);
        return sfb__error(-ENOMEM, "sampler: out of memory");
    }
    s->nparts = world;
    s->batch = batch;
    s->world = 1;
    s->shard_seed = seed;
    for (uint32_t r = 0; r < world; r++) {
        int ret = sfb_sampler_open(&s->part[r], n, r, world, batch / world, seed);
        if (ret) {
            sfb_sampler_close(&s);
            return ret;
        }
    }
    s->clocks_per_epoch = s->part[0]->clocks_per_epoch;
    *out = s;
    return 0;
}

void sfb_sampler_close(struct sfb_sampler **s)
{
    if (!s || !*s) return;
    for (uint32_t r = 0; r < (*s)->nparts; r++) sfb_sampler_close(&(*s)->part[r]);
    free((*s)->part);
    free((*s)->perm);
    free(*s);
    *s = NULL;
}

uint64_t sfb_sampler_clocks_per_epoch(const struct sfb_sampler *s)
{
    SFB_ARG_OR(s, 0);
    return s->clocks_per_epoch;
}

static void build_perm(struct sfb_sampler *s, uint64_t epoch)
{
    struct sfb__rng rng;
    sfb__rng_seed2(&rng, s->seed, epoch);
    uint64_t *p = s->perm;
    for (uint64_t i = 0; i < s->n; i++) p[i] = i;
    for (uint64_t i = s->n - 1; i > 0; i--) {
        uint64_t j = sfb__rng_below(&rng, i + 1);
        uint64_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    s->epoch = epoch;
    s->have_perm = 1;
}

int sfb_sampler_batch(struct sfb_sampler *s, uint64_t clock, uint64_t *out)
{
    SFB_ENTER();
    SFB_ARG(s);
    SFB_ARG(out);
    if (s->part) { /* rank r's batch, as rows of the whole set, r = 0, 1, … */
        uint32_t pb = s->batch / s->nparts;
        for (uint32_t r = 0; r < s->nparts; r++) {
            struct sfb_shard sh = {r, s->nparts, s->shard_seed};
            int ret = sfb_sampler_batch(s->part[r], clock, out + (size_t)r * pb);
            if (ret) return ret;
            for (uint32_t i = 0; i < pb; i++)
                out[(size_t)r * pb + i] = sfb_shard_global(&sh, out[(size_t)r * pb + i]);
        }
        return 0;
    }
    uint64_t epoch = clock / s->clocks_per_epoch;
    uint64_t t = clock % s->clocks_per_epoch;
    if (!s->have_perm || s->epoch != epoch) build_perm(s, epoch);
    uint64_t start = t * s->batch;
    memcpy(out, s->perm + start, (size_t)s->batch * sizeof *out);
    return 0;
}
