/* Sparse coding: a dictionary B ∈ R^{D×K} (one parameter matrix of
 * d × dict_size) with unit-ball columns; codes by FISTA on the replica.
 * Formulas and SFs: docs/models.md. */
#ifndef SFB_MODELS_SC_H
#define SFB_MODELS_SC_H

#include <sfb/model.h>

extern const struct sfb_model_ops sfb__sc_ops;

#endif
