/* Sparse coding: SFs against the naive gradient and finite differences,
 * codes satisfy the lasso optimality conditions, the unit-ball projection,
 * and SGD on data generated from a sparse dictionary. */
#include "models/model_internal.h"
#include <sfb/model.h>
#include "test.h"

#include <errno.h>
#include <stdlib.h>

static uint64_t rs = 0xC0FFEE1234ull;

/* N(0, 1) from the library's libm-free sampler (src/base/rng.h). */
static double gauss(void)
{
    static struct sfb__rng g;
    static int seeded;
    if (!seeded) sfb__rng_seed(&g, 0xC0FFEE1234ull), seeded = 1;
    return sfb__rng_gauss(&g);
}

static double urand(void)
{
    return (double)(sfb__splitmix64(&rs) >> 11) * (1.0 / 9007199254740992.0);
}

static void free_ds(struct sfb_dataset *ds)
{
    free(ds->x);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

static void make_gauss(struct sfb_dataset *ds, uint64_t n, uint32_t d)
{
    memset(ds, 0, sizeof *ds);
    ds->n = n;
    ds->d = d;
    ds->k = 1;
    ds->x = malloc(n * d * sizeof(float));
    for (uint64_t q = 0; q < n * d; q++)
        ds->x[q] = (float)gauss();
}

/* x = B_true α + noise with `nz` non-zeros per α; B_true has unit columns. */
static void make_sparse_dict(struct sfb_dataset *ds, uint64_t n, uint32_t d, uint32_t k,
                             uint32_t nz, double noise)
{
    float *bt = malloc((size_t)d * k * sizeof(float));
    for (uint32_t j = 0; j < k; j++) {
        double s = 0;
        for (uint32_t r = 0; r < d; r++) {
            bt[r * k + j] = (float)gauss();
            s += (double)bt[r * k + j] * bt[r * k + j];
        }
        for (uint32_t r = 0; r < d; r++)
            bt[r * k + j] /= (float)sqrt(s);
    }
    memset(ds, 0, sizeof *ds);
    ds->n = n;
    ds->d = d;
    ds->k = 1;
    ds->x = malloc(n * d * sizeof(float));
    for (uint64_t i = 0; i < n; i++) {
        float *x = ds->x + i * d;
        for (uint32_t r = 0; r < d; r++)
            x[r] = (float)(noise * gauss());
        for (uint32_t t = 0; t < nz; t++) {
            uint32_t j = (uint32_t)(urand() * k);
            double a = gauss();
            for (uint32_t r = 0; r < d; r++)
                x[r] += (float)(a * bt[r * k + j]);
        }
    }
    free(bt);
}

static int open_sc(struct sfb_model **m, uint32_t d, uint32_t k, double lambda, uint32_t steps)
{
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    s.kind = "sc";
    s.d = d;
    s.dict_size = k;
    s.lambda = lambda;
    s.code_steps = steps;
    s.seed = 3;
    return sfb_model_open(m, &s);
}

/* Σ ‖x_i − Bα_i‖² + λ‖α_i‖₁ for fixed codes, in double. */
static double naive_obj(const double *b, uint32_t d, uint32_t k, const struct sfb_dataset *ds,
                        const uint64_t *idx, const float *alpha, uint32_t s, double lambda)
{
    double tot = 0;
    for (uint32_t i = 0; i < s; i++) {
        const float *a = alpha + (size_t)i * k;
        for (uint32_t r = 0; r < d; r++) {
            double v = ds->x[idx[i] * d + r];
            for (uint32_t j = 0; j < k; j++)
                v -= b[r * k + j] * a[j];
            tot += v * v;
        }
        for (uint32_t j = 0; j < k; j++)
            tot += lambda * fabs((double)a[j]);
    }
    return tot;
}

static int test_factors_vs_naive_and_fd(void)
{
    const uint32_t d = 6, k = 4, s = 5;
    const float eta = 0.1f;
    const double lambda = 0.3;
    struct sfb_dataset ds;
    make_gauss(&ds, 20, d);
    struct sfb_model *m;
    ASSERT_OK(open_sc(&m, d, k, lambda, 30));
    struct sfb_matrix *B = sfb_model_matrix(m, 0);
    ASSERT_EQ(B->rows, d);
    ASSERT_EQ(B->cols, k);
    uint64_t idx[] = {4, 0, 19, 7, 4};
    struct sfb_sf sf = {0};
    double loss = 2.0;
    ASSERT_OK(sfb_model_factors(m, &ds, idx, s, eta, &sf, &loss));
    ASSERT_EQ(sf.rows, d);
    ASSERT_EQ(sf.cols, k);
    ASSERT_EQ(sf.s, s);
    ASSERT_EQ(sf.sparse_c, 0);
    ASSERT_NEAR(sf.scale, 2 * eta / s, 1e-9);
    double b[6 * 4], grad[6 * 4] = {0};
    for (uint32_t q = 0; q < d * k; q++)
        b[q] = B->data[q];
    ASSERT_NEAR(loss - 2.0, naive_obj(b, d, k, &ds, idx, sf.c, s, lambda), 1e-4);
    int nonzero = 0;
    for (uint32_t i = 0; i < s; i++) {
        const float *a = sf.c + (size_t)i * k;
        for (uint32_t j = 0; j < k; j++)
            nonzero += a[j] != 0;
        for (uint32_t r = 0; r < d; r++) {
            double res = ds.x[idx[i] * d + r];
            for (uint32_t j = 0; j < k; j++)
                res -= b[r * k + j] * a[j];
            ASSERT_NEAR(sf.b[(size_t)i * d + r], res, 1e-5); /* b = x − Bα */
            for (uint32_t j = 0; j < k; j++)
                grad[r * k + j] += -2 * res * a[j];
        }
    }
    ASSERT_GT(nonzero, 0);
    for (uint32_t r = 0; r < d; r++)
        for (uint32_t j = 0; j < k; j++) {
            double delta = 0;
            for (uint32_t i = 0; i < s; i++)
                delta += (double)sf.scale * sf.b[(size_t)i * d + r] * sf.c[(size_t)i * k + j];
            ASSERT_NEAR(delta, -eta / s * grad[r * k + j], 1e-5);
            const double h = 1e-5;
            double save = b[r * k + j];
            b[r * k + j] = save + h;
            double fp = naive_obj(b, d, k, &ds, idx, sf.c, s, lambda);
            b[r * k + j] = save - h;
            double fm = naive_obj(b, d, k, &ds, idx, sf.c, s, lambda);
            b[r * k + j] = save;
            ASSERT_NEAR((fp - fm) / (2 * h), grad[r * k + j], 1e-4);
        }
    sfb_sf_free(&sf);
    sfb_model_close(&m);
    free_ds(&ds);
    return 0;
}

/* With enough FISTA steps the codes solve the lasso: KKT conditions
 * g_j = 2(Bᵀ(Bα − x))_j = −λ sign(α_j) where α_j ≠ 0, |g_j| ≤ λ elsewhere. */
static int test_codes_optimal(void)
{
    const uint32_t d = 12, k = 16, s = 8;
    const double lambda = 0.5;
    struct sfb_dataset ds;
    make_gauss(&ds, 8, d);
    struct sfb_model *m;
    ASSERT_OK(open_sc(&m, d, k, lambda, 2000));
    const float *b = sfb_model_matrix(m, 0)->data;
    uint64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    struct sfb_sf sf = {0};
    double loss = 0;
    ASSERT_OK(sfb_model_factors(m, &ds, idx, s, 0.1f, &sf, &loss));
    int zeros = 0, nonzeros = 0;
    for (uint32_t i = 0; i < s; i++) {
        const float *a = sf.c + (size_t)i * k, *res = sf.b + (size_t)i * d;
        for (uint32_t j = 0; j < k; j++) {
            double g = 0;
            for (uint32_t r = 0; r < d; r++)
                g += -2.0 * b[r * k + j] * res[r];
            if (a[j] != 0) {
                ASSERT_NEAR(g, a[j] > 0 ? -lambda : lambda, 2e-3);
                nonzeros++;
            } else {
                ASSERT_LE(fabs(g), lambda + 2e-3);
                zeros++;
            }
        }
    }
    ASSERT_GT(zeros, 0);
    ASSERT_GT(nonzeros, 0);
    sfb_sf_free(&sf);
    sfb_model_close(&m);
    free_ds(&ds);
    return 0;
}

static int test_init_and_projection(void)
{
    const uint32_t d = 10, k = 7;
    struct sfb_model *m, *m2;
    ASSERT_OK(open_sc(&m, d, k, 0.1, 5));
    ASSERT_OK(open_sc(&m2, d, k, 0.1, 5));
    struct sfb_matrix *B = sfb_model_matrix(m, 0);
    ASSERT(memcmp(B->data, sfb_model_matrix(m2, 0)->data, sizeof(float) * d * k) == 0);
    for (uint32_t j = 0; j < k; j++) {
        double s = 0;
        for (uint32_t r = 0; r < d; r++)
            s += (double)B->data[r * k + j] * B->data[r * k + j];
        ASSERT_NEAR(s, 1.0, 1e-5);
    }
    /* Column j scaled by j·0.3: columns 0–3 lie inside the ball and stay. */
    for (uint32_t r = 0; r < d; r++)
        for (uint32_t j = 0; j < k; j++)
            B->data[r * k + j] *= 0.3f * (float)j;
    float keep[10 * 7];
    memcpy(keep, B->data, sizeof keep);
    sfb_model_apply_local(m, 0.5f);
    for (uint32_t j = 0; j < k; j++) {
        double s = 0;
        for (uint32_t r = 0; r < d; r++)
            s += (double)B->data[r * k + j] * B->data[r * k + j];
        if (j <= 3) {
            for (uint32_t r = 0; r < d; r++)
                ASSERT_EQ(B->data[r * k + j], keep[r * k + j]);
        } else {
            ASSERT_NEAR(s, 1.0, 1e-5);
            ASSERT_NEAR(B->data[j] / keep[j], 1.0 / (0.3 * j), 1e-5); /* direction kept */
        }
    }
    sfb_model_close(&m);
    sfb_model_close(&m2);
    return 0;
}

/* SGD from the random dictionary on data from a sparse dictionary: the
 * objective falls and the reconstruction error ends well below where the
 * random dictionary started; columns stay in the unit ball. */
static int test_sgd_learns_dictionary(void)
{
    /* Undercomplete (K < D), so a random dictionary cannot just span the
     * data: its reconstruction error starts high. */
    const uint32_t d = 32, k = 16, batch = 32;
    struct sfb_dataset tr, te;
    make_sparse_dict(&tr, 3000, d, k, 2, 0.01);
    te = tr;
    te.n = 500; /* the first 500 training samples double as the eval set */
    struct sfb_model *m;
    ASSERT_OK(open_sc(&m, d, k, 0.2, 20));
    struct sfb_eval e0 = {.size = sizeof e0}, e1 = {.size = sizeof e1};
    ASSERT_OK(sfb_model_evaluate(m, &te, &e0));
    ASSERT(isnan(e0.accuracy) && isnan(e0.knn_accuracy));
    struct sfb_reconstruct *r;
    ASSERT_OK(sfb_reconstruct_open(&r));
    struct sfb_sf sf = {0};
    uint64_t idx[32];
    double first = 0, last = 0;
    const int clocks = 600;
    for (int t = 0; t < clocks; t++) {
        for (uint32_t i = 0; i < batch; i++)
            idx[i] = sfb__splitmix64(&rs) % tr.n;
        double loss = 0;
        ASSERT_OK(sfb_model_factors(m, &tr, idx, batch, 0.1f, &sf, &loss));
        if (t < 50) first += loss;
        if (t >= clocks - 50) last += loss;
        const struct sfb_sf *set[] = {&sf};
        ASSERT_OK(sfb_reconstruct_apply(r, sfb_model_matrix(m, 0), set, 1));
        sfb_model_apply_local(m, 0.1f);
    }
    ASSERT_OK(sfb_model_evaluate(m, &te, &e1));
    fprintf(stderr,
            "  sc: loss %.4f -> %.4f (minibatch %.4f -> %.4f), recon %.4f -> %.4f, "
            "sparsity %.3f -> %.3f\n",
            e0.loss, e1.loss, first / 50 / batch, last / 50 / batch, e0.recon_error, e1.recon_error,
            e0.sparsity, e1.sparsity);
    ASSERT_LT(last, first * 0.7);
    ASSERT_LT(e1.loss, e0.loss * 0.7);
    ASSERT_LT(e1.recon_error, e0.recon_error * 0.6);
    ASSERT_GT(e1.sparsity, e0.sparsity + 0.05);
    const struct sfb_matrix *B = sfb_model_matrix(m, 0);
    for (uint32_t j = 0; j < k; j++) {
        double s = 0;
        for (uint32_t q = 0; q < d; q++)
            s += (double)B->data[q * k + j] * B->data[q * k + j];
        ASSERT_LE(s, 1.0 + 1e-5);
    }
    sfb_sf_free(&sf);
    sfb_reconstruct_close(&r);
    sfb_model_close(&m);
    free_ds(&tr);
    return 0;
}

/* CSR input gives the same SFs as dense input. */
static int test_sparse_input(void)
{
    const uint32_t d = 5, k = 3;
    float x[] = {0, 1.5f, 0, 0, -2, 3, 0, 0, 0.5f, 0};
    uint64_t rp[] = {0, 2, 4};
    uint32_t col[] = {1, 4, 0, 3};
    float val[] = {1.5f, -2, 3, 0.5f};
    struct sfb_dataset dn = {.n = 2, .d = d, .k = 1, .x = x};
    struct sfb_dataset sp = {
        .n = 2, .d = d, .k = 1, .sparse = 1, .row_ptr = rp, .col = col, .val = val};
    struct sfb_model *m;
    ASSERT_OK(open_sc(&m, d, k, 0.1, 10));
    struct sfb_sf a = {0}, b = {0};
    uint64_t idx[] = {1, 0};
    double l1 = 0, l2 = 0;
    ASSERT_OK(sfb_model_factors(m, &dn, idx, 2, 0.1f, &a, &l1));
    ASSERT_OK(sfb_model_factors(m, &sp, idx, 2, 0.1f, &b, &l2));
    ASSERT(memcmp(a.b, b.b, sizeof(float) * 2 * d) == 0);
    ASSERT(memcmp(a.c, b.c, sizeof(float) * 2 * k) == 0);
    ASSERT_EQ(l1, l2);
    col[3] = 5;
    ASSERT_EQ(sfb_model_factors(m, &sp, idx, 2, 0.1f, &b, &l2), -SFB_ESHAPE);
    sfb_sf_free(&a);
    sfb_sf_free(&b);
    sfb_model_close(&m);
    return 0;
}

/* Fixed-sparsity evaluation (OMP with T = min(d, k)/8 nonzeros): with an
 * orthonormal dictionary (the identity) the T-term optimum keeps the T
 * largest |x_r|; with the model's random dictionary, samples built from 3 of
 * its atoms are recovered exactly. */
static int test_omp_fixed_sparsity(void)
{
    const uint32_t d = 16, k = 16, n = 40, t = 2;
    struct sfb_model *m;
    ASSERT_OK(open_sc(&m, d, k, 0.1, 10));
    struct sfb_matrix *B = sfb_model_matrix(m, 0);
    for (uint32_t r = 0; r < d; r++)
        for (uint32_t j = 0; j < k; j++)
            B->data[r * k + j] = r == j ? 1.0f : 0.0f;
    struct sfb_dataset ds;
    make_gauss(&ds, n, d);
    double xx = 0, kept = 0;
    for (uint32_t i = 0; i < n; i++) {
        const float *x = ds.x + (size_t)i * d;
        double top[2] = {0, 0};
        for (uint32_t r = 0; r < d; r++) {
            double v = (double)x[r] * x[r];
            xx += v;
            if (v > top[0]) {
                top[1] = top[0];
                top[0] = v;
            } else if (v > top[1]) {
                top[1] = v;
            }
        }
        kept += top[0] + top[1];
    }
    struct sfb_eval ev = {.size = sizeof ev};
    ASSERT_OK(sfb_model_evaluate(m, &ds, &ev));
    ASSERT_EQ(ev.sparse_nonzeros, t);
    ASSERT_NEAR(ev.recon_error_sparse, (xx - kept) / xx, 1e-5);
    free_ds(&ds);
    sfb_model_close(&m);

    const uint32_t d2 = 64, k2 = 128;
    ASSERT_OK(open_sc(&m, d2, k2, 0.1, 10));
    const float *b = sfb_model_matrix(m, 0)->data;
    memset(&ds, 0, sizeof ds);
    ds.n = n;
    ds.d = d2;
    ds.k = 1;
    ds.x = calloc((size_t)n * d2, sizeof(float));
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t q = 0; q < 3; q++) {
            uint32_t j = (uint32_t)(urand() * k2);
            double a = 1.0 + urand();
            for (uint32_t r = 0; r < d2; r++)
                ds.x[(size_t)i * d2 + r] += (float)(a * b[r * k2 + j]);
        }
    ASSERT_OK(sfb_model_evaluate(m, &ds, &ev));
    ASSERT_EQ(ev.sparse_nonzeros, 8);
    ASSERT(ev.recon_error_sparse < 1e-6);
    ASSERT(ev.recon_error > ev.recon_error_sparse); /* FISTA with λ > 0 is biased */
    free_ds(&ds);
    sfb_model_close(&m);
    return 0;
}

static int test_settings_errors(void)
{
    struct sfb_model *m;
    ASSERT_EQ(open_sc(&m, 5, 0, 0.1, 5), -EINVAL);
    ASSERT_EQ(open_sc(&m, 5, 3, -1, 5), -EINVAL);
    ASSERT_EQ(open_sc(&m, 5, 3, 0.1, 0), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "code_steps");
    ASSERT(m == NULL);
    ASSERT(sfb_model_find("sc") != NULL);
    return 0;
}

static const struct test_case tests[] = {
    {"factors_vs_naive_and_fd", test_factors_vs_naive_and_fd},
    {"codes_optimal", test_codes_optimal},
    {"init_and_projection", test_init_and_projection},
    {"sgd_learns_dictionary", test_sgd_learns_dictionary},
    {"sparse_input", test_sparse_input},
    {"omp_fixed_sparsity", test_omp_fixed_sparsity},
    {"settings_errors", test_settings_errors},
};

TEST_MAIN(tests)
