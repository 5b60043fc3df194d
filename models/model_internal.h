/* Internal side of the model registry (models/model.c): accessors the runtime
 * needs beyond the public API, e.g. the model-file reader in src/train/modelfile.c.
 *
 * What a model file must store to recreate a model: settings kind, d, k,
 * lambda, seed (sfb_model_get_settings) and every parameter matrix
 * (sfb_model_n_matrices / sfb_model_matrix). The private state (`priv`) is
 * scratch only and is never saved: sfb_model_open with the saved settings
 * followed by copying the matrices back restores an identical model. */
#ifndef SFB_MODELS_MODEL_INTERNAL_H
#define SFB_MODELS_MODEL_INTERNAL_H

#include <sfb/model.h>
#include "src/base/rng.h"

#include <stdint.h>

/* The model's private state (ops->priv_size bytes). */
void *sfb__model_priv(struct sfb_model *m);
/* Matrix i, read only (sfb_model_matrix of a const model); NULL out of range. */
const struct sfb_matrix *sfb__model_matrix_ro(const struct sfb_model *m, uint32_t i);

/* Longest kind name a model may have (settings.kind is copied into the
 * model, so the caller's string need not outlive sfb_model_open). */
#define SFB_MODEL_KIND_MAX 31

/* The model's list option (mlp's --hidden, stored in settings.hidden), or
 * NULL when it has none: model files and checkpoint configurations record
 * settings.hidden only for such a model, so those of the others stay what
 * they were before the list existed. */
const struct sfb_model_option *sfb__model_list_option(const struct sfb_model_ops *ops);

/* What the models share to read a minibatch (models/batch.c). */

/* A minibatch idx[0..s) of `data`: s fits an int and every index is a
 * sample; *nnz = the CSR non-zeros of its rows plus one per sample (the
 * bias column), 0 for dense data. Returns 0 or -EINVAL naming `who`. */
int sfb__model_batch(const struct sfb_dataset *data, const uint64_t *idx, uint32_t s,
                     const char *who, uint64_t *nnz);

/* Row i of `data` as a dense vector of data->d floats (CSR rows scattered
 * into zeros). Returns 0 or -SFB_ESHAPE (a CSR column >= d), naming `who`. */
int sfb__model_dense_row(const struct sfb_dataset *data, uint64_t i, float *out, const char *who);

#endif
