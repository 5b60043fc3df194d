/* Reconstruction: A += Σ_j scale_j · B_jᵀ C_j for a set of SF batches.
 *
 * Dense-c batches are stacked so that one sgemm with an inner dimension of
 * Σs does all of them: a single rank-Σs update runs at full GEMM speed while
 * Σs rank-1 updates (sger) are memory bound and ≈10× slower. Each batch's
 * scale is folded into its copied b rows. A lone dense batch needs no copy:
 * its scale becomes sgemm's alpha.
 *
 * A CSR-c batch with at least one non-zero in DENSE_SHARE of c's entries joins
 * the dense stack (its c expanded into the stacked copy): the sparse pass
 * runs ~1-2 multiply-adds per ns, sgemm ~70 GFLOP/s on one core, so at 1/16
 * density the sgemm over every entry is already the faster one (Fashion-MNIST
 * pixels, half non-zero, sent as CSR because it is the smaller encoding,
 * reconstructed ~10× faster this way).
 *
 * The other CSR-c batches go through a sparse pass of rows × nnz multiply-adds. The
 * scaled b coefficients are first transposed into a rows × Σs table so the
 * pass walks one row of A at a time (that row stays in cache while every
 * sample's non-zeros are added into it) and reads its coefficients
 * contiguously.
 *
 * Everything is validated before anything is applied, so a bad batch leaves A
 * untouched. The scratch buffers live in the handle and only grow. */
#include <sfb/sf.h>

#include "src/base/util.h"
#include "src/factor/blas.h"

#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Upper bound on the floats stacked for one sgemm (Σs · (rows + cols)):
 * 32 Mi floats = 128 MiB. With K = D = 4096 that is 4096 samples per call,
 * far beyond where sgemm reaches its peak, so in practice every clock's
 * pending SFs go out in one call while memory stays bounded when many
 * workers' batches pile up. */
#define STACK_MAX_FLOATS ((size_t)32 << 20)

/* A CSR batch this dense (nnz · DENSE_SHARE ≥ s · cols) is applied by sgemm. */
#define DENSE_SHARE 16

/* Whether a (checked) batch goes through sgemm: dense c, or CSR c dense enough. */
static int by_gemm(const struct sfb_sf *sf)
{
    return !sf->sparse_c ||
           (uint64_t)sf->c_row_ptr[sf->s] * DENSE_SHARE >= (uint64_t)sf->s * sf->cols;
}

struct sfb_reconstruct {
    float *bs, *cs, *bt;
    size_t bs_cap, cs_cap, bt_cap; /* bytes */
};

int sfb_reconstruct_open(struct sfb_reconstruct **r)
{
    SFB_ENTER();
    SFB_ARG(r);
    *r = calloc(1, sizeof(**r));
    return *r ? 0 : -ENOMEM;
}

void sfb_reconstruct_close(struct sfb_reconstruct **r)
{
    if (!r || !*r) return;
    free((*r)->bs);
    free((*r)->cs);
    free((*r)->bt);
    free(*r);
    *r = NULL;
}

static int check_batch(const struct sfb_matrix *a, const struct sfb_sf *sf, size_t j)
{
    if (!sf)
        return sfb__error(-EINVAL, "reconstruct: batch %zu is NULL", j);
    if (sf->rows != a->rows || sf->cols != a->cols)
        return sfb__error(-SFB_ESHAPE,
                          "reconstruct: batch %zu (origin %u, clock %lld) is %u × %u, "
                          "matrix is %u × %u",
                          j, sf->origin, (long long)sf->clock, sf->rows, sf->cols, a->rows,
                          a->cols);
    if (sf->s == 0) return 0;
    if (sf->s > INT_MAX)
        return sfb__error(-SFB_ESHAPE, "reconstruct: batch %zu has %u samples", j, sf->s);
    if (!sf->b)
        return sfb__error(-EINVAL, "reconstruct: batch %zu has no b", j);
    if (!sf->sparse_c)
        return sf->c ? 0 : sfb__error(-EINVAL, "reconstruct: batch %zu has no c", j);
    if (!sf->c_row_ptr || sf->c_row_ptr[0] != 0)
        return sfb__error(-SFB_ESHAPE, "reconstruct: batch %zu: CSR c must start at 0", j);
    for (uint32_t i = 0; i < sf->s; i++)
        if (sf->c_row_ptr[i + 1] < sf->c_row_ptr[i])
            return sfb__error(-SFB_ESHAPE, "reconstruct: batch %zu: c_row_ptr decreases at %u",
                              j, i + 1);
    uint32_t nnz = sf->c_row_ptr[sf->s];
    if (nnz && (!sf->c_col || !sf->c_val))
        return sfb__error(-EINVAL, "reconstruct: batch %zu has no CSR arrays", j);
    for (uint32_t p = 0; p < nnz; p++)
        if (sf->c_col[p] >= a->cols)
            return sfb__error(-SFB_ESHAPE,
                              "reconstruct: batch %zu: column %u at non-zero %u, matrix has %u",
                              j, sf->c_col[p], p, a->cols);
    return 0;
}

