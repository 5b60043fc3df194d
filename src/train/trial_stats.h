/* Whether a measured engine flip is faster beyond the noise (the trainer's
 * --sync auto --trial-clocks, src/train/trials.c; sfb.torch's sync="auto"
 * decides by the same rule in python/sfb/torch/_autoplan.py, and
 * test/unit/test_trial_stats.c checks the two agree on the same numbers).
 *
 * A trial times a group's clocks in windows: flipped, as it was, as it
 * was, flipped (a steady drift falls on both alike), four or eight. Two
 * tests must both pass:
 *  - the clocks': the flipped clocks' median beats the base clocks' by
 *    more than twice the standard error of the two medians' difference
 *    (1.253 σ/√n each, σ from the clocks' median absolute deviation from
 *    their own window's median);
 *  - the windows': the windows' medians, fitted by least squares as a
 *    level, a steady drift and the flipped windows' difference, give a
 *    gain beyond the one-sided 95 % t bound of that difference from the
 *    fit's residuals (a machine shared with other work runs whole windows
 *    slow or fast, which the clocks' spread inside a window does not see).
 * Where the clocks say faster and four windows cannot confirm it, the
 * trial runs four more windows (same order) and is judged on all eight.
 * The arithmetic is plain C in a fixed order (no BLAS): every rank reaches
 * the same bits from the same inputs, so every rank replans alike. */
#ifndef SFB_SRC_TRAIN_TRIAL_STATS_H
#define SFB_SRC_TRAIN_TRIAL_STATS_H

#include <stdint.h>

#define SFB__TRIAL_MAX_WINDOWS 8

/* Window w runs the flipped engines (w = 0, 3, 4, 7). */
static inline int sfb__trial_window_flipped(uint32_t w)
{
    return w % 4 == 0 || w % 4 == 3;
}

/* One rank's summary of a trial's clocks, in an order every rank shares:
 * each window's median, the base and the flipped clocks' medians, σ. */
enum { SFB__TS_BASE = SFB__TRIAL_MAX_WINDOWS, SFB__TS_FLIP, SFB__TS_SIGMA, SFB__TS_N };

/* Summarizes windows 0..nwin-1 (times[w]: n[w] clocks, in ms; sorted in
 * place) into s[SFB__TS_N] (unused windows 0). scratch: room for all the
 * clocks. */
void sfb__trial_summary(double *const *times, const uint32_t *n, uint32_t nwin,
                        double *scratch, double s[SFB__TS_N]);

/* The verdict on summaries combined over the ranks (each entry the
 * largest: the slowest rank's medians, the noisiest rank's σ). at[w]: the
 * mean clock of window w; nb, nf: the base and flipped clocks counted
 * (every rank counts the same). */
struct sfb__trial_verdict {
    double base_ms, flip_ms; /* the medians compared */
    double clear;            /* the gain the clocks' test asks of flip_ms (ms) */
    double gain, bound;      /* the windows' fitted gain (ms, > 0: the flip faster), its bound */
    int clocks_say;          /* the clocks' test passed */
    int flip;                /* keep the flip: both tests passed */
    int more;                /* four windows that cannot tell: run four more */
    int untold;              /* the flip's median was lower, within the noise: kept as it was */
};
void sfb__trial_judge(const double s[SFB__TS_N], const double *at, uint32_t nwin, uint32_t nb,
                      uint32_t nf, struct sfb__trial_verdict *v);

#endif
