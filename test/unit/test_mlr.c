/* MLR: factors against a naive gradient and finite differences, dense vs CSR
 * data, evaluate on a hand-computed case, L2 decay, and SGD convergence on a
 * separable problem. Datasets are built in memory. */
#include "models/model_internal.h"
#include <sfb/model.h>
#include "test.h"

#include <errno.h>
#include <stdlib.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float frand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

/* Dense dataset; each feature is zero with probability `zeros` so that the
 * CSR copy is really sparse. */
static void make_dense(struct sfb_dataset *ds, uint64_t n, uint32_t d, uint32_t k, double zeros)
{
    memset(ds, 0, sizeof(*ds));
    ds->n = n;
    ds->d = d;
    ds->k = k;
    ds->x = malloc(n * d * sizeof(float));
    ds->labels = malloc(n * sizeof(int32_t));
    for (uint64_t q = 0; q < n * d; q++)
        ds->x[q] = (frand() + 1.0f) * 0.5f < zeros ? 0.0f : frand() * 2.0f;
    for (uint64_t i = 0; i < n; i++) ds->labels[i] = (int32_t)(((frand() + 1.0f) * 0.5f) * k) % (int32_t)k;
}

/* The same data stored as CSR (zeros dropped). */
static void to_csr(const struct sfb_dataset *in, struct sfb_dataset *out)
{
    memset(out, 0, sizeof(*out));
    out->n = in->n;
    out->d = in->d;
    out->k = in->k;
    out->sparse = 1;
    out->labels = malloc(in->n * sizeof(int32_t));
    memcpy(out->labels, in->labels, in->n * sizeof(int32_t));
    out->row_ptr = malloc((in->n + 1) * sizeof(uint64_t));
    out->col = malloc(in->n * in->d * sizeof(uint32_t) + 1);
    out->val = malloc(in->n * in->d * sizeof(float) + 1);
    uint64_t nz = 0;
    out->row_ptr[0] = 0;
    for (uint64_t i = 0; i < in->n; i++) {
        for (uint32_t j = 0; j < in->d; j++)
            if (in->x[i * in->d + j] != 0.0f) {
                out->col[nz] = j;
                out->val[nz++] = in->x[i * in->d + j];
            }
        out->row_ptr[i + 1] = nz;
    }
}

static void free_ds(struct sfb_dataset *ds)
{
    free(ds->x);
    free(ds->labels);
    free(ds->row_ptr);
    free(ds->col);
    free(ds->val);
    memset(ds, 0, sizeof(*ds));
}

static int open_mlr(struct sfb_model **m, uint32_t d, uint32_t k, double lambda)
{
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    s.d = d;
    s.k = k;
    s.lambda = lambda;
    return sfb_model_open(m, &s);
}

static void randomize(struct sfb_model *m, float amp)
{
    struct sfb_matrix *a = sfb_model_matrix(m, 0);
    for (size_t q = 0; q < (size_t)a->rows * a->cols; q++) a->data[q] = amp * frand();
}

/* Σ_i −log softmax(A c_i)_{y_i} in double, straight from the definition. */
static double naive_loss(const float *a, uint32_t k, uint32_t d, const struct sfb_dataset *ds,
                         const uint64_t *idx, uint32_t s)
{
    double total = 0.0;
    for (uint32_t i = 0; i < s; i++) {
        const float *x = ds->x + idx[i] * d;
        double z[16], mx = -INFINITY, sum = 0.0;
        for (uint32_t j = 0; j < k; j++) {
            z[j] = a[(size_t)j * (d + 1) + d];
            for (uint32_t q = 0; q < d; q++) z[j] += (double)a[(size_t)j * (d + 1) + q] * x[q];
            mx = fmax(mx, z[j]);
        }
        for (uint32_t j = 0; j < k; j++) sum += exp(z[j] - mx);
        total += log(sum) + mx - z[ds->labels[idx[i]]];
    }
    return total;
}

/* Dense ΔA from the SFs: scale · Bᵀ C (dense c). */
static void delta_from_sf(const struct sfb_sf *sf, double *g)
{
    memset(g, 0, (size_t)sf->rows * sf->cols * sizeof(double));
    for (uint32_t i = 0; i < sf->s; i++)
        for (uint32_t k = 0; k < sf->rows; k++)
            for (uint32_t j = 0; j < sf->cols; j++)
                g[(size_t)k * sf->cols + j] += (double)sf->scale * sf->b[(size_t)i * sf->rows + k] *
                                               sf->c[(size_t)i * sf->cols + j];
}

