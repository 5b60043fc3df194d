/* Elastic jobs (include/sfb/job.h: sfb_job_lost, sfb_job_shrink; docs/design.md,
 * "Elastic jobs"): when a rank dies, the survivors go on without it, from
 * the most advanced state one of them holds, with no restart and no roll
 * back.
 *
 *   1. every survivor learns who died: its own liveness found it, or a LOST
 *      frame from the survivor that did (sent again here, so that ranks not
 *      watching the dead one stop waiting for it);
 *   2. each closes its fabric and engine and meets the others at the lowest
 *      survivor's reserved address (src/comm/comm_elastic.c), renumbered:
 *      ranks above the dead one move down one;
 *   3. they allgather the clock their replicas hold whole (ordered mode: a
 *      clock's updates of a matrix are applied together, so the SSP table's
 *      minimum applied clock is exactly what the replica holds); the most
 *      advanced survivor's matrices go to all (bit-identical replicas
 *      again), and the engine opens from the next clock on the same
 *      matrices and a fresh SSP table of the new world. */
#include "config.h"
#include <sfb/job.h>
#include "src/base/util.h"
#include "src/base/trace.h"
#include "src/comm/comm.h"
#include "src/job/job_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int sfb__job_elastic_check(const struct sfb_job *job, const struct sfb_job_attach *a)
{
    if (!job->cs.elastic) return 0;
    if (a->staleness != 0)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: an elastic job runs at staleness 0 (%lld "
                          "asked): under SSP the survivors' replicas hold different updates, "
                          "and none of them is a state every update is in or out of whole",
                          (long long)a->staleness);
    const char *e = a->engine ? a->engine : "sfb";
    if (strcmp(e, "sfb") != 0)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: an elastic job runs the engine \"sfb\", "
                          "not \"%s\": FMS keeps each matrix's rows on one rank's server, which "
                          "dies with it", e);
    if (a->flush_clock)
        return sfb__error(-SFB_EUSAGE, "sfb_job_attach: an elastic job's relays forward as "
                          "frames come (not flush_clock)");
    return 0;
}

int sfb_job_lost(struct sfb_job *job)
{
    if (!job || !job->comm || !job->cs.elastic) return -1;
    return sfb__comm_lost(job->comm);
}

/* Steps 1 and 2: the old comm closed (its traffic kept), the survivors'
 * comm open. */
static int rejoin(struct sfb_job *job, uint32_t lost)
{
    struct sfb__comm *c = job->comm;
    uint32_t rank = sfb__comm_rank(c), world = sfb__comm_world(c);
    uint32_t leader = lost == 0 ? 1 : 0;
    char rdv[80], key[24];
    snprintf(rdv, sizeof rdv, "%s", sfb__comm_elastic_addr(c, leader));
    snprintf(key, sizeof key, "0x%016" PRIx64, sfb__comm_job_key(c));
    sfb__comm_tell_lost(c, lost);
    struct sfb__comm_traffic t;
    sfb__comm_traffic(c, &t);
    job->closed_traffic.bytes_sent += t.bytes_sent;
    job->closed_traffic.bytes_recv += t.bytes_recv;
    job->closed_traffic.frames_sent += t.frames_sent;
    job->closed_traffic.frames_recv += t.frames_recv;
    /* held until the survivors' rendezvous has bound the port */
    int reserved = sfb__comm_take_reservation(c);
    sfb__comm_close(&job->comm);
    struct sfb__comm_settings cs = job->cs;
    cs.rank = (int)(rank - (rank > lost));
    cs.world = (int)world - 1;
    cs.rendezvous = rdv;
    cs.job_key = key;
    SFB_LOG_I("rank %u died: going on as rank %d of %d (the survivors meet at %s)", lost, cs.rank,
              cs.world, rdv);
    int ret = sfb__comm_open(&job->comm, &cs);
    if (reserved >= 0) close(reserved);
    if (ret)
        return sfb__error(ret, "going on without rank %u: the survivors' rendezvous at %s "
                          "failed: %s", lost, rdv, sfb_error_message(ret));
    return 0;
}

