/* Checks of a run's training settings (src/train/train_settings.c). */
#ifndef SFB_SRC_TRAIN_SETTINGS_H
#define SFB_SRC_TRAIN_SETTINGS_H

#include <sfb/train.h>

/* 0, or -EINVAL / -SFB_EUSAGE with the setting at fault recorded. */
int sfb__train_validate(const struct sfb_train_settings *s);

/* The trainer's debugging knobs, from the environment (docs/environment.md;
 * `sfb run --debug-delay-ms/--debug-slow-rank/--debug-slow-factor` set
 * them): a random extra delay in [0, delay_ms] ms after each clock's
 * compute, and rank slow_rank (-1: none) computing slow_factor times
 * slower. */
struct sfb__train_debug {
    double delay_ms;
    int slow_rank;
    double slow_factor;
    /* SFB_DEBUG_DIE_AT=R:C[,R:C...]: rank R (of the job as started) kills
     * itself with SIGKILL as clock C begins (tests of elastic jobs); up to 8 */
    uint32_t n_die;
    int die_rank[8];
    int64_t die_clock[8];
};
/* Reads them; world > 0: slow_rank must be a rank of it. 0, or
 * -SFB_EUSAGE naming the variable and its option. */
int sfb__train_debug_read(struct sfb__train_debug *d, uint32_t world);

#endif