/* B·Cᵀ·scale equals −η/S Σ (softmax(A c_i) − e_y) c_iᵀ computed with loops,
 * and the reported loss equals the naive loss. */
static int test_factors_vs_naive(void)
{
    const uint32_t d = 6, k = 4, s = 5;
    const float eta = 0.3f;
    struct sfb_dataset ds;
    make_dense(&ds, 20, d, k, 0.0);
    struct sfb_model *m;
    ASSERT_OK(open_mlr(&m, d, k, 0.0));
    ASSERT_EQ(sfb_model_n_matrices(m), 1);
    struct sfb_matrix *a = sfb_model_matrix(m, 0);
    ASSERT_EQ(a->rows, k);
    ASSERT_EQ(a->cols, d + 1);
    randomize(m, 0.8f);
    uint64_t idx[] = {3, 17, 0, 9, 3};
    struct sfb_sf sf = {0};
    double loss = 1.5; /* factors adds to it */
    ASSERT_OK(sfb_model_factors(m, &ds, idx, s, eta, &sf, &loss));
    ASSERT_EQ(sf.sparse_c, 0);
    ASSERT_EQ(sf.rows, k);
    ASSERT_EQ(sf.cols, d + 1);
    ASSERT_EQ(sf.s, s);
    ASSERT_NEAR(sf.scale, -eta / s, 1e-7);
    ASSERT_NEAR(loss - 1.5, naive_loss(a->data, k, d, &ds, idx, s), 1e-4);

    double g[4 * 7], ref[4 * 7] = {0};
    delta_from_sf(&sf, g);
    for (uint32_t i = 0; i < s; i++) {
        const float *x = ds.x + idx[i] * d;
        double z[4], mx = -INFINITY, sum = 0.0;
        for (uint32_t j = 0; j < k; j++) {
            z[j] = a->data[j * (d + 1) + d];
            for (uint32_t q = 0; q < d; q++) z[j] += (double)a->data[j * (d + 1) + q] * x[q];
            mx = fmax(mx, z[j]);
        }
        for (uint32_t j = 0; j < k; j++) sum += exp(z[j] - mx);
        for (uint32_t j = 0; j < k; j++) {
            double bj = exp(z[j] - mx) / sum - (j == (uint32_t)ds.labels[idx[i]]);
            for (uint32_t q = 0; q <= d; q++)
                ref[j * (d + 1) + q] += -eta / s * bj * (q < d ? x[q] : 1.0);
        }
    }
    for (int q = 0; q < 4 * 7; q++) ASSERT_NEAR(g[q], ref[q], 1e-5);
    /* Some entries must be sizeable, or the comparison proves nothing. */
    double gmax = 0;
    for (int q = 0; q < 4 * 7; q++) gmax = fmax(gmax, fabs(ref[q]));
    ASSERT(gmax > 0.05);
    sfb_sf_free(&sf);
    sfb_model_close(&m);
    ASSERT(m == NULL);
    free_ds(&ds);
    return 0;
}

/* The SF gradient (ΔA / scale = Σ b_i c_iᵀ) matches central finite
 * differences of the model's own reported loss, bias column included.
 * Float logits limit the accuracy: with h = 1e-2 the truncation error is
 * O(h²·L''') ≈ 1e-4 and rounding ≈ 1e-6/h ≈ 1e-4, so 2e-3 is a safe bound
 * while a wrong sign, a missing bias or a transposed index gives O(0.1). */
static int test_finite_differences(void)
{
    const uint32_t d = 3, k = 3, s = 4;
    struct sfb_dataset ds;
    make_dense(&ds, 10, d, k, 0.0);
    struct sfb_model *m;
    ASSERT_OK(open_mlr(&m, d, k, 0.0));
    randomize(m, 0.5f);
    struct sfb_matrix *a = sfb_model_matrix(m, 0);
    uint64_t idx[] = {1, 4, 7, 8};
    struct sfb_sf sf = {0};
    double loss = 0;
    ASSERT_OK(sfb_model_factors(m, &ds, idx, s, 1.0f, &sf, &loss));
    double g[3 * 4];
    delta_from_sf(&sf, g);
    const double h = 1e-2;
    int checked = 0;
    for (uint32_t q = 0; q < k * (d + 1); q++) {
        double grad = g[q] / sf.scale;
        float save = a->data[q];
        double lp = 0, lm = 0;
        a->data[q] = save + (float)h;
        ASSERT_OK(sfb_model_factors(m, &ds, idx, s, 1.0f, &sf, &lp));
        a->data[q] = save - (float)h;
        ASSERT_OK(sfb_model_factors(m, &ds, idx, s, 1.0f, &sf, &lm));
        a->data[q] = save;
        double fd = (lp - lm) / (2 * h);
        ASSERT_NEAR(grad, fd, 2e-3);
        checked += fabs(fd) > 0.05;
    }
    ASSERT_GE(checked, 3);
    sfb_sf_free(&sf);
    sfb_model_close(&m);
    free_ds(&ds);
    return 0;
}

