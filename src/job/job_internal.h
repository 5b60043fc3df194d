/* What the trainer needs of a job and of the engines behind it beyond the
 * public API (include/sfb/job.h): the engine's counters for its metrics,
 * the orderly end split so that its timeline can mark the drain, and the
 * engines' registry, engine lists and SF frame sizes for its settings and
 * the --sync auto plan. src/job is the trainer's one door into the engines
 * (sfb/): src/train includes nothing of sfb/. src/train only. */
#ifndef SFB_SRC_JOB_INTERNAL_H
#define SFB_SRC_JOB_INTERNAL_H

#include <sfb/job.h>
#include <sfb/sf.h>

#include <stddef.h>
#include <stdint.h>

/* Bins of the staleness histogram: 0..15, and 16+ (SFB_STALENESS_BINS). */
#define SFB__JOB_STALENESS_BINS 17

/* An engine's live counters (sfb/sync.h's struct sfb__sync_report, the
 * part the trainer's metrics write). */
struct sfb__job_report {
    uint64_t data_msgs, data_bytes; /* data messages sent and their bytes */
    /* overlay engines only (relays = 1): the "relay" metrics event */
    int relays;
    uint64_t bundles;   /* of which bundles of two or more frames */
    uint64_t forwarded; /* others' frames this rank relayed */
    double mean_hops;   /* hops from the other origins to this rank */
    uint32_t max_hops;
    const uint64_t *per_origin; /* updates applied per origin (world entries) or NULL */
};

/* sfb_job_finish after the caller drained through `last` itself. */
int sfb__job_finish_after_drain(struct sfb_job *job, int64_t last);
/* The engine's staleness histogram (SFB__JOB_STALENESS_BINS entries);
 * attached jobs only. */
const uint64_t *sfb__job_staleness_hist(struct sfb_job *job);
/* The engine's counters (zeros before attach or without a report op). */
void sfb__job_report(struct sfb_job *job, struct sfb__job_report *rep);
/* The two engines of a plan, k as in sfb__job_plan_ms (0: SFB, 1: FMS):
 * k's --sync name, and which of them carries matrix m now (attached). */
const char *sfb__job_plan_engine(int k);
int sfb__job_plan_engine_of(const struct sfb_job *job, uint32_t m);
/* The attached matrices: their number (0 before attach) and matrix m. */
uint32_t sfb__job_n_matrices(const struct sfb_job *job);
const struct sfb_matrix *sfb__job_matrix(const struct sfb_job *job, uint32_t m);
/* The attached engine's name ("" before attach). */
const char *sfb__job_engine_name(const struct sfb_job *job);
/* engine "auto": matrix m's predicted ms per clock of SFB (ms[0]) and FMS
 * (ms[1]); -ENOENT without a plan. */
int sfb__job_plan_ms(const struct sfb_job *job, uint32_t m, double ms[2]);
/* Bytes per clock matrix m's engine sends by its textbook formula for
 * `batch` samples per worker and clock (SFB's factors in bf16: half);
 * 0 before attach. */
double sfb__job_formula_bytes(const struct sfb_job *job, uint32_t m, uint32_t batch);

/* ---- the sync engines, before any job (sfb/sync.h) ---- */

/* A registered engine (in registry order; the first is the default). */
struct sfb__job_engine_info {
    const char *name;    /* its --sync name */
    const char *summary; /* one line for --help */
    int overlays;        /* 1: its updates may travel over an overlay topology */
};
/* Engine i of the registry: 0, or -ENOENT past the end. */
int sfb__job_engine_info(size_t i, struct sfb__job_engine_info *out);
/* The registry index of the engine named `name`, or -1. */
int sfb__job_engine_find(const char *name);
/* A --sync value (sfb__sync_parse): writes *n (<= max) registry indices
 * to out, -1 for an "auto" entry. 0 or -SFB_EUSAGE naming the bad part. */
int sfb__job_sync_parse(const char *spec, int *out, uint32_t max, uint32_t *n);
/* Whether a --sync value has an "auto" entry. */
int sfb__job_sync_is_auto(const char *spec);
/* A priority policy's name (sfb_job_attach.priority): 0, or -EINVAL naming
 * the policies. */
int sfb__job_check_priority(const char *priority);
/* The bytes of sf's frame as the codec sends it, its factors in
 * `factor_dtype` ("f32" or NULL, "bf16"): what sfb_job_attach.sf_bytes
 * gives the plan. */
size_t sfb__job_sf_frame_size(const struct sfb_sf *sf, const char *factor_dtype);

#endif
