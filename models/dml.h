/* Distance metric learning (Xing et al. 2002 form): a Mahalanobis metric
 * M = LᵀL with L ∈ R^{K×D}, trained on similar / dissimilar pairs. One
 * parameter matrix L of rank × d. Formulas and SFs: docs/models.md. */
#ifndef SFB_MODELS_DML_H
#define SFB_MODELS_DML_H

#include <sfb/model.h>

extern const struct sfb_model_ops sfb__dml_ops;

/* Pair file reader (exposed for tests): lines "i j" of 0-based sample
 * indices; blank lines and lines starting with '#' are skipped. Fills a
 * malloc'd array of 2·n indices and, per pair, its 1-based line number.
 * Returns 0, -ENOENT / -EIO, -ENOMEM, -SFB_EFORMAT ("path:line: reason"). */
int sfb__dml_read_pairs(const char *path, uint64_t **pairs, uint32_t **lines, uint64_t *n);

#endif
