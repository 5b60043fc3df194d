/* The SSP clock table (docs/design.md §SSP clocks).
 *
 * Per origin rank it tracks the highest clock c such that every update of
 * that origin with clock ≤ c has been applied to the local replica. Updates
 * may arrive out of order (several paths, relays), so clocks above c that are
 * already applied are kept in a growable bitmap. The four conditions:
 *   bounded clock difference / model-state guarantee: before computing at
 *     clock t a worker waits until min over origins of applied ≥ t − s − 1;
 *   timestamped updates: every update carries its origin's clock;
 *   read-my-writes: the own origin's updates are applied at once, so its
 *     applied clock is t − 1 when computing clock t.
 * s = 0 is BSP; s = −1 never waits (asynchronous).
 * The table records, for every own clock, the minimum applied clock seen when
 * computing began, so tests can prove the guarantee after the run.
 * Compute thread only. */
#ifndef SFB_SRC_SSP_H
#define SFB_SRC_SSP_H

#include <stddef.h>
#include <stdint.h>

struct sfb__ssp_origin {
    int64_t applied;  /* all clocks ≤ applied are applied */
    uint64_t *above;  /* bit i: clock applied + 1 + i is applied */
    size_t words;
};

struct sfb__ssp {
    uint32_t world;
    int64_t staleness;
    struct sfb__ssp_origin *o;
    int64_t *record;  /* record[t] = min applied when clock t began */
    size_t record_len, record_cap;
};

/* start_clock: the first clock to be computed (0, or a resumed clock): every
 * origin counts as applied through start_clock − 1. Returns 0 or -ENOMEM. */
int sfb__ssp_init(struct sfb__ssp *t, uint32_t world, int64_t staleness, int64_t start_clock);
void sfb__ssp_fini(struct sfb__ssp *t);

/* Marks origin's update of `clock` applied. Returns 0; -EINVAL for an
 * origin outside the world; -EALREADY for a clock already applied (a
 * duplicate or replay: the caller must not have applied it twice — check
 * with sfb__ssp_is_applied first); -ENOMEM. */
int sfb__ssp_mark(struct sfb__ssp *t, uint32_t origin, int64_t clock);
int sfb__ssp_is_applied(const struct sfb__ssp *t, uint32_t origin, int64_t clock);
int64_t sfb__ssp_applied(const struct sfb__ssp *t, uint32_t origin);
int64_t sfb__ssp_min_applied(const struct sfb__ssp *t);
/* The clock every origin must have applied before computing clock `clock`
 * (clock − s − 1), or INT64_MIN when asynchronous. */
int64_t sfb__ssp_required(const struct sfb__ssp *t, int64_t clock);
/* 1 if computing `clock` is allowed now. */
int sfb__ssp_ready(const struct sfb__ssp *t, int64_t clock);
/* Records min applied for own clock `clock` (call when computing begins). */
int sfb__ssp_record(struct sfb__ssp *t, int64_t clock);

#endif
