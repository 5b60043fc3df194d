/* One training worker's state, shared by the files of the training driver:
 * train.c (the clock loop), train_setup.c (joining the job, data, model,
 * agreement, resume) and train_report.c (metrics events and progress).
 * The worker reaches its peers only through the job API (sfb/job.h). */
#ifndef SFB_SRC_WORKER_H
#define SFB_SRC_WORKER_H

#include <sfb/job.h>
#include <sfb/model.h>
#include <sfb/train.h>
#include "src/base/rng.h"
#include "src/data/data_internal.h"
#include "src/train/checkpoint.h"
#include "src/train/metrics.h"
#include "src/train/replicas.h"
#include "src/train/train_settings.h"
#include "src/train/trials.h"

#include <stdint.h>

struct worker {
    const struct sfb_train_settings *s;
    struct sfb_job *job;
    uint32_t rank, world;
    uint32_t batch; /* samples per clock on this worker */
    struct sfb_dataset train, test; /* train: this rank's shard; test: rank 0 only */
    uint64_t train_rows;            /* rows of the whole training set */
    struct sfb_model *model;
    struct sfb_sampler *sampler;
    struct sfb_sf sf[SFB_MODEL_MAX_MATRICES];
    uint64_t *idx;
    struct sfb__metrics metrics;
    struct sfb__train_debug debug; /* SFB_DEBUG_DELAY_MS and _SLOW_* (train_settings.h) */
    struct sfb__rng debug_rng;
    /* checkpoints */
    int64_t start;            /* first clock (> 0 when resumed) */
    const char *ckpt_dir;     /* where checkpoints go (NULL: none) */
    char ckpt_config[SFB__CKPT_CONFIG_MAX + 1];
    struct sfb__rng resume_rng;
    char resume_engines[64]; /* --sync auto resumed: the checkpoint's engines */
    struct sfb__replicas replicas; /* the replica checks (replicas.h) */
    struct sfb__trials trials;     /* --trial-clocks (trials.h) */
    /* elastic jobs (train.c): the rank this worker started as, the data's
     * reloads, the last clock whose local step the replica holds, and the
     * clock whose local step is skipped (held already; -1: none) */
    uint32_t first_rank;
    uint32_t reshards;
    int64_t local_through, skip_local;
    /* a worker that joined the running job: its end clock (the job's), and
     * the clock whose replica check it skips (done before it came) */
    int joined;
    uint64_t joined_run[2]; /* the run's end and clocks per epoch, from rank 0 */
    int64_t skip_check;
    char join_text[SFB__CKPT_CONFIG_MAX + 256];
};

/* Joins the job, loads the data, builds the replica, compares settings
 * across ranks, resumes, attaches the replica and opens the metrics file.
 * On failure the peers are told (unless it was collective) and what is
 * open stays for sfb__worker_close. */
int sfb__worker_open(struct worker *w, const struct sfb_train_settings *s);
void sfb__worker_close(struct worker *w);
/* After an elastic job's world changed (a rank lost, processes joined):
 * this worker's rank and world from the job, its new shard, sampler and
 * (rank 0) test set, and the checkpoints' configuration. */
int sfb__worker_new_world(struct worker *w);
/* After a replan: the checkpoints' configuration names the engines now. */
void sfb__worker_engines_changed(struct worker *w);

/* ---- metrics events and progress (train_report.c) ---- */

/* Where a run is, for the progress callback and the summary. */
struct sfb__run_totals {
    uint64_t cpe, total, start;      /* clocks per epoch, run's end, first clock */
    double t_start, last_report;
    double loss_sum, epoch_loss;     /* since the last progress line / this epoch */
    uint64_t loss_n, epoch_n;
    struct sfb_job_stats first;      /* the counters when this run started */
    struct sfb_progress pr;
};

/* The epoch of the last of `done` clocks, ⌈done / cpe⌉ (docs/formats.md). */
uint32_t sfb__epoch_after(uint64_t done, uint64_t cpe);
void sfb__setup_event(struct worker *w);
void sfb__teardown_event(struct sfb__metrics *m);
void sfb__eval_event(struct worker *w, uint64_t clock, uint64_t epoch, double wall,
                     const struct sfb_eval *ev, double train_loss);
/* The "summary" and (overlay engines) "relay" events at the end. */
/* The "sync" metrics event, about the engines the job runs: each matrix's
 * engine and, with --sync auto, the cost model's predictions (once, after
 * attach). */
void sfb__engines_event(struct worker *w);
void sfb__summary_events(struct worker *w, const struct sfb__run_totals *rt,
                         const struct sfb_train_result *res);

#endif
