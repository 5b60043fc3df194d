/* The job handle's fields, for src/job only: job.c (open, attach, the
 * clock protocol, replan, the collectives), job_elastic.c (going on
 * without a dead rank, taking joiners in) and job_engine.c (the engine
 * opened and closed). */
#ifndef SFB_SRC_JOB_IMPL_H
#define SFB_SRC_JOB_IMPL_H

#include <sfb/job.h>
#include "sfb/sync.h"
#include "src/comm/comm.h"
#include "src/ssp/ssp.h"

struct sfb_job {
    struct sfb__comm *comm;
    char call_name[32]; /* sfb_job_name_calls's ("": the calls' own names) */
    struct sfb__ssp ssp;
    int ssp_open;
    const struct sfb__sync_ops *engine; /* one for all, or sfb__permatrix_ops */
    void *engine_priv;
    /* what the engine opens with (attach's settings; a replan reopens it
     * from a later start_clock); topology: the job's copy */
    struct sfb__sync_env env;
    char *topology;
    /* counters of the engines a replan closed (stats and the summary
     * count the whole run) */
    struct sfb__sync_report closed;
    uint64_t hist[SFB_STALENESS_BINS];
    uint64_t sum_hist[SFB_STALENESS_BINS]; /* hist + the open engine's */
    /* per matrix (nmat, allocated at attach): */
    const struct sfb__sync_desc **engine_of; /* its engine (NULL: "auto", not chosen yet) */
    uint8_t *prec;          /* its factors' precision (enum sfb__wire_prec: factor_dtype) */
    uint8_t *dense_prec;    /* its rows' under FMS (dense_dtype) */
    struct sfb__buf **staged; /* sfb_job_dense_buffer's: the next dense update's buffer, or NULL */
    uint32_t nstaged;         /* (staged's length) */
    double (*plan_ms)[2];   /* auto: the cost model's predictions (NaN: forced) */
    struct sfb_matrix *mats;
    uint64_t *done;         /* bit m: matrix m published in the clock waited for */
    char *engines;          /* "sfb", "fms", or one name per matrix: "sfb,fms" */
    char *plan;             /* an "auto" entry: one line per matrix (NULL: none) */
    int planned;
    uint32_t nmat, max_s;
    /* the clock protocol: wait(next), publish(next) (or every matrix by
     * publish_one / publish_dense), next + 1, ... */
    int64_t next;   /* the clock the next wait is for */
    int waited;     /* wait(next) returned; its publish is due */
    uint32_t ndone; /* matrices of clock next published (bits in done) */
    int finished;   /* sfb_job_finish succeeded: peers may be gone, nothing to abort */
    double peer_timeout_s; /* the settings' (the budget's lower bound) */
    /* elastic jobs (job_elastic.c): what the comm opens with again after a
     * death (provider: the job's copy), and the traffic of the closed ones */
    struct sfb__comm_settings cs;
    char *provider;
    struct sfb__comm_traffic closed_traffic;
    /* growing (job_elastic.c): rank 0's join listener (-1: none); a process
     * that joined a running job: the clock it starts at (-1: it did not),
     * the job's max_s and the value rank 0 passed */
    int join_fd;
    int64_t join_clock;
    uint64_t join_extra[2];
    int join_attach_due;  /* the joiner's first attach receives rank 0's matrices */
    int pending[64];      /* rank 0: joiners taken in by sfb_job_join_poll */
    uint32_t npending;
    int reattach;         /* the attached matrices go at a world change (attach's reattach) */
    /* SFB_DEBUG_PUBLISH_UNCHECKED=1: publish skips the finiteness check,
     * as a hostile or broken peer would (tests of the receivers' check) */
    int debug_unchecked;
    int debug_skip_agree; /* SFB_DEBUG_SKIP_AGREE=1: attach agrees nothing */
};

/* job_engine.c: opens the engine job->engine_of names on job->env
 * (attach, replan, shrink, grow); closes it, its counters kept for the
 * run's totals. */
int sfb__job_open_engine(struct sfb_job *job);
void sfb__job_close_engine(struct sfb_job *job);
/* The attached matrices' shapes (and max_s) given to the comm, which
 * validates frames against them: a barrier (sfb__comm_set_shapes). */
int sfb__job_set_shapes(struct sfb_job *job);
/* Collective (job_agree.c): every rank attaches the same shapes and shared
 * settings, else -SFB_ECONFIG on every rank naming the first difference. */
int sfb__job_agree_attach(struct sfb_job *job, const struct sfb_job_attach *a);
/* The engine closed (its counters kept), the SSP table and the matrices
 * forgotten: attach may run again (a shrink or grow of `reattach`
 * matrices); the per-matrix state freed (attach, detach, close). */
void sfb__job_detach(struct sfb_job *job);
void sfb__job_free_matrices(struct sfb_job *job);
/* sfb_job_dense_buffer's buffers given back to the comm's pool (the engine's
 * close: a replan, a world change that reopens the comm, close). */
void sfb__job_drop_staged(struct sfb_job *job);

/* Elastic jobs (job_elastic.c): what sfb_job_attach refuses of one (after
 * it parsed the engines into job->engine_of); the
 * open of an elastic job (a joiner's handshake, rank 0's join listener);
 * a joiner's attach receiving rank 0's matrices after the shapes' barrier;
 * the listener closed. */
int sfb__job_elastic_check(const struct sfb_job *job, const struct sfb_job_attach *a);
int sfb__job_elastic_open(struct sfb_job *job, struct sfb__comm_settings *cs,
                          const char *join_text);
void sfb__job_elastic_listen(struct sfb_job *job);
int sfb__job_joined_attach(struct sfb_job *job, const struct sfb_job_attach *a);
void sfb__job_elastic_close(struct sfb_job *job);

#endif
