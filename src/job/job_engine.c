/* The job's engine opened and closed (src/job/job_impl.h): attach, a
 * replan, a shrink and a grow all open the engine job->engine_of names on
 * job->env, and close it keeping its counters for the run's totals; attach,
 * a shrink and a grow set the comm's frame shapes (a barrier) first; a
 * detach (a shrink or grow of reattach matrices) forgets them. */
#include "config.h"
#include <sfb/job.h>
#include "sfb/sync.h"
#include "src/base/util.h"
#include "src/job/job_impl.h"

#include <stdio.h>
#include <stdlib.h>

/* The engine that runs the job: the one every matrix names when it can
 * carry them all (SFB any number, FMS one; in a job of one worker either),
 * else the per-matrix engine. Writes the per-matrix names to job->engines
 * (room for "sfb," per matrix). */
static const struct sfb__sync_ops *job_engine(struct sfb_job *job)
{
    int same = 1;
    size_t len = 0;
    for (uint32_t m = 0; m < job->nmat; m++) {
        same &= job->engine_of[m] == job->engine_of[0];
        len += (size_t)sprintf(job->engines + len, "%s%s", m ? "," : "", job->engine_of[m]->name);
    }
    if (same) sprintf(job->engines, "%s", job->engine_of[0]->name);
    if (same && (job->engine_of[0] != &sfb__fms_desc || job->nmat == 1 ||
                 sfb__comm_world(job->comm) == 1))
        return job->engine_of[0]->ops;
    return &sfb__permatrix_ops;
}

/* Opens the engine job->engine_of names on job->env. */
int sfb__job_open_engine(struct sfb_job *job)
{
    const struct sfb__sync_ops *engine = job_engine(job);
    job->engine_priv = calloc(1, engine->priv_size);
    if (!job->engine_priv) return sfb__error(-ENOMEM, "sfb_job_attach: out of memory");
    int ret = engine->open(job->engine_priv, &job->env);
    if (ret) {
        free(job->engine_priv);
        job->engine_priv = NULL;
        return ret;
    }
    job->engine = engine;
    return 0;
}

int sfb__job_set_shapes(struct sfb_job *job)
{
    struct sfb__wire_shape *shapes = malloc(job->nmat * sizeof *shapes);
    if (!shapes) return sfb__error(-ENOMEM, "sfb_job: out of memory");
    for (uint32_t m = 0; m < job->nmat; m++) {
        shapes[m].k = job->mats[m].rows;
        shapes[m].d = job->mats[m].cols;
    }
    int ret = sfb__comm_set_shapes(job->comm, shapes, job->nmat, job->max_s);
    free(shapes);
    return ret;
}

/* Closes the open engine, its counters kept for the run's totals. */
void sfb__job_close_engine(struct sfb_job *job)
{
    if (job->engine->report) {
        struct sfb__sync_report rep = {0};
        job->engine->report(job->engine_priv, &rep);
        job->closed.data_msgs += rep.data_msgs;
        job->closed.data_bytes += rep.data_bytes;
        job->closed.publish_wait_s += rep.publish_wait_s;
    }
    const uint64_t *h = job->engine->staleness_hist(job->engine_priv);
    for (int i = 0; h && i < SFB_STALENESS_BINS; i++) job->hist[i] += h[i];
    job->engine->close(job->engine_priv);
    free(job->engine_priv);
    job->engine_priv = NULL;
    job->engine = NULL;
    sfb__job_drop_staged(job);
}

void sfb__job_drop_staged(struct sfb_job *job)
{
    for (uint32_t m = 0; job->staged && m < job->nstaged; m++) {
        sfb__buf_put(job->staged[m]);
        job->staged[m] = NULL;
    }
}

/* The per-matrix state forgotten (attach allocates it again). */
void sfb__job_free_matrices(struct sfb_job *job)
{
    sfb__job_drop_staged(job);
    free(job->staged);
    job->staged = NULL;
    job->nstaged = 0;
    free(job->engine_of);
    free(job->prec);
    free(job->dense_prec);
    free(job->plan_ms);
    free(job->mats);
    free(job->done);
    free(job->engines);
    free(job->plan);
    free(job->topology);
    job->topology = NULL;
    job->engine_of = NULL;
    job->prec = NULL;
    job->dense_prec = NULL;
    job->plan_ms = NULL;
    job->mats = NULL;
    job->done = NULL;
    job->engines = NULL;
    job->plan = NULL;
    job->planned = 0;
}

void sfb__job_detach(struct sfb_job *job)
{
    if (job->engine) sfb__job_close_engine(job);
    if (job->ssp_open) sfb__ssp_fini(&job->ssp);
    job->ssp_open = 0;
    sfb__job_free_matrices(job);
    job->nmat = 0;
    job->waited = 0;
    job->ndone = 0;
    job->reattach = 0;
}