/* The same data stored dense and CSR gives the same b, loss and update. */
static int test_sparse_equals_dense(void)
{
    const uint32_t d = 12, k = 5, s = 6;
    struct sfb_dataset dn, sp;
    make_dense(&dn, 30, d, k, 0.7);
    to_csr(&dn, &sp);
    ASSERT_LT(sp.row_ptr[sp.n], dn.n * d / 2); /* really sparse */
    struct sfb_model *m;
    ASSERT_OK(open_mlr(&m, d, k, 0.0));
    randomize(m, 0.7f);
    struct sfb_matrix *a = sfb_model_matrix(m, 0);
    uint64_t idx[] = {29, 0, 5, 5, 13, 22};
    struct sfb_sf sd = {0}, ss = {0};
    double ld = 0, ls = 0;
    ASSERT_OK(sfb_model_factors(m, &dn, idx, s, 0.2f, &sd, &ld));
    ASSERT_OK(sfb_model_factors(m, &sp, idx, s, 0.2f, &ss, &ls));
    ASSERT_EQ(ss.sparse_c, 1);
    ASSERT_EQ(sd.sparse_c, 0);
    ASSERT_NEAR(ld, ls, 1e-5);
    ASSERT(ld > 0.5);
    ASSERT_EQ(ss.scale, sd.scale);
    for (uint32_t q = 0; q < s * k; q++) ASSERT_NEAR(ss.b[q], sd.b[q], 1e-5);
    /* CSR c: the sample's non-zeros then the bias (d, 1). */
    for (uint32_t i = 0; i < s; i++) {
        uint32_t p1 = ss.c_row_ptr[i + 1];
        ASSERT_EQ(p1 - ss.c_row_ptr[i], sp.row_ptr[idx[i] + 1] - sp.row_ptr[idx[i]] + 1);
        ASSERT_EQ(ss.c_col[p1 - 1], d);
        ASSERT_EQ(ss.c_val[p1 - 1], 1.0f);
        ASSERT_EQ(sd.c[(size_t)i * (d + 1) + d], 1.0f);
    }
    size_t na = (size_t)k * (d + 1);
    float *a1 = malloc(na * sizeof(float)), *a2 = malloc(na * sizeof(float));
    memcpy(a1, a->data, na * sizeof(float));
    memcpy(a2, a->data, na * sizeof(float));
    struct sfb_matrix m1 = {k, d + 1, a1}, m2 = {k, d + 1, a2};
    struct sfb_reconstruct *r;
    ASSERT_OK(sfb_reconstruct_open(&r));
    const struct sfb_sf *p1[] = {&sd}, *p2[] = {&ss};
    ASSERT_OK(sfb_reconstruct_apply(r, &m1, p1, 1));
    ASSERT_OK(sfb_reconstruct_apply(r, &m2, p2, 1));
    double moved = 0;
    for (size_t q = 0; q < na; q++) {
        ASSERT_NEAR(a1[q], a2[q], 1e-5);
        moved = fmax(moved, fabs(a1[q] - a->data[q]));
    }
    ASSERT(moved > 1e-3);
    /* evaluate agrees too. */
    struct sfb_eval e1 = {.size = sizeof e1}, e2 = {.size = sizeof e2};
    ASSERT_OK(sfb_model_evaluate(m, &dn, &e1));
    ASSERT_OK(sfb_model_evaluate(m, &sp, &e2));
    ASSERT_EQ(e1.n, 30);
    ASSERT_NEAR(e1.loss, e2.loss, 1e-5);
    ASSERT_NEAR(e1.accuracy, e2.accuracy, 1e-12);
    sfb_reconstruct_close(&r);
    free(a1);
    free(a2);
    sfb_sf_free(&sd);
    sfb_sf_free(&ss);
    sfb_model_close(&m);
    free_ds(&dn);
    free_ds(&sp);
    return 0;
}

