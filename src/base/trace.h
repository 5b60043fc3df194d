/* The training timeline (docs/performance.md, "Where a step's time goes"):
 * with SFB_TIMELINE=FILE at sfb_job_open, every rank records what its
 * threads did and when — waits, publishes, drains and applies on the compute
 * thread, frames received on the network thread, a framework's own spans
 * (sfb.torch: forward, backward, step) — and writes them when the job closes
 * as Chrome trace-event JSON, one event per line (Perfetto,
 * chrome://tracing), to FILE with "%r" replaced by the rank, else
 * FILE.<rank>. Times are CLOCK_REALTIME microseconds, so the ranks of a host
 * (and hosts whose clocks NTP keeps together) line up; `sfb timeline`
 * merges the files and accounts each step. Off (the default) every event
 * site is one relaxed load and a branch. Process-global (one job per
 * process); any thread. */
#ifndef SFB_SRC_BASE_TRACE_H
#define SFB_SRC_BASE_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* The tracks (Chrome's thread ids) of a rank */
enum sfb__trace_track { SFB__TRACK_COMPUTE = 0, SFB__TRACK_NETWORK = 1, SFB__TRACK_USER = 2 };

extern int sfb__trace_enabled;

static inline int sfb__trace_on(void)
{
    return __atomic_load_n(&sfb__trace_enabled, __ATOMIC_RELAXED);
}

/* Starts recording for `rank`, to be written to the file `pattern` names
 * ("%r": the rank; without one ".<rank>" is appended). Returns 0,
 * -ENAMETOOLONG or -ENOMEM (named). A second open replaces the first's
 * events. */
int sfb__trace_open(const char *pattern, uint32_t rank);

/* Writes the events (if recording) and stops. Returns 0 or -errno with the
 * file named; the events are dropped either way. */
int sfb__trace_close(void);

/* CLOCK_REALTIME in microseconds. */
double sfb__trace_us(void);

/* One complete event of `track` from t0_us to now: name a string that
 * outlives the recorder (a literal), clock / matrix / peer < 0 and bytes 0
 * when they do not apply. */
void sfb__trace_span(enum sfb__trace_track track, const char *name, double t0_us, int64_t clock,
                     int32_t matrix, int32_t peer, uint64_t bytes);

/* As sfb__trace_span with both ends given and a name that is copied (a
 * framework's: "forward fc1"). */
void sfb__trace_span_copy(enum sfb__trace_track track, const char *name, double t0_us,
                          double t1_us, int64_t clock);

#endif
