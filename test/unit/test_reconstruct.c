/* Reconstruction: stacked dense sgemm, sparse pass, and rejection of bad
 * batches, each checked against a naive triple loop in double; a row range
 * of one batch's product (FMS's chunks, sfb__reconstruct_rows). */
#include <sfb/sf.h>
#include "src/factor/blas.h"
#include "test.h"

#include <errno.h>
#include <stdlib.h>

static uint64_t rng_state = 88172645463325252ull;

static float frand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

/* A batch with random b and c; sparse c keeps about `density` of the columns
 * (at least one per row, so every sample contributes). */
static int make_batch(struct sfb_sf *sf, uint32_t rows, uint32_t cols, uint32_t s, float scale,
                      int sparse, double density)
{
    int ret = sfb_sf_reserve(sf, rows, cols, s, sparse, sparse ? (uint64_t)s * cols : 0);
    if (ret) return ret;
    for (size_t q = 0; q < (size_t)s * rows; q++) sf->b[q] = frand();
    if (!sparse) {
        for (size_t q = 0; q < (size_t)s * cols; q++) sf->c[q] = frand();
    } else {
        uint32_t nz = 0;
        for (uint32_t i = 0; i < s; i++) {
            for (uint32_t j = 0; j < cols; j++)
                if ((frand() + 1.0f) * 0.5f < density || j == i % cols) {
                    sf->c_col[nz] = j;
                    sf->c_val[nz++] = frand();
                }
            sf->c_row_ptr[i + 1] = nz;
        }
    }
    sf->scale = scale;
    return 0;
}

/* ref += scale · Bᵀ C, computed entry by entry in double. */
static void naive_add(double *ref, const struct sfb_sf *sf)
{
    for (uint32_t i = 0; i < sf->s; i++) {
        const float *b = sf->b + (size_t)i * sf->rows;
        if (!sf->sparse_c) {
            const float *c = sf->c + (size_t)i * sf->cols;
            for (uint32_t k = 0; k < sf->rows; k++)
                for (uint32_t j = 0; j < sf->cols; j++)
                    ref[(size_t)k * sf->cols + j] += (double)sf->scale * b[k] * c[j];
        } else {
            for (uint32_t k = 0; k < sf->rows; k++)
                for (uint32_t p = sf->c_row_ptr[i]; p < sf->c_row_ptr[i + 1]; p++)
                    ref[(size_t)k * sf->cols + sf->c_col[p]] +=
                        (double)sf->scale * b[k] * sf->c_val[p];
        }
    }
}

