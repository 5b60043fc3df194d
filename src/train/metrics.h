/* Per-worker metrics as JSON lines, one object per clock plus event lines
 * (evaluations, the end-of-run summary). Format in docs/formats.md (Metrics). */
#ifndef SFB_SRC_METRICS_H
#define SFB_SRC_METRICS_H

#include <stdint.h>
#include <stdio.h>

struct sfb__clock_metrics {
    int64_t clock;
    uint32_t epoch;
    double wall;        /* seconds since training started */
    double t_begin;     /* CLOCK_MONOTONIC seconds when computing this clock began
                           (comparable across the processes of one host) */
    double t_publish;   /* CLOCK_MONOTONIC seconds just before this clock's
                           update was sent */
    double compute_s;   /* computing SFs this clock */
    double wait_s;      /* blocked on the SSP condition */
    double budget_wait_s; /* of which while this rank's bandwidth budget held its sends */
    uint64_t queued_bytes; /* data waiting to leave at the clock's end */
    double apply_s;     /* reconstructing updates into the replica */
    uint64_t bytes_sent, bytes_recv, msgs_sent, msgs_recv;
    uint64_t data_msgs, data_bytes; /* data messages (bare SF frames and bundles,
                                       no heartbeats) sent, and their bytes */
    int64_t staleness;  /* max observed (own clock − update clock − 1) */
    int64_t min_applied; /* min over origins of the applied clock when computing began */
    uint64_t applied_early; /* updates applied before SSP required them */
    double objective;   /* mean loss of this clock's minibatch */
    double samples_per_s;
    double lr;
};

struct sfb__metrics {
    FILE *f;
    uint32_t rank;
    char *path;
    int err; /* errno of the first failed write, 0 if none */
};

/* Opens `pattern` with "%r" replaced by the rank (the file is truncated).
 * A NULL pattern gives a metrics object that records nothing. */
int sfb__metrics_open(struct sfb__metrics *m, const char *pattern, uint32_t rank);
void sfb__metrics_clock(struct sfb__metrics *m, const struct sfb__clock_metrics *c);
/* Writes {"event":"<name>","rank":r, <fields>} where `fields` is a
 * printf-formatted fragment of JSON members ("\"a\":1,\"b\":2"). */
/* v as a JSON number ("%.6g"), or "null" when it is NaN or infinite (JSON
 * has neither); writes into buf and returns it. */
const char *sfb__json_num(char buf[32], double v);

void sfb__metrics_event(struct sfb__metrics *m, const char *name, const char *fields, ...)
    __attribute__((format(printf, 3, 4)));
/* Flushes and closes: 0, or the errno of the first write that failed
 * (e.g. -ENOSPC), with sfb_last_error() naming the file. */
int sfb__metrics_close(struct sfb__metrics *m);
/* This process's peak resident set size so far in bytes (Linux: VmHWM,
 * through getrusage's ru_maxrss), 0 if unknown. */
uint64_t sfb__peak_rss_bytes(void);
/* This process's proportional set size now (bytes; 0 if unknown). */
uint64_t sfb__pss_bytes(void);
/* Expands "%r" in a path pattern; caller frees. */
char *sfb__path_for_rank(const char *pattern, uint32_t rank);
/* sfb__metrics_open for a worker that joined a running elastic job at
 * `clock` as `rank`: its file's %r is "RANK.joined-CLOCK" (a joiner's rank
 * may be the one a live worker started as, whose file that is). */
int sfb__metrics_open_joined(struct sfb__metrics *m, const char *pattern, uint32_t rank,
                             int64_t clock);

#endif
