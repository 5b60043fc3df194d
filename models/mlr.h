/* Multinomial logistic regression (softmax cross-entropy) with an intercept
 * and optional L2 regularization. One parameter matrix A of K × (D+1): the
 * last column is the bias, so each sample's feature vector is c = [u; 1]
 * (for CSR data: the row's non-zeros plus index D with value 1). */
#ifndef SFB_MODELS_MLR_H
#define SFB_MODELS_MLR_H

#include <sfb/model.h>

extern const struct sfb_model_ops sfb__mlr_ops;

#endif