/* K = 2, D = 1; class 0: w = 1, bias 0; class 1: w = −1, bias 0.5.
 *   x =  1, y = 0: z = (1, −0.5)  → correct, nll = log(1 + e^−1.5)
 *   x = −1, y = 0: z = (−1, 1.5)  → wrong,   nll = log(1 + e^2.5)
 *   x =  0, y = 1: z = (0, 0.5)   → correct, nll = log(1 + e^−0.5)
 * With λ = 0.1 the penalty is 0.1/2 · (1² + 1²) = 0.1 (bias excluded). */
static int test_evaluate_hand(void)
{
    float x[] = {1, -1, 0};
    int32_t y[] = {0, 0, 1};
    struct sfb_dataset ds = {.n = 3, .d = 1, .k = 2, .labels = y, .x = x};
    struct sfb_model *m;
    ASSERT_OK(open_mlr(&m, 1, 2, 0.1));
    float *a = sfb_model_matrix(m, 0)->data;
    a[0] = 1;
    a[1] = 0;
    a[2] = -1;
    a[3] = 0.5f;
    struct sfb_eval e = {.size = sizeof e};
    ASSERT_OK(sfb_model_evaluate(m, &ds, &e));
    double mean = (log1p(exp(-1.5)) + log1p(exp(2.5)) + log1p(exp(-0.5))) / 3;
    ASSERT_EQ(e.n, 3);
    ASSERT_NEAR(e.accuracy, 2.0 / 3.0, 1e-12);
    ASSERT_NEAR(e.loss, mean + 0.1, 1e-6);
    /* Same data as CSR (the zero sample has no non-zeros). */
    uint64_t rp[] = {0, 1, 2, 2};
    uint32_t col[] = {0, 0};
    float val[] = {1, -1};
    struct sfb_dataset sp = {.n = 3, .d = 1, .k = 2, .labels = y, .sparse = 1,
                             .row_ptr = rp, .col = col, .val = val};
    ASSERT_OK(sfb_model_evaluate(m, &sp, &e));
    ASSERT_NEAR(e.accuracy, 2.0 / 3.0, 1e-12);
    ASSERT_NEAR(e.loss, mean + 0.1, 1e-6);
    /* Decay: A ← (1 − ηλ)A on the weights, bias untouched. */
    sfb_model_apply_local(m, 0.5f);
    ASSERT_NEAR(a[0], 0.95, 1e-7);
    ASSERT_NEAR(a[2], -0.95, 1e-7);
    ASSERT_NEAR(a[1], 0.0, 0);
    ASSERT_NEAR(a[3], 0.5, 0);
    sfb_model_close(&m);
    return 0;
}

/* Dense evaluate goes through sgemm in chunks of 256 rows: a set larger than
 * one chunk must agree with the per-sample CSR path. */
static int test_evaluate_chunks(void)
{
    struct sfb_dataset dn, sp;
    make_dense(&dn, 600, 7, 3, 0.3);
    to_csr(&dn, &sp);
    struct sfb_model *m;
    ASSERT_OK(open_mlr(&m, 7, 3, 0.01));
    randomize(m, 1.0f);
    struct sfb_eval e1 = {.size = sizeof e1}, e2 = {.size = sizeof e2};
    ASSERT_OK(sfb_model_evaluate(m, &dn, &e1));
    ASSERT_OK(sfb_model_evaluate(m, &sp, &e2));
    ASSERT_NEAR(e1.loss, e2.loss, 1e-5);
    ASSERT_NEAR(e1.accuracy, e2.accuracy, 1e-12);
    uint64_t all[600];
    for (uint64_t i = 0; i < 600; i++) all[i] = i;
    /* Mean loss without regulariser from the naive definition. */
    double reg = 0;
    const float *a = sfb_model_matrix(m, 0)->data;
    for (int j = 0; j < 3; j++)
        for (int q = 0; q < 7; q++) reg += 0.5 * 0.01 * a[j * 8 + q] * a[j * 8 + q];
    ASSERT_NEAR(e1.loss, naive_loss(a, 3, 7, &dn, all, 600) / 600 + reg, 1e-5);
    sfb_model_close(&m);
    free_ds(&dn);
    free_ds(&sp);
    return 0;
}

/* Plain SGD (factors + reconstruct + apply_local) on a linearly separable
 * problem reaches high training accuracy. */
