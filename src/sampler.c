/* Deterministic minibatch sampler shared by every rank (see sfb/data.h).
 *
 * Every rank builds the same per-epoch permutation (Fisher-Yates driven by
 * the stream (seed, epoch) of src/rng.c) and reads its own round-robin slice,
 * so no coordination is needed and a run with P workers of batch S reads
 * exactly what one worker of batch P·S reads. The permutation of the current
 * epoch is cached: consecutive clocks cost O(batch). */
#include "config.h"
#include "sfb/data.h"

#include "src/common.h"
#include "src/rng.h"

#include <inttypes.h>
#include <string.h>

struct sfb_sampler {
    uint64_t n, seed, clocks_per_epoch;
    uint32_t rank, world, batch;
    uint64_t epoch; /* epoch held in perm; valid if have_perm */
    int have_perm;
    uint64_t *perm;
};

int sfb_sampler_open(struct sfb_sampler **out, uint64_t n, uint32_t rank, uint32_t world,
                     uint32_t batch, uint64_t seed)
{
    SFB_ENTER();
    SFB_ARG(out);
    *out = NULL;
    if (world == 0 || rank >= world || batch == 0) {
        return sfb__error(-SFB_EUSAGE, "sampler: invalid rank %" PRIu32 " / world %" PRIu32
                          " / batch %" PRIu32 " (need rank < world, batch >= 1)",
                          rank, world, batch);
    }
    uint64_t per_clock = (uint64_t)world * batch;
    if (n < per_clock) {
        return sfb__error(-SFB_EUSAGE, "sampler: %" PRIu64 " samples are fewer than one clock's "
                          "world x batch = %" PRIu32 " x %" PRIu32 " = %" PRIu64, n, world, batch,
                          per_clock);
    }
    if (n > SIZE_MAX / sizeof(uint64_t)) return sfb__error(-ENOMEM, "sampler: n too large");
    struct sfb_sampler *s = calloc(1, sizeof *s);
    if (!s) return sfb__error(-ENOMEM, "sampler: out of memory");
    s->perm = malloc((size_t)n * sizeof *s->perm);
    if (!s->perm) {
        free(s);
        return sfb__error(-ENOMEM, "sampler: out of memory for %" PRIu64 " samples", n);
    }
    s->n = n;
    s->seed = seed;
    s->rank = rank;
    s->world = world;
    s->batch = batch;
    s->clocks_per_epoch = n / per_clock;
    *out = s;
    return 0;
}

void sfb_sampler_close(struct sfb_sampler **s)
{
    if (!s || !*s) return;
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
    uint64_t epoch = clock / s->clocks_per_epoch;
    uint64_t t = clock % s->clocks_per_epoch;
    if (!s->have_perm || s->epoch != epoch) build_perm(s, epoch);
    uint64_t start = (t * s->world + s->rank) * s->batch;
    memcpy(out, s->perm + start, (size_t)s->batch * sizeof *out);
    return 0;
}
