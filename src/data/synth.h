/* Synthetic MLR data internals shared with src/data/data.c and tests. */
#ifndef SFB_SRC_SYNTH_H
#define SFB_SRC_SYNTH_H

#include <sfb/data.h>

/* Like sfb_synth_generate, but the samples are drawn from `sample_seed`
 * while the hidden model still comes from s->seed: the test set of
 * "synth:..." is sfb__synth_generate(s, s->seed + 1, NULL, ...) with n/5
 * samples. Only the rows of `shard` (NULL: all) are generated, each equal
 * to that row of the whole set (sample i depends on (sample_seed, i)
 * alone). sfb_synth_generate(s) == sfb__synth_generate(s, s->seed, NULL). */
int sfb__synth_generate(const struct sfb_synth_settings *s, uint64_t sample_seed,
                        const struct sfb_shard *shard, struct sfb_dataset *out);

/* Writes the hidden model W (k × d, row-major) of settings `s` into `w`
 * (room for k·d floats). Labels are argmax_c (W·x)_c + noise·N(0,1). */
void sfb__synth_model(const struct sfb_synth_settings *s, float *w);

#endif
