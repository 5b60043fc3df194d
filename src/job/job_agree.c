/* Every rank of a job attaches the same (sfb_job_attach): the matrices'
 * shapes and the settings their frames, clocks and replicas depend on. A
 * rank that differed used to have its frames refused until the stall
 * timeout ("is every worker running the same --sync?"), or, where no frame
 * tells (`ordered` on one rank only), train apart in silence. Now every
 * rank fails the attach at once, naming what differs and where; nothing
 * is attached, and the job goes on (an attach with the same settings
 * follows). */
#include "config.h"
#include <sfb/job.h>
#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/comm/comm.h"
#include "src/job/job_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

/* Rank r's shapes (lens[r] / 8 of them) against rank 0's: the first
 * difference in rank order, then matrix order, so every rank names the
 * same one. */
static int name_difference(const uint8_t *all, const size_t *lens, uint32_t world)
{
    const uint8_t *base = all, *at = all + lens[0];
    size_t n0 = lens[0] / 8;
    for (uint32_t r = 1; r < world; at += lens[r], r++) {
        size_t n = lens[r] / 8;
        if (n != n0)
            return sfb__error(-SFB_ECONFIG, "sfb_job_attach: rank %u attaches %zu matrices where "
                              "rank 0 attaches %zu (every rank attaches the same shapes)", r, n,
                              n0);
        for (size_t m = 0; m < n; m++) {
            uint32_t rows = sfb__get_u32(at + 8 * m), cols = sfb__get_u32(at + 8 * m + 4);
            uint32_t rows0 = sfb__get_u32(base + 8 * m), cols0 = sfb__get_u32(base + 8 * m + 4);
            if (rows != rows0 || cols != cols0)
                return sfb__error(-SFB_ECONFIG, "sfb_job_attach: rank %u attaches matrix %zu as "
                                  "%u x %u where rank 0 has %u x %u (every rank attaches the same "
                                  "shapes)", r, m, rows, cols, rows0, cols0);
        }
    }
    return 0;
}

/* One allgather of (count, hash) per rank; only where they differ the
 * shapes themselves, to name the first that differs. */
static int agree_shapes(struct sfb__comm *c, const struct sfb_job_attach *a)
{
    uint32_t world = sfb__comm_world(c);
    uint8_t *shapes = malloc((size_t)a->n * 8), *sums = malloc((size_t)world * 16);
    if (!shapes || !sums) {
        free(shapes);
        free(sums);
        return sfb__error(-ENOMEM, "sfb_job_attach: out of memory for %u shapes", a->n);
    }
    for (uint32_t m = 0; m < a->n; m++) {
        sfb__put_u32(shapes + 8 * m, a->mats[m].rows);
        sfb__put_u32(shapes + 8 * m + 4, a->mats[m].cols);
    }
    uint8_t mine[16];
    sfb__put_u64(mine, a->n);
    sfb__put_u64(mine + 8, XXH3_64bits(shapes, (size_t)a->n * 8));
    int ret = sfb__comm_allgather(c, mine, sizeof mine, sums);
    int same = 1;
    for (uint32_t r = 1; !ret && r < world; r++) same &= !memcmp(sums + 16 * r, sums, 16);
    if (!ret && !same) {
        void *all = NULL;
        size_t *lens = calloc(world, sizeof *lens);
        ret = lens ? sfb__comm_allgatherv(c, shapes, (size_t)a->n * 8, &all, lens)
                   : sfb__error(-ENOMEM, "sfb_job_attach: out of memory");
        if (!ret) ret = name_difference(all, lens, world);
        free(all);
        free(lens);
    }
    free(shapes);
    free(sums);
    return ret;
}

/* The settings every rank must attach alike, as sfb__agree's text. Those
 * left out are each rank's own (apply_early, priority, flush_clock) or
 * rank 0's for all (link_gbps, latency_us, sf_bytes, sf_nnz). */
static char *settings_text(const struct sfb_job_attach *a, int ordered)
{
    char *text = NULL;
    if (asprintf(&text, "max_s=%u\nengine=%s\nstaleness=%lld\ntopology=%s\ndegree=%u\n"
                 "start_clock=%lld\nordered=%d\nreattach=%u\nfactor_dtype=%s\ndense_dtype=%s\n",
                 a->max_s, a->engine ? a->engine : "sfb", (long long)a->staleness,
                 a->topology ? a->topology : "full", a->degree, (long long)a->start_clock,
                 ordered, a->reattach, a->factor_dtype ? a->factor_dtype : "f32",
                 a->dense_dtype ? a->dense_dtype : "f32") < 0)
        return NULL;
    return text;
}

int sfb__job_agree_attach(struct sfb_job *job, const struct sfb_job_attach *a)
{
    if (sfb__comm_world(job->comm) == 1) return 0;
    int ret = agree_shapes(job->comm, a);
    if (ret) return ret;
    /* (an elastic job's replicas are ordered whatever the caller says) */
    char *text = settings_text(a, a->ordered != 0 || job->cs.elastic);
    if (!text) return sfb__error(-ENOMEM, "sfb_job_attach: out of memory");
    ret = sfb__comm_agree(job->comm, text);
    free(text);
    return ret == -SFB_ECONFIG ? sfb__error(ret, "sfb_job_attach: %s", sfb_last_error()) : ret;
}
