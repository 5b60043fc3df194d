/* What the models share to read a minibatch (models/model_internal.h): the
 * batch's checks and a sample as a dense row. Below the models, which all
 * call it, and the registry (model.c), which calls the models. */
#include "models/model_internal.h"
#include "src/base/util.h"

#include <limits.h>
#include <string.h>

int sfb__model_batch(const struct sfb_dataset *data, const uint64_t *idx, uint32_t s,
                     const char *who, uint64_t *nnz)
{
    *nnz = 0;
    if (s > INT_MAX) return sfb__error(-EINVAL, "%s: minibatch of %u samples too large", who, s);
    for (uint32_t i = 0; i < s; i++) {
        if (idx[i] >= data->n)
            return sfb__error(-EINVAL, "%s: sample index %llu out of range (n=%llu)", who,
                              (unsigned long long)idx[i], (unsigned long long)data->n);
        if (data->sparse) *nnz += data->row_ptr[idx[i] + 1] - data->row_ptr[idx[i]] + 1;
    }
    return 0;
}

int sfb__model_dense_row(const struct sfb_dataset *data, uint64_t i, float *out, const char *who)
{
    const uint32_t d = data->d;
    if (!data->sparse) {
        memcpy(out, data->x + i * d, (size_t)d * sizeof(float));
        return 0;
    }
    memset(out, 0, (size_t)d * sizeof(float));
    for (uint64_t p = data->row_ptr[i]; p < data->row_ptr[i + 1]; p++) {
        if (data->col[p] >= d)
            return sfb__error(-SFB_ESHAPE, "%s: sample %llu has feature %u >= d=%u", who,
                              (unsigned long long)i, data->col[p], d);
        out[data->col[p]] = data->val[p];
    }
    return 0;
}
