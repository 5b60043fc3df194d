/* Replica health (docs/robustness.md, "Replica checks"): every worker holds
 * a full replica of every matrix. With --ordered (BSP: the job applies each
 * clock's updates in rank order) they are the same bits on every rank:
 * every --check-every clocks the ranks compare each matrix's fingerprint
 * (XXH3 of its bytes) at the start of a clock, where every replica holds
 * exactly the updates of the clocks before; a matrix that differs on a
 * minority of ranks is named (rank, matrix, the rows that differ) and
 * copied there from the majority, and the job goes on. At the end of a run
 * (every update drained) the comparison runs once more; without --ordered
 * the replicas hold the same updates added in another order, and what
 * differs is measured (the drift) rather than repaired. */
#ifndef SFB_SRC_TRAIN_REPLICAS_H
#define SFB_SRC_TRAIN_REPLICAS_H

#include <stdint.h>

struct worker;

struct sfb__replicas {
    uint64_t checks;     /* comparisons done */
    uint64_t repaired;   /* matrices copied from the majority (on any rank) */
    double drift;        /* the last end-of-run drift (max |a − b| / max |b|), 0: identical */
    int drift_matrix;    /* its matrix, -1: none */
    uint32_t drift_rank; /* the rank whose replica drifted most from rank 0's */
    /* SFB_DEBUG_FLIP=RANK:CLOCK[:MATRIX[:INDEX[:BIT]]]: flips one bit of one
     * replica at the start of a clock (tests of the repair) */
    int flip_on;
    uint32_t flip_rank, flip_matrix, flip_bit;
    uint64_t flip_clock, flip_index;
};

/* Reads SFB_DEBUG_FLIP. Returns 0 or -SFB_EUSAGE naming the value. */
int sfb__replicas_open(struct sfb__replicas *rc);

/* At the start of `clock` (after its wait and the previous clock's local
 * step): the debug flip if it is due, then, with --ordered when `clock` is
 * a multiple of --check-every, the comparison and repair. Collective. Returns
 * 0, or a negative code: a matrix split without a majority (-SFB_EPEER
 * naming the ranks on each side), or the job's failure. */
int sfb__replicas_at_clock(struct worker *w, struct sfb__replicas *rc, int64_t clock);

/* After the final drain: the comparison; with --ordered as above (repairs;
 * `clock` names the cut: the run's clock count), else the drift against
 * rank 0's replica. Rank 0 logs the verdict ("replicas:
 * identical ..."), every rank a "replicas" metrics event. Collective. */
int sfb__replicas_final(struct worker *w, struct sfb__replicas *rc, int64_t clock);

#endif