/* The largest |a − ref|, NaN where any is (fmax would pass over it). */
static double max_diff(const float *a, const double *ref, size_t n)
{
    double m = 0.0;
    for (size_t q = 0; q < n; q++) {
        double d = fabs(a[q] - ref[q]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* Applies the batches described by (s, scale, sparse) and compares with the
 * naive sum starting from a random A. sparse: 0 dense c; 1 CSR c of ~3 %
 * density (the sparse pass); 2 CSR c of ~50 % (expanded into the sgemm). */
static int check_apply(uint32_t rows, uint32_t cols, size_t n, const uint32_t *s,
                       const float *scale, const int *sparse)
{
    struct sfb_sf sf[8] = {0};
    const struct sfb_sf *ptr[8];
    size_t na = (size_t)rows * cols;
    float *a = malloc(na * sizeof(float));
    double *ref = malloc(na * sizeof(double));
    ASSERT(a && ref && n <= 8);
    for (size_t q = 0; q < na; q++) ref[q] = a[q] = frand();
    for (size_t j = 0; j < n; j++) {
        ASSERT_OK(make_batch(&sf[j], rows, cols, s[j], scale[j], sparse[j] != 0,
                             sparse[j] == 2 ? 0.5 : 0.01));
        naive_add(ref, &sf[j]);
        ptr[j] = &sf[j];
    }
    struct sfb_reconstruct *r;
    ASSERT_OK(sfb_reconstruct_open(&r));
    struct sfb_matrix m = {rows, cols, a};
    ASSERT_OK(sfb_reconstruct_apply(r, &m, ptr, n));
    ASSERT_NEAR(max_diff(a, ref, na), 0.0, 1e-4);
    /* Same handle again (buffers reused): applies the same sum once more. */
    for (size_t j = 0; j < n; j++) naive_add(ref, &sf[j]);
    ASSERT_OK(sfb_reconstruct_apply(r, &m, ptr, n));
    ASSERT_NEAR(max_diff(a, ref, na), 0.0, 2e-4);
    sfb_reconstruct_close(&r);
    ASSERT(r == NULL);
    for (size_t j = 0; j < n; j++) sfb_sf_free(&sf[j]);
    free(a);
    free(ref);
    return 0;
}

static int test_single_dense(void)
{
    uint32_t s[] = {7};
    float sc[] = {-0.37f};
    int sp[] = {0};
    return check_apply(13, 29, 1, s, sc, sp);
}

static int test_stacked_scales(void)
{
    uint32_t s[] = {5, 1, 9, 3};
    float sc[] = {-0.1f, 2.0f, 0.5f, -1.25f};
    int sp[] = {0, 0, 0, 0};
    return check_apply(17, 23, 4, s, sc, sp);
}

static int test_sparse(void)
{
    uint32_t s[] = {4, 6};
    float sc[] = {-0.3f, 0.7f};
    int sp[] = {1, 1};
    return check_apply(11, 40, 2, s, sc, sp);
}

static int test_mixed(void)
{
    uint32_t s[] = {3, 4, 0, 2, 5};
    float sc[] = {0.25f, -0.5f, 9.0f, 1.5f, -2.0f};
    int sp[] = {1, 0, 0, 1, 0};
    return check_apply(9, 31, 5, s, sc, sp);
}

/* CSR batches dense enough for sgemm: alone (expanded into the stack), and
 * stacked with dense ones while a sparse one takes the sparse pass. */
static int test_csr_by_gemm(void)
{
    uint32_t s1[] = {6};
    float sc1[] = {-0.7f};
    int sp1[] = {2};
    if (check_apply(10, 37, 1, s1, sc1, sp1)) return 1;
    uint32_t s[] = {3, 4, 2, 5};
    float sc[] = {0.5f, -1.5f, 2.0f, 0.25f};
    int sp[] = {2, 0, 1, 2};
    return check_apply(9, 41, 4, s, sc, sp);
}

/* A batch of the wrong shape, or a CSR column outside A, is rejected before
 * anything is applied (even the valid batches before it). */
static int test_shape_mismatch(void)
{
    struct sfb_sf good = {0}, bad = {0}, badcol = {0};
    ASSERT_OK(make_batch(&good, 6, 8, 3, -0.5f, 0, 0));
    ASSERT_OK(make_batch(&bad, 6, 9, 3, -0.5f, 0, 0));
    ASSERT_OK(make_batch(&badcol, 6, 8, 2, -0.5f, 1, 0.5));
    badcol.c_col[badcol.c_row_ptr[2] - 1] = 8; /* one past the last column */
    float a[48], before[48];
    for (int q = 0; q < 48; q++) before[q] = a[q] = frand();
    struct sfb_matrix m = {6, 8, a};
    struct sfb_reconstruct *r;
    ASSERT_OK(sfb_reconstruct_open(&r));
    const struct sfb_sf *set1[] = {&good, &bad};
    ASSERT_EQ(sfb_reconstruct_apply(r, &m, set1, 2), -SFB_ESHAPE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "6 × 9");
    ASSERT_EQ(memcmp(a, before, sizeof(a)), 0);
    const struct sfb_sf *set2[] = {&good, &badcol};
    ASSERT_EQ(sfb_reconstruct_apply(r, &m, set2, 2), -SFB_ESHAPE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "column 8");
    ASSERT_EQ(memcmp(a, before, sizeof(a)), 0);
    struct sfb_matrix wrong_rows = {7, 8, a};
    const struct sfb_sf *set3[] = {&good};
    ASSERT_EQ(sfb_reconstruct_apply(r, &wrong_rows, set3, 1), -SFB_ESHAPE);
    ASSERT_EQ(memcmp(a, before, sizeof(a)), 0);
    /* An empty set is a no-op. */
    ASSERT_OK(sfb_reconstruct_apply(r, &m, NULL, 0));
    ASSERT_EQ(memcmp(a, before, sizeof(a)), 0);
    sfb_reconstruct_close(&r);
    sfb_sf_free(&good);
    sfb_sf_free(&bad);
    sfb_sf_free(&badcol);
    return 0;
}

/* Buffers only grow: a smaller or equal reservation keeps the same memory. */
static int test_sf_reserve(void)
{
    struct sfb_sf sf = {0};
    ASSERT_OK(sfb_sf_reserve(&sf, 10, 20, 4, 0, 0));
    ASSERT_EQ(sf.rows, 10);
    ASSERT_EQ(sf.cols, 20);
    ASSERT_EQ(sf.s, 4);
    ASSERT_EQ(sf.sparse_c, 0);
    ASSERT_GE(sf.b_cap, 40);
    ASSERT_GE(sf.c_cap, 80);
    ASSERT_EQ(sfb_sf_c_count(&sf), 80);
    float *b = sf.b, *c = sf.c;
    ASSERT_OK(sfb_sf_reserve(&sf, 10, 20, 3, 0, 0));
    ASSERT(sf.b == b && sf.c == c);
    ASSERT_OK(sfb_sf_reserve(&sf, 10, 20, 4, 1, 17));
    ASSERT_EQ(sf.sparse_c, 1);
    ASSERT_GE(sf.rp_cap, 5);
    ASSERT_GE(sf.nz_cap, 17);
    ASSERT_EQ(sf.c_row_ptr[0], 0);
    sf.c_row_ptr[4] = 17;
    ASSERT_EQ(sfb_sf_c_count(&sf), 17);
    ASSERT_EQ(sfb_sf_reserve(&sf, 10, 20, 4, 1, 1ull << 33), -EOVERFLOW);
    sfb_sf_free(&sf);
    ASSERT(sf.b == NULL && sf.b_cap == 0);
    sfb_sf_free(&sf); /* twice is fine */
    return 0;
}

/* Rows [r0, r1) of a dense batch's product, written over what the buffer
 * held (NaN here), nothing beyond them touched, for ranges at either end,
 * inside, of one row and of none. */
static int test_rows(void)
{
    enum { ROWS = 37, COLS = 29, S = 7 };
    struct sfb_sf sf = {0};
    ASSERT_OK(make_batch(&sf, ROWS, COLS, S, -0.37f, 0, 0.0));
    double *ref = calloc((size_t)ROWS * COLS, sizeof *ref);
    float *out = malloc(((size_t)ROWS * COLS + 1) * sizeof *out);
    ASSERT(ref && out);
    naive_add(ref, &sf);
    static const uint32_t range[][2] = {{0, ROWS}, {0, 5}, {5, 6}, {10, ROWS}, {3, 3}};
    for (size_t q = 0; q < sizeof range / sizeof range[0]; q++) {
        uint32_t r0 = range[q][0], r1 = range[q][1];
        size_t n = (size_t)(r1 - r0) * COLS;
        for (size_t i = 0; i <= (size_t)ROWS * COLS; i++) out[i] = NAN;
        sfb__reconstruct_rows(&sf, r0, r1, out);
        ASSERT_NEAR(max_diff(out, ref + (size_t)r0 * COLS, n), 0.0, 1e-5);
        ASSERT(isnan(out[n])); /* (the row after the range: untouched) */
    }
    sfb_sf_free(&sf);
    free(ref);
    free(out);
    return 0;
}

static const struct test_case tests[] = {
    {"single_dense", test_single_dense},
    {"stacked_scales", test_stacked_scales},
    {"sparse", test_sparse},
    {"mixed", test_mixed},
    {"csr_by_gemm", test_csr_by_gemm},
    {"shape_mismatch", test_shape_mismatch},
    {"sf_reserve", test_sf_reserve},
    {"rows", test_rows},
};

TEST_MAIN(tests)