/* Step 3: the state every survivor goes on from. */
static int agree_state(struct sfb_job *job, int64_t applied, int64_t *next, uint32_t *source)
{
    uint32_t world = sfb__comm_world(job->comm);
    int64_t *all = calloc(world, sizeof *all);
    if (!all) return sfb__error(-ENOMEM, "sfb_job_shrink: out of memory");
    int ret = world > 1 ? sfb__comm_allgather(job->comm, &applied, sizeof applied, all) : 0;
    if (world == 1) all[0] = applied;
    uint32_t src = 0;
    for (uint32_t r = 1; r < world; r++)
        if (all[r] > all[src]) src = r;
    *source = src;
    *next = all[src] + 1;
    free(all);
    if (ret) return sfb__comm_explain(job->comm, ret);
    struct sfb__wire_shape *shapes = malloc(job->nmat * sizeof *shapes);
    if (!shapes) return sfb__error(-ENOMEM, "sfb_job_shrink: out of memory");
    for (uint32_t m = 0; m < job->nmat; m++) {
        shapes[m].k = job->mats[m].rows;
        shapes[m].d = job->mats[m].cols;
    }
    ret = sfb__comm_set_shapes(job->comm, shapes, job->nmat, job->max_s);
    free(shapes);
    for (uint32_t m = 0; m < job->nmat && !ret && world > 1; m++)
        ret = sfb__comm_broadcast(job->comm, src, job->mats[m].data,
                                  (size_t)job->mats[m].rows * job->mats[m].cols * sizeof(float));
    return ret ? sfb__comm_explain(job->comm, ret) : 0;
}

int sfb_job_shrink(struct sfb_job *job, int64_t *next, uint32_t *source)
{
    SFB_ENTER();
    SFB_ARG(job);
    SFB_ARG(next);
    SFB_ARG(source);
    if (!job->comm) return sfb__error(-SFB_EPEER, "sfb_job_shrink: the job ended already");
    if (!job->cs.elastic)
        return sfb__error(-SFB_EUSAGE, "sfb_job_shrink: not an elastic job (sfb_job_settings."
                          "elastic)");
    if (!job->engine) return sfb__error(-SFB_EUSAGE, "sfb_job_shrink: no matrices attached");
    int lost = sfb__comm_lost(job->comm);
    if (lost < 0)
        return sfb__error(-SFB_EUSAGE, "sfb_job_shrink: no rank is lost (%s)",
                          sfb__comm_check(job->comm) ? sfb_last_error() : "the job is healthy");
    double t0 = sfb__now();
    int64_t applied = sfb__ssp_min_applied(&job->ssp);
    sfb__job_close_engine(job);
    sfb__ssp_fini(&job->ssp);
    job->ssp_open = 0;
    int ret = rejoin(job, (uint32_t)lost);
    if (!ret) ret = agree_state(job, applied, next, source);
    if (!ret) ret = sfb__ssp_init(&job->ssp, sfb__comm_world(job->comm), 0, *next);
    if (ret) {
        sfb__comm_close(&job->comm);
        return ret;
    }
    job->ssp_open = 1;
    job->env.comm = job->comm;
    job->env.ssp = &job->ssp;
    job->env.start_clock = *next;
    job->next = *next;
    job->waited = 0;
    job->ndone = 0;
    memset(job->done, 0, (job->nmat + 63) / 64 * sizeof *job->done);
    if ((ret = sfb__job_open_engine(job))) {
        sfb__comm_close(&job->comm);
        return ret;
    }
    SFB_LOG_I("going on without rank %d: %u workers from clock %lld, the replicas rank %u "
              "held (%.2f s)", lost, sfb__comm_world(job->comm), (long long)*next, *source,
              sfb__now() - t0);
    return 0;
}
