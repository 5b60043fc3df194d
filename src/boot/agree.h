/* Start-up agreement: the settings every rank of a job must share (the
 * model and its options, the data's name and shape, batch, clocks, learning
 * rate and schedule, seed, sync engine, staleness, topology, …) as one
 * canonical "key=value\n" text per rank, compared across ranks before the
 * first data frame. Ranks that disagree would otherwise hang (frames of
 * another shape are rejected, a shorter run stops sending) or silently train
 * a model nobody asked for.
 *
 * The verdict is computed from every rank's text on every rank, so every
 * rank reports the same fields with the same values. */
#ifndef SFB_SRC_AGREE_H
#define SFB_SRC_AGREE_H

#include <stddef.h>
#include <stdint.h>

struct sfb__bootstrap;

/* texts[r] is rank r's "key=value\n" text (lens[r] bytes, not necessarily
 * NUL-terminated). Returns 0 if all are equal; otherwise writes into
 * out[cap] every differing key with rank 0's value and the first other
 * rank's, e.g. "clocks: rank 0 has 20, rank 1 has 10; lr: …", and returns
 * -SFB_ECONFIG. Pure; any thread. */
int sfb__agree_verdict(const char *const *texts, const size_t *lens, uint32_t world, char *out,
                       size_t cap);

/* Collective: every rank passes its text; 0 when all agree, else
 * -SFB_ECONFIG on every rank with sfb_last_error() holding
 * "settings differ between ranks: VERDICT (every worker of a job needs the
 * same settings)". One allgather of 8-byte hashes, and a second one of the
 * texts only when the hashes differ. Bootstrap errors pass through. */
int sfb__agree(struct sfb__bootstrap *bs, uint32_t world, const char *text);

#endif