static int test_sgd_converges(void)
{
    const uint32_t d = 8, k = 3, n = 400, s = 16;
    struct sfb_dataset ds;
    make_dense(&ds, n, d, k, 0.0);
    float w[3][8];
    for (uint32_t j = 0; j < k; j++)
        for (uint32_t q = 0; q < d; q++) w[j][q] = frand();
    for (uint32_t i = 0; i < n; i++) {
        float best = -INFINITY;
        for (uint32_t j = 0; j < k; j++) {
            float z = 0;
            for (uint32_t q = 0; q < d; q++) z += w[j][q] * ds.x[i * d + q];
            if (z > best) best = z, ds.labels[i] = (int32_t)j;
        }
    }
    struct sfb_model *m;
    ASSERT_OK(open_mlr(&m, d, k, 1e-4));
    struct sfb_eval e0 = {.size = sizeof e0}, e = {.size = sizeof e};
    ASSERT_OK(sfb_model_evaluate(m, &ds, &e0));
    ASSERT_NEAR(e0.loss, log(3.0), 1e-6); /* zero init: uniform softmax */
    struct sfb_reconstruct *r;
    ASSERT_OK(sfb_reconstruct_open(&r));
    struct sfb_sf sf = {0};
    const struct sfb_sf *set[] = {&sf};
    uint64_t idx[16];
    float *b0 = NULL;
    for (uint32_t t = 0; t < 400; t++) {
        for (uint32_t i = 0; i < s; i++) idx[i] = (t * s + i * 7) % n;
        double loss = 0;
        ASSERT_OK(sfb_model_factors(m, &ds, idx, s, 0.5f, &sf, &loss));
        if (t == 1) b0 = sf.b;
        if (t > 1) ASSERT(sf.b == b0); /* steady state: no reallocation */
        ASSERT_OK(sfb_reconstruct_apply(r, sfb_model_matrix(m, 0), set, 1));
        sfb_model_apply_local(m, 0.5f);
    }
    ASSERT_OK(sfb_model_evaluate(m, &ds, &e));
    fprintf(stderr, "  sgd: accuracy %.4f, loss %.4f (start %.4f)\n", e.accuracy, e.loss,
            e0.loss);
    ASSERT(e.accuracy >= 0.95);
    ASSERT(e.loss < 0.5 * e0.loss);
    sfb_sf_free(&sf);
    sfb_reconstruct_close(&r);
    sfb_model_close(&m);
    free_ds(&ds);
    return 0;
}

static int test_registry_and_errors(void)
{
    ASSERT(sfb_model_find("mlr") != NULL);
    ASSERT(sfb_model_find("nope") == NULL);
    ASSERT_STR_CONTAINS(sfb_model_names(), "mlr");
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    s.kind = "nope";
    s.d = 3;
    s.k = 2;
    struct sfb_model *m = (struct sfb_model *)&s;
    ASSERT_EQ(sfb_model_open(&m, &s), -EINVAL);
    ASSERT(m == NULL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "unknown kind 'nope'");
    s.kind = "mlr";
    s.k = 0;
    ASSERT_EQ(sfb_model_open(&m, &s), -EINVAL);
    s.k = 2;
    s.lambda = -1;
    ASSERT_EQ(sfb_model_open(&m, &s), -EINVAL);
    s.lambda = 0;
    char kind[8] = "mlr";
    s.kind = kind;
    ASSERT_OK(sfb_model_open(&m, &s));
    kind[0] = 'x'; /* the model keeps its own copy */
    ASSERT_EQ(strcmp(sfb_model_get_settings(m)->kind, "mlr"), 0);
    ASSERT_EQ(sfb_model_get_settings(m)->d, 3);
    ASSERT(sfb_model_get_ops(m) == sfb_model_find("mlr"));
    ASSERT(sfb__model_priv(m) != NULL);
    ASSERT(sfb_model_matrix(m, 1) == NULL);

    float x[] = {1, 2, 3, 4, 5, 6};
    int32_t y[] = {0, 2};
    struct sfb_dataset ds = {.n = 2, .d = 3, .k = 3, .labels = y, .x = x};
    struct sfb_sf sf = {0};
    double loss = 0;
    uint64_t idx[] = {0, 1};
    ASSERT_EQ(sfb_model_factors(m, &ds, idx, 2, 0.1f, &sf, &loss), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "label 2");
    y[1] = 1;
    idx[1] = 2;
    ASSERT_EQ(sfb_model_factors(m, &ds, idx, 2, 0.1f, &sf, &loss), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "index 2");
    ds.d = 2;
    ASSERT_EQ(sfb_model_factors(m, &ds, idx, 1, 0.1f, &sf, &loss), -SFB_ESHAPE);
    struct sfb_eval e = {.size = sizeof e};
    ASSERT_EQ(sfb_model_evaluate(m, &ds, &e), -SFB_ESHAPE);
    ASSERT_EQ(loss, 0.0);
    uint64_t rp[] = {0, 1};
    uint32_t col[] = {3};
    float val[] = {1};
    struct sfb_dataset sp = {.n = 1, .d = 3, .k = 2, .labels = y, .sparse = 1,
                             .row_ptr = rp, .col = col, .val = val};
    ASSERT_EQ(sfb_model_factors(m, &sp, idx, 1, 0.1f, &sf, &loss), -SFB_ESHAPE);
    ASSERT_EQ(sfb_model_evaluate(m, &sp, &e), -SFB_ESHAPE);
    sfb_sf_free(&sf);
    sfb_model_close(&m);
    sfb_model_close(&m); /* NULL is fine */
    return 0;
}