/* Applies the dense batches among sfs[first..end) (total_s samples) with one
 * sgemm; the stacking buffers were reserved by the caller. */
static void apply_dense_group(struct sfb_reconstruct *r, struct sfb_matrix *a,
                             const struct sfb_sf *const *sfs, size_t first, size_t end,
                             size_t total_s)
{
    const int rows = (int)a->rows, cols = (int)a->cols;
    size_t count = 0, last = first;
    for (size_t j = first; j < end; j++)
        if (by_gemm(sfs[j]) && sfs[j]->s) count++, last = j;
    if (count == 0) return;
    if (count == 1 && !sfs[last]->sparse_c) {
        const struct sfb_sf *sf = sfs[last];
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, cols, (int)sf->s, sf->scale,
                    sf->b, rows, sf->c, cols, 1.0f, a->data, cols);
        return;
    }
    size_t off = 0;
    for (size_t j = first; j < end; j++) {
        const struct sfb_sf *sf = sfs[j];
        if (!by_gemm(sf) || !sf->s) continue;
        size_t nbj = (size_t)sf->s * a->rows;
        float *dst = r->bs + off * a->rows;
        for (size_t q = 0; q < nbj; q++) dst[q] = sf->scale * sf->b[q];
        float *cd = r->cs + off * a->cols;
        if (!sf->sparse_c) {
            memcpy(cd, sf->c, (size_t)sf->s * a->cols * sizeof(float));
        } else { /* CSR expanded */
            memset(cd, 0, (size_t)sf->s * a->cols * sizeof(float));
            for (uint32_t i = 0; i < sf->s; i++)
                for (uint32_t p = sf->c_row_ptr[i]; p < sf->c_row_ptr[i + 1]; p++)
                    cd[(size_t)i * a->cols + sf->c_col[p]] += sf->c_val[p];
        }
        off += sf->s;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, cols, (int)total_s, 1.0f, r->bs,
                rows, r->cs, cols, 1.0f, a->data, cols);
}

static void apply_sparse(struct sfb_reconstruct *r, struct sfb_matrix *a,
                         const struct sfb_sf *const *sfs, size_t n, size_t total_s)
{
    const size_t rows = a->rows, cols = a->cols;
    /* bt[k·Σs + i] = scale_i · b_i[k]: row k's coefficients side by side. */
    size_t off = 0;
    for (size_t j = 0; j < n; j++) {
        const struct sfb_sf *sf = sfs[j];
        if (by_gemm(sf)) continue;
        for (uint32_t i = 0; i < sf->s; i++) {
            const float *b = sf->b + (size_t)i * rows;
            for (size_t k = 0; k < rows; k++) r->bt[k * total_s + off + i] = sf->scale * b[k];
        }
        off += sf->s;
    }
    /* Four rows of A at a time: each non-zero's column and value are loaded
     * once for four multiply-adds, and the four rows stay in L2. */
    size_t k = 0;
    for (; k + 4 <= rows; k += 4) {
        float *a0 = a->data + k * cols, *a1 = a0 + cols, *a2 = a1 + cols, *a3 = a2 + cols;
        const float *c0 = r->bt + k * total_s, *c1 = c0 + total_s, *c2 = c1 + total_s,
                    *c3 = c2 + total_s;
        off = 0;
        for (size_t j = 0; j < n; j++) {
            const struct sfb_sf *sf = sfs[j];
            if (by_gemm(sf)) continue;
            for (uint32_t i = 0; i < sf->s; i++) {
                const float w0 = c0[off + i], w1 = c1[off + i], w2 = c2[off + i],
                            w3 = c3[off + i];
                for (uint32_t p = sf->c_row_ptr[i]; p < sf->c_row_ptr[i + 1]; p++) {
                    const uint32_t col = sf->c_col[p];
                    const float v = sf->c_val[p];
                    a0[col] += w0 * v;
                    a1[col] += w1 * v;
                    a2[col] += w2 * v;
                    a3[col] += w3 * v;
                }
            }
            off += sf->s;
        }
    }
    for (; k < rows; k++) {
        float *ak = a->data + k * cols;
        const float *coef = r->bt + k * total_s;
        off = 0;
        for (size_t j = 0; j < n; j++) {
            const struct sfb_sf *sf = sfs[j];
            if (by_gemm(sf)) continue;
            for (uint32_t i = 0; i < sf->s; i++) {
                const float w = coef[off + i];
                for (uint32_t p = sf->c_row_ptr[i]; p < sf->c_row_ptr[i + 1]; p++)
                    ak[sf->c_col[p]] += w * sf->c_val[p];
            }
            off += sf->s;
        }
    }
}

