/* Managed communication, the sender's side: an update sent in parts, in
 * priority order (--priority; docs/design.md §Managed communication).
 *
 * An update ΔA = scale · Σᵢ bᵢ cᵢᵀ is a sum over its samples, so any
 * partition of the samples gives parts that are exact updates themselves:
 * applied separately, in any order, they sum to the same ΔA. The sender
 * orders the samples by the policy's score, cuts the order into parts of
 * about a target size (at most SFB_WIRE_MAX_PARTS), and sends each part as
 * its own SF frame carrying its index, the count and its priority (the
 * largest score in it), so relays can order queued parts by priority and
 * receivers know when an update is complete.
 *
 *   fifo       samples in computation order (priority 0)
 *   magnitude  |scale| · ‖bᵢ‖ · ‖cᵢ‖          (the Frobenius norm of bᵢcᵢᵀ)
 *   relative   |scale| · ‖cᵢ‖ · ‖(bᵢⱼ / ‖Aⱼ‖)ⱼ‖   (row j of A changes by
 *              scale·bᵢⱼ·cᵢ: the change of each row relative to that row of
 *              the sender's replica, combined over rows; ‖Aⱼ‖ is floored at
 *              1e-3 of the rms row norm, and at 1e-30, so zero rows count
 *              as small rather than dividing by zero) */
#ifndef SFB_SFB_PARTS_H
#define SFB_SFB_PARTS_H

#include <sfb/sf.h>

#include <stddef.h>
#include <stdint.h>

struct sfb__parts_key;

enum sfb__priority { SFB__PRIORITY_FIFO = 0, SFB__PRIORITY_MAGNITUDE, SFB__PRIORITY_RELATIVE };

/* The policy named `name` (-1: none), a policy's name, and "a|b|c". */
int sfb__priority_find(const char *name);
const char *sfb__priority_name(int p);
const char *sfb__priority_names(void);

/* One update's parts: sample order, cut points and the score of each
 * sample. Buffers grow and are reused across clocks. */
struct sfb__parts {
    uint32_t n;        /* parts */
    uint32_t *order;   /* s sample indices in sending order */
    uint32_t *first;   /* n + 1 cut points into order */
    float *score;      /* per sample (by sample index) */
    float *rownorm;    /* relative: the replica's row norms */
    struct sfb__parts_key *keyed; /* sorting scratch */
    struct sfb_sf sub; /* one part's samples, gathered */
    size_t order_cap, first_cap, score_cap, rownorm_cap, keyed_cap;
};

/* Splits `sf` (an update of replica `a`, which `relative` reads) into parts
 * of about `target` bytes as the codec sends them at precision `prec`
 * (SFB_WIRE_F32 or SFB_WIRE_BF16; every part holds at least one sample; at
 * most SFB_WIRE_MAX_PARTS parts). Returns 0 or -ENOMEM. */
int sfb__parts_plan(struct sfb__parts *p, int policy, const struct sfb_sf *sf,
                    const struct sfb_matrix *a, size_t target, unsigned prec);
/* Part i's samples of `sf`, gathered into p->sub (which it returns); the
 * part's priority in *priority. Returns NULL on -ENOMEM. */
const struct sfb_sf *sfb__parts_gather(struct sfb__parts *p, const struct sfb_sf *sf, uint32_t i,
                                       float *priority);
void sfb__parts_free(struct sfb__parts *p);

/* How an engine of these matrices sends under a policy (NULL: fifo) and a
 * budget of `rate` bytes/s (0: none): *policy, the parts' size
 * (*part_bytes, 0: updates whole) and the largest message a relay forms
 * (*msg_cap, 0: no cap). A budget that cannot carry the smallest frame of a
 * clock (b and the headers) to one peer within the peer timeout is refused
 * as a mistake. Returns 0 or -SFB_EUSAGE naming the value. */
int sfb__parts_settings(const char *priority, double rate, uint32_t world, double peer_timeout_s,
                        const struct sfb_matrix *mats, uint32_t n, uint32_t max_s, int *policy,
                        size_t *part_bytes, size_t *msg_cap);

#endif
