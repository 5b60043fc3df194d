/* What the trainer needs of a job beyond the public API (include/sfb/job.h):
 * the engine's counters for its metrics, and the orderly end split so that
 * its timeline can mark the drain. src/train only. */
#ifndef SFB_SRC_JOB_INTERNAL_H
#define SFB_SRC_JOB_INTERNAL_H

#include <sfb/job.h>

#include <stdint.h>

struct sfb__sync_report;

/* sfb_job_finish after the caller drained through `last` itself. */
int sfb__job_finish_after_drain(struct sfb_job *job, int64_t last);
/* The engine's staleness histogram (SFB_STALENESS_BINS entries); attached
 * jobs only. */
const uint64_t *sfb__job_staleness_hist(struct sfb_job *job);
/* The engine's counters (zeros before attach or without a report op). */
void sfb__job_report(struct sfb_job *job, struct sfb__sync_report *rep);
/* The attached engine's name ("" before attach). */
const char *sfb__job_engine_name(const struct sfb_job *job);
/* engine "auto": matrix m's predicted ms per clock of SFB (ms[0]) and FMS
 * (ms[1]); -ENOENT without a plan. */
int sfb__job_plan_ms(const struct sfb_job *job, uint32_t m, double ms[2]);

#endif