int sfb_reconstruct_apply(struct sfb_reconstruct *r, struct sfb_matrix *a,
                          const struct sfb_sf *const *sfs, size_t n)
{
    SFB_ENTER();
    SFB_ARG(r);
    SFB_ARG(a);
    if (!r || !a || (n && !sfs)) return sfb__error(-EINVAL, "reconstruct: NULL argument");
    if (a->rows > INT_MAX || a->cols > INT_MAX || (!a->data && a->rows && a->cols))
        return sfb__error(-SFB_ESHAPE, "reconstruct: matrix %u × %u unusable", a->rows,
                          a->cols);
    size_t sparse_s = 0;
    for (size_t j = 0; j < n; j++) {
        int ret = check_batch(a, sfs[j], j);
        if (ret) return ret;
        if (!by_gemm(sfs[j])) sparse_s += sfs[j]->s;
    }
    if (a->rows == 0 || a->cols == 0) return 0;

    /* Dense batches go in groups bounded by STACK_MAX_FLOATS (one group
     * unless the stack would be huge); a group always holds at least one
     * batch. First plan the groups and reserve every buffer, so that -ENOMEM
     * also leaves A untouched. */
    const size_t per_sample = (size_t)a->rows + a->cols;
    size_t group_s = 0, group_n = 0, max_stack = 0;
    int group_csr = 0; /* a CSR batch is expanded into the stack even alone */
    for (size_t j = 0; j <= n; j++) {
        const struct sfb_sf *sf = j < n ? sfs[j] : NULL;
        if (sf && (!by_gemm(sf) || !sf->s)) continue;
        if (!sf || (group_s && (group_s + sf->s) * per_sample > STACK_MAX_FLOATS)) {
            if (group_n > 1 || group_csr) max_stack = SFB_MAX(max_stack, group_s);
            group_s = group_n = 0;
            group_csr = 0;
        }
        if (sf) group_s += sf->s, group_n++, group_csr |= sf->sparse_c;
    }
    size_t nb, nc, nt;
    if (sfb__mul_size(max_stack, a->rows * sizeof(float), &nb) ||
        sfb__mul_size(max_stack, a->cols * sizeof(float), &nc) ||
        sfb__mul_size(sparse_s, a->rows * sizeof(float), &nt))
        return sfb__error(-EOVERFLOW, "reconstruct: stacked size overflows");
    if ((max_stack && (sfb__reserve((void **)&r->bs, &r->bs_cap, nb) ||
                       sfb__reserve((void **)&r->cs, &r->cs_cap, nc))) ||
        (sparse_s && sfb__reserve((void **)&r->bt, &r->bt_cap, nt)))
        return sfb__error(-ENOMEM, "reconstruct: cannot allocate %zu stacked samples",
                          max_stack + sparse_s);

    size_t first = 0;
    group_s = 0;
    for (size_t j = 0; j < n; j++) {
        const struct sfb_sf *sf = sfs[j];
        if (!by_gemm(sf) || !sf->s) continue;
        if (group_s && (group_s + sf->s) * per_sample > STACK_MAX_FLOATS) {
            apply_dense_group(r, a, sfs, first, j, group_s);
            first = j;
            group_s = 0;
        }
        group_s += sf->s;
    }
    if (group_s) apply_dense_group(r, a, sfs, first, n, group_s);
    if (sparse_s) apply_sparse(r, a, sfs, n, sparse_s);
    return 0;
}

void sfb__factors_product(uint32_t rows, uint32_t cols, uint32_t s, float scale, const float *b,
                          uint32_t ldb, const float *c, float beta, float *out)
{
    if (rows == 0 || cols == 0) return;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)cols, (int)s, scale, b,
                (int)ldb, c, (int)cols, beta, out, (int)cols);
}

void sfb__reconstruct_rows(const struct sfb_sf *sf, uint32_t r0, uint32_t r1, float *out)
{
    if (r1 <= r0) return;
    sfb__factors_product(r1 - r0, sf->cols, sf->s, sf->scale, sf->b + r0, sf->rows, sf->c, 0.0f,
                         out);
}
