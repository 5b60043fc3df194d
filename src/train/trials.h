/* `sfb run --sync auto --trial-clocks T`: the start-up plan, measured
 * (docs/design.md, "Re-deciding mid-run"). Where a matrix's two predictions
 * are within 4 ×, the run measures per group (the matrices of one shape,
 * the costliest first, at most 4) in four windows of T / 2 counted clocks
 * — the group flipped, as it was, as it was, flipped: a steady drift of
 * the machine falls on both alike — or eight, and keeps a flip that made
 * the clock faster beyond the noise (trial_stats.h; sfb_job_replan at a
 * clock boundary). A clock's time is the interval between two publishes on
 * this rank; each rank summarizes its windows (medians, σ), the slowest
 * rank's count (an allgather at the end of each group, the same clock on
 * every rank, so every rank decides alike). The first clock under new
 * engines (it pays the replan) is not counted.
 * Off by default: a measured choice depends on timing, so two runs, or a
 * run and its resumption, could choose apart (not the same bits). */
#ifndef SFB_SRC_TRAIN_TRIALS_H
#define SFB_SRC_TRAIN_TRIALS_H

#include <sfb/model.h>
#include "src/train/trial_stats.h"

#include <stdint.h>

struct sfb_job;
struct sfb__metrics;

#define SFB__TRIAL_GROUPS 4

struct sfb__trials {
    uint32_t clocks;   /* T: clocks timed per trial (0: off) */
    uint32_t n;        /* the job's matrices */
    int stage;         /* enum in trials.c */
    int64_t first;     /* the run's first clock */
    int64_t since;     /* the first clock under the engines now */
    uint32_t ngroups;
    int on;            /* the group on trial */
    int window;        /* its window (0, 3, 4, 7: flipped; the others the base) */
    uint32_t nwin;     /* the windows it runs: 4, or 8 where 4 could not tell */
    uint32_t counted;  /* clocks counted in the window */
    uint8_t group[SFB_MODEL_MAX_MATRICES]; /* its group (UINT8_MAX: not measured) */
    uint8_t fms[SFB_MODEL_MAX_MATRICES];   /* 1: FMS carries it now */
    uint8_t base[SFB_MODEL_MAX_MATRICES];  /* the plan the group on trial flips */
    double ms[SFB_MODEL_MAX_MATRICES][2];  /* measured ms a clock by sfb, fms (NaN: not) */
    uint8_t untold[SFB_MODEL_MAX_MATRICES]; /* 1: the flip's median lower, within the noise */
    double *times;     /* this group's clocks on this rank, ceil(T/2) a window, then
                          as much scratch */
    uint32_t nt[SFB__TRIAL_MAX_WINDOWS];  /* clocks counted per window */
    double at[SFB__TRIAL_MAX_WINDOWS];    /* the sum of their clock numbers */
    double last;       /* when the clock before was published here */
    uint32_t replans;
};

/* After attach: which matrices are measured (the job's predictions,
 * SFB_DEBUG_TRIAL_ALL=1: every predicted one). Off (nothing to do) unless
 * trial_clocks > 0 and the plan has close predictions. 0 or -ENOMEM. */
int sfb__trials_open(struct sfb__trials *tr, struct sfb_job *job, uint32_t trial_clocks,
                     int64_t first);
void sfb__trials_close(struct sfb__trials *tr);
/* After publishing clock t (t + 1 < the run's clocks: no replan at the
 * end): times it, and at a trial's end decides with every rank (an
 * allgather) and replans. Writes a "trial" metrics event per group and, on
 * rank 0, the measured plan once done. 0 or the job's error. */
int sfb__trials_clock(struct sfb__trials *tr, struct sfb_job *job, int64_t t,
                      struct sfb__metrics *metrics, uint32_t rank);

#endif
