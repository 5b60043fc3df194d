/* The dataset type itself: release, non-zero count, and conversion between
 * dense and CSR storage (--data-layout), so a dense-in-practice libsvm file
 * can use the dense GEMM path and a mostly-zero dense file the sparse one.
 * The readers (idx.c, libsvm.c, synth.c) and the front end (data.c) build on
 * it. */
#include "config.h"
#include <sfb/data.h>
#include "src/base/util.h"

#include <stdlib.h>
#include <string.h>

void sfb_dataset_free(struct sfb_dataset *ds)
{
    if (!ds) return;
    free(ds->labels);
    free(ds->x);
    free(ds->row_ptr);
    free(ds->col);
    free(ds->val);
    memset(ds, 0, sizeof *ds);
}

uint64_t sfb_dataset_nnz(const struct sfb_dataset *ds)
{
    SFB_ARG_OR(ds, 0);
    if (ds->sparse) return ds->row_ptr ? ds->row_ptr[ds->n] : 0;
    return ds->n * ds->d;
}

static int to_dense(struct sfb_dataset *ds)
{
    size_t n;
    if (sfb__mul_size((size_t)ds->n, ds->d, &n))
        return sfb__error(-EOVERFLOW, "data: %llu x %u is too large to store densely",
                          (unsigned long long)ds->n, ds->d);
    float *x = calloc(n ? n : 1, sizeof *x);
    if (!x) return sfb__error(-ENOMEM, "data: no memory for %zu dense values", n);
    for (uint64_t i = 0; i < ds->n; i++)
        for (uint64_t j = ds->row_ptr[i]; j < ds->row_ptr[i + 1]; j++)
            x[i * ds->d + ds->col[j]] = ds->val[j];
    free(ds->row_ptr);
    free(ds->col);
    free(ds->val);
    ds->row_ptr = NULL;
    ds->col = NULL;
    ds->val = NULL;
    ds->x = x;
    ds->sparse = 0;
    return 0;
}

static int to_sparse(struct sfb_dataset *ds)
{
    uint64_t nnz = 0, total = (uint64_t)ds->n * ds->d;
    for (uint64_t i = 0; i < total; i++) nnz += ds->x[i] != 0.0f;
    uint64_t *rp = malloc((ds->n + 1) * sizeof *rp);
    uint32_t *col = malloc((nnz ? nnz : 1) * sizeof *col);
    float *val = malloc((nnz ? nnz : 1) * sizeof *val);
    if (!rp || !col || !val) {
        free(rp);
        free(col);
        free(val);
        return sfb__error(-ENOMEM, "data: no memory for %llu non-zeros", (unsigned long long)nnz);
    }
    uint64_t q = 0;
    rp[0] = 0;
    for (uint64_t i = 0; i < ds->n; i++) {
        const float *row = ds->x + i * ds->d;
        for (uint32_t j = 0; j < ds->d; j++)
            if (row[j] != 0.0f) {
                col[q] = j;
                val[q++] = row[j];
            }
        rp[i + 1] = q;
    }
    free(ds->x);
    ds->x = NULL;
    ds->row_ptr = rp;
    ds->col = col;
    ds->val = val;
    ds->sparse = 1;
    return 0;
}

int sfb_dataset_set_layout(struct sfb_dataset *ds, enum sfb_layout layout)
{
    SFB_ENTER();
    SFB_ARG(ds);
    if (layout == SFB_LAYOUT_AUTO || ds->n == 0) return 0;
    if (layout == SFB_LAYOUT_DENSE) return ds->sparse ? to_dense(ds) : 0;
    return ds->sparse ? 0 : to_sparse(ds);
}