/* L2-MLR: one clock of the runtime (SFs through reconstruct, then the local
 * decay) is A1 = (1 − ηλ)(A + ΔA) on the weights and A + ΔA on the bias, and
 * (A − A1)/η is the gradient of the regularized objective
 * F(A) = (1/S) Σ CE + λ/2 ‖W‖² (central differences; the O(η) gap between
 * decay-after-step and a plain gradient step stays inside the tolerance). */
static int test_l2_step_is_gradient_step(void)
{
    const uint32_t d = 5, k = 3, s = 6;
    const float eta = 1e-3f;
    const double lambda = 0.3;
    struct sfb_dataset ds;
    make_dense(&ds, 30, d, k, 0.0);
    struct sfb_model *m;
    ASSERT_OK(open_mlr(&m, d, k, lambda));
    randomize(m, 0.7f);
    struct sfb_matrix *a = sfb_model_matrix(m, 0);
    float a0[3 * 6], work[3 * 6];
    memcpy(a0, a->data, sizeof a0);
    uint64_t idx[] = {1, 5, 8, 13, 21, 29};
    struct sfb_sf sf = {0};
    double loss = 0;
    ASSERT_OK(sfb_model_factors(m, &ds, idx, s, eta, &sf, &loss));
    double g[3 * 6];
    delta_from_sf(&sf, g);
    struct sfb_reconstruct *r;
    ASSERT_OK(sfb_reconstruct_open(&r));
    const struct sfb_sf *set[] = {&sf};
    ASSERT_OK(sfb_reconstruct_apply(r, a, set, 1));
    sfb_model_apply_local(m, eta);
    for (uint32_t j = 0; j < k; j++)
        for (uint32_t q = 0; q <= d; q++) {
            size_t o = (size_t)j * (d + 1) + q;
            double want = (a0[o] + g[o]) * (q < d ? 1.0 - eta * lambda : 1.0);
            ASSERT_NEAR(a->data[o], want, 1e-6);
        }
    for (uint32_t j = 0; j < k; j++)
        for (uint32_t q = 0; q <= d; q++) {
            size_t o = (size_t)j * (d + 1) + q;
            memcpy(work, a0, sizeof work);
            work[o] = a0[o] + 1e-3f;
            double hp = work[o];
            double fp = naive_loss(work, k, d, &ds, idx, s) / s;
            work[o] = a0[o] - 1e-3f;
            double hm = work[o];
            double fm = naive_loss(work, k, d, &ds, idx, s) / s;
            double reg_grad = q < d ? lambda * a0[o] : 0.0; /* λ/2‖W‖², bias free */
            double fd = (fp - fm) / (hp - hm) + reg_grad;
            double step = ((double)a0[o] - a->data[o]) / eta;
            ASSERT_NEAR(step, fd, 2e-3);
        }
    sfb_reconstruct_close(&r);
    sfb_sf_free(&sf);
    sfb_model_close(&m);
    free_ds(&ds);
    return 0;
}

static const struct test_case tests[] = {
    {"l2_step_is_gradient_step", test_l2_step_is_gradient_step},
    {"factors_vs_naive", test_factors_vs_naive},
    {"finite_differences", test_finite_differences},
    {"sparse_equals_dense", test_sparse_equals_dense},
    {"evaluate_hand", test_evaluate_hand},
    {"evaluate_chunks", test_evaluate_chunks},
    {"sgd_converges", test_sgd_converges},
    {"registry_and_errors", test_registry_and_errors},
};

TEST_MAIN(tests)
