/* Internal side of the model registry (models/model.c): accessors the runtime
 * needs beyond the public API, e.g. the model-file reader in src/train/modelfile.c.
 *
 * What a model file must store to recreate a model: settings kind, d, k,
 * lambda, seed (sfb_model_get_settings) and every parameter matrix
 * (sfb_model_n_matrices / sfb_model_matrix). The private state (`priv`) is
 * scratch only and is never saved: sfb_model_open with the saved settings
 * followed by copying the matrices back restores an identical model. */
#ifndef SFB_MODELS_MODEL_H
#define SFB_MODELS_MODEL_H

#include <sfb/model.h>

#include <stdint.h>

/* The model's private state (ops->priv_size bytes). */
void *sfb__model_priv(struct sfb_model *m);

/* Longest kind name a model may have (settings.kind is copied into the
 * model, so the caller's string need not outlive sfb_model_open). */
#define SFB_MODEL_KIND_MAX 31

/* splitmix64: the small PRNG of the models (init, pair sampling). Pure
 * function of its state, so every replica draws the same numbers. */
static inline uint64_t sfb__splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1): never 0, so log() below is finite. */
static inline double sfb__rand_open01(uint64_t *state)
{
    return ((double)(sfb__splitmix64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Standard normal (Box–Muller, one value per two uniforms). */
double sfb__rand_normal(uint64_t *state);

/* Row i of `data` as a dense vector of data->d floats (CSR rows scattered
 * into zeros). Returns 0 or -SFB_ESHAPE (a CSR column >= d), naming `who`. */
int sfb__model_dense_row(const struct sfb_dataset *data, uint64_t i, float *out, const char *who);

#endif
