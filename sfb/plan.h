/* The per-matrix engine planner behind sfb_job_attach's engine list
 * ("sfb", "fms", "sfb,fms", "auto", "auto,fms,auto"): which engine carries
 * each matrix, an "auto" entry chosen by the cost model (sfb/cost.h) from
 * the start-up measurements (sfb/probe.c), and the plan's text, one line
 * per matrix. docs/design.md §"Per-matrix sync" and §"Choosing the engine
 * per matrix". */
#ifndef SFB_PLAN_H
#define SFB_PLAN_H

#include <sfb/sf.h>

#include <stdint.h>

struct sfb__comm;
struct sfb__sync_desc;

/* What the planner weighs of a job's matrices (all read during the call
 * only). */
struct sfb__plan_job {
    struct sfb__comm *comm; /* open; the plan is collective over it */
    const struct sfb_matrix *mats; /* n matrices (their shapes) */
    uint32_t n;
    uint32_t max_s;         /* samples per worker and clock */
    const char *topology;   /* overlay (NULL: "full") */
    uint32_t degree;        /* overlay out-degree, 0 = default */
    int flush_clock;        /* relays forward at clock boundaries (all SFB) */
    double link_gbps, latency_us; /* the links given (both 0: probed) */
    const uint32_t *sf_bytes; /* NULL or n: each matrix's SF frame bytes */
    const uint32_t *sf_nnz;   /* NULL or n: the CSR c's non-zeros (0: dense) */
    const uint8_t *prec;      /* n: each matrix's factor precision (enum sfb__wire_prec) */
    const uint8_t *dense_prec; /* n: its rows' precision under FMS (NULL: float32) */
    int ordered;               /* sfb_job_attach.ordered: FMS may push factors */
};

/* An engine list (NULL: "sfb"; sfb__sync_parse): one engine for every one
 * of n matrices, or one per matrix. Writes engine_of (n entries; NULL for
 * an "auto" entry). Returns 0 or -SFB_EUSAGE (sfb_last_error() says why,
 * as the API function fn). */
int sfb__plan_engines(const char *fn, const char *spec, uint32_t n,
                      const struct sfb__sync_desc **engine_of);

/* The "auto" entries (NULL in engine_of): per matrix the engine the cost
 * model predicts faster per clock, SFB where flush_clock. Collective (the
 * link probe unless given, then a broadcast of rank 0's measurements, so
 * every rank chooses alike). Writes ms[m] the predicted ms per clock of SFB
 * and FMS (NaN for a forced matrix) and *text (malloc'd, the caller frees
 * it, also after an error): one line per matrix, "matrix 0 1024x785: sfb
 * 16 ms, fms 44.5 ms per clock -> sfb" or "matrix 1 10x20: fms (forced)".
 * Returns 0 or a negative code (sfb_last_error()). */
int sfb__plan_auto(const struct sfb__plan_job *pj, const struct sfb__sync_desc **engine_of,
                   double (*ms)[2], char **text);

#endif
