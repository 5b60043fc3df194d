/* MLP (models/mlp.c): every layer's SF, reconstructed by sfb_reconstruct_apply,
 * against −η times the finite-difference gradient; CSR input against dense;
 * evaluate against the losses and predictions factors reports; shapes,
 * initialisation and the settings it refuses. Datasets are built in memory. */
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

/* Dense data; a feature is zero with probability `zeros` (so CSR is sparse). */
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
    for (uint64_t i = 0; i < n; i++)
        ds->labels[i] = (int32_t)(((frand() + 1.0f) * 0.5f) * k) % (int32_t)k;
}

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

static int open_mlp(struct sfb_model **m, uint32_t d, uint32_t k, uint32_t n_hidden,
                    const uint32_t *hidden, uint64_t seed)
{
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    s.kind = "mlp";
    s.d = d;
    s.k = k;
    s.seed = seed;
    s.hidden.n = n_hidden;
    for (uint32_t i = 0; i < n_hidden && i < SFB_MODEL_LIST_MAX; i++) s.hidden.v[i] = hidden[i];
    return sfb_model_open(m, &s);
}

/* ΔW_l = scale · Bᵀ C of sfs[l], by sfb_reconstruct_apply onto zeros. */
static int reconstruct(const struct sfb_sf *sf, float *delta)
{
    struct sfb_reconstruct *r;
    ASSERT_OK(sfb_reconstruct_open(&r));
    memset(delta, 0, (size_t)sf->rows * sf->cols * sizeof(float));
    struct sfb_matrix a = {sf->rows, sf->cols, delta};
    const struct sfb_sf *one = sf;
    ASSERT_OK(sfb_reconstruct_apply(r, &a, &one, 1));
    sfb_reconstruct_close(&r);
    return 0;
}

/* Three layers (4 → 6 → 5 → 3, two ReLU layers, so δ passes a hidden layer
 * twice): for every parameter of every matrix, the reconstructed update of
 * its SF equals −η/S · ∂(summed loss)/∂w by central differences. h = 1e-2:
 * truncation O(h²) and float rounding of the summed loss (~1e-6/h) stay well
 * under the 2e-3 bound, while a wrong sign, a missing bias, a transposed
 * index or a missing ReLU mask gives O(0.1). No pre-activation of these
 * samples lies within h·Σ|input| of the ReLU's kink (checked below), so the
 * loss is smooth over each difference. */
static int test_finite_differences(void)
{
    const uint32_t d = 4, k = 3, s = 5, hid[] = {6, 5};
    const float eta = 0.5f;
    struct sfb_dataset ds;
    rng_state = 0x9E3779B97F4A7C15ull; /* the data the margin below was checked on */
    make_dense(&ds, 12, d, k, 0.0);
    struct sfb_model *m;
    ASSERT_OK(open_mlp(&m, d, k, 2, hid, 7));
    ASSERT_EQ(sfb_model_n_matrices(m), 3);
    /* non-zero biases, so the bias column's gradient is tested through a
     * network that uses them */
    for (uint32_t l = 0; l < 3; l++) {
        struct sfb_matrix *w = sfb_model_matrix(m, l);
        for (uint32_t j = 0; j < w->rows; j++) w->data[(size_t)j * w->cols + w->cols - 1] = 0.3f * frand();
    }
    uint64_t idx[] = {0, 3, 5, 8, 11};
    struct sfb_sf sf[3] = {{0}};
    double loss = 0;
    ASSERT_OK(sfb_model_factors(m, &ds, idx, s, eta, sf, &loss));
    /* The kink margin, from a forward pass in double written out here:
     * every hidden pre-activation is at least 0.05 from 0, while one weight
     * moved by h moves it by at most h·|input| <= 0.02 (|x| < 2) plus what
     * reaches it through the layer before. The same pass checks the c of
     * layers 1 and 2: [ReLU(z); 1]. */
    for (uint32_t i = 0; i < s; i++) {
        double a[8] = {0}, z[8];
        uint32_t in = d;
        for (uint32_t q = 0; q < d; q++) a[q] = ds.x[idx[i] * d + q];
        for (uint32_t l = 0; l < 2; l++) {
            const struct sfb_matrix *w = sfb_model_matrix(m, l);
            for (uint32_t j = 0; j < w->rows; j++) {
                z[j] = w->data[(size_t)j * w->cols + in];
                for (uint32_t q = 0; q < in; q++) z[j] += w->data[(size_t)j * w->cols + q] * a[q];
                ASSERT_GT(fabs(z[j]), 0.05);
            }
            for (uint32_t j = 0; j < w->rows; j++) {
                a[j] = z[j] > 0 ? z[j] : 0;
                ASSERT_NEAR(sf[l + 1].c[(size_t)i * sf[l + 1].cols + j], a[j], 1e-5);
            }
            ASSERT_EQ(sf[l + 1].c[(size_t)i * sf[l + 1].cols + w->rows], 1.0f);
            in = w->rows;
        }
    }
    const double h = 1e-2;
    int checked[3] = {0};
    for (uint32_t l = 0; l < 3; l++) {
        struct sfb_matrix *w = sfb_model_matrix(m, l);
        ASSERT_EQ(sf[l].matrix, l);
        ASSERT_EQ(sf[l].rows, w->rows);
        ASSERT_EQ(sf[l].cols, w->cols);
        ASSERT_EQ(sf[l].s, s);
        ASSERT_NEAR(sf[l].scale, -eta / s, 1e-7);
        float delta[64];
        ASSERT_LE((size_t)w->rows * w->cols, sizeof delta / sizeof *delta);
        if (reconstruct(&sf[l], delta)) return 1;
        for (uint32_t q = 0; q < w->rows * w->cols; q++) {
            struct sfb_sf scratch[3] = {{0}};
            float save = w->data[q];
            double lp = 0, lm = 0;
            w->data[q] = save + (float)h;
            ASSERT_OK(sfb_model_factors(m, &ds, idx, s, eta, scratch, &lp));
            w->data[q] = save - (float)h;
            ASSERT_OK(sfb_model_factors(m, &ds, idx, s, eta, scratch, &lm));
            w->data[q] = save;
            for (int i = 0; i < 3; i++) sfb_sf_free(&scratch[i]);
            double fd = (lp - lm) / (2 * h);
            ASSERT_NEAR(delta[q], -eta / s * fd, 2e-3);
            checked[l] += fabs(fd) > 0.05;
        }
    }
    /* each layer, and the first one's through two masks, has real gradient */
    for (uint32_t l = 0; l < 3; l++) ASSERT_GE(checked[l], 3);
    for (int i = 0; i < 3; i++) sfb_sf_free(&sf[i]);
    sfb_model_close(&m);
    free_ds(&ds);
    return 0;
}

/* CSR input gives the same loss and the same reconstructed update of every
 * layer as the same data dense (layer 0's c is CSR with the bias column). */
static int test_sparse_equals_dense(void)
{
    const uint32_t d = 9, k = 4, s = 6, hid[] = {7};
    struct sfb_dataset dense, csr;
    make_dense(&dense, 20, d, k, 0.6);
    to_csr(&dense, &csr);
    struct sfb_model *m;
    ASSERT_OK(open_mlp(&m, d, k, 1, hid, 5));
    uint64_t idx[] = {2, 3, 7, 11, 13, 19};
    struct sfb_sf a[2] = {{0}}, b[2] = {{0}};
    double la = 0, lb = 0;
    ASSERT_OK(sfb_model_factors(m, &dense, idx, s, 1.0f, a, &la));
    ASSERT_OK(sfb_model_factors(m, &csr, idx, s, 1.0f, b, &lb));
    ASSERT_EQ(a[0].sparse_c, 0);
    ASSERT_EQ(b[0].sparse_c, 1);
    ASSERT_EQ(b[1].sparse_c, 0);
    ASSERT_NEAR(la, lb, 1e-5);
    for (uint32_t l = 0; l < 2; l++) {
        float da[128], db[128];
        ASSERT_LE((size_t)a[l].rows * a[l].cols, sizeof da / sizeof *da);
        if (reconstruct(&a[l], da) || reconstruct(&b[l], db)) return 1;
        for (uint32_t q = 0; q < a[l].rows * a[l].cols; q++) ASSERT_NEAR(da[q], db[q], 1e-5);
    }
    struct sfb_eval ea = {.size = sizeof ea}, eb = {.size = sizeof eb};
    ASSERT_OK(sfb_model_evaluate(m, &dense, &ea));
    ASSERT_OK(sfb_model_evaluate(m, &csr, &eb));
    ASSERT_NEAR(ea.loss, eb.loss, 1e-5);
    ASSERT_EQ(ea.accuracy, eb.accuracy);
    /* a CSR column outside d is refused, naming it */
    csr.col[csr.row_ptr[idx[0]]] = d;
    ASSERT_EQ(sfb_model_factors(m, &csr, idx, 1, 1.0f, b, &lb), -SFB_ESHAPE);
    ASSERT(strstr(sfb_last_error(), "feature 9 >= d=9"));
    for (int i = 0; i < 2; i++) {
        sfb_sf_free(&a[i]);
        sfb_sf_free(&b[i]);
    }
    sfb_model_close(&m);
    free_ds(&dense);
    free_ds(&csr);
    return 0;
}

/* evaluate over 600 samples (three chunks, the last partial) equals the mean
 * of the losses factors reports, and its accuracy the argmax of the
 * probabilities factors computes (b = p − e_y of the output layer). */
static int test_evaluate_matches_factors(void)
{
    const uint32_t d = 5, k = 4, n = 600, hid[] = {8, 6};
    struct sfb_dataset ds;
    make_dense(&ds, n, d, k, 0.0);
    struct sfb_model *m;
    ASSERT_OK(open_mlp(&m, d, k, 2, hid, 9));
    uint64_t *idx = malloc(n * sizeof *idx);
    for (uint32_t i = 0; i < n; i++) idx[i] = i;
    struct sfb_sf sf[3] = {{0}};
    double loss = 0;
    ASSERT_OK(sfb_model_factors(m, &ds, idx, n, 1.0f, sf, &loss));
    uint64_t correct = 0;
    for (uint32_t i = 0; i < n; i++) {
        const float *bi = sf[2].b + (size_t)i * k;
        uint32_t y = (uint32_t)ds.labels[i], arg = 0;
        float best = -1;
        for (uint32_t j = 0; j < k; j++) {
            float p = bi[j] + (j == y);
            if (p > best) best = p, arg = j;
        }
        correct += arg == y;
    }
    struct sfb_eval ev = {.size = sizeof ev};
    ASSERT_OK(sfb_model_evaluate(m, &ds, &ev));
    ASSERT_EQ(ev.n, n);
    ASSERT_NEAR(ev.loss, loss / n, 1e-5);
    ASSERT_NEAR(ev.accuracy, (double)correct / n, 1.5 / n); /* a tie may break otherwise */
    ASSERT(ev.loss > 0.5); /* random labels: near log 4 */
    ASSERT(isnan(ev.recon_error) && isnan(ev.knn_accuracy));
    for (int i = 0; i < 3; i++) sfb_sf_free(&sf[i]);
    free(idx);
    sfb_model_close(&m);
    free_ds(&ds);
    return 0;
}

/* One SGD step per clock on a separable problem (class = sign pattern of two
 * features) lowers the loss and reaches high training accuracy: the SFs are
 * descent directions when applied as the runtime applies them. */
static int test_sgd_converges(void)
{
    const uint32_t d = 6, k = 4, n = 400, s = 20, hid[] = {16};
    struct sfb_dataset ds;
    make_dense(&ds, n, d, k, 0.0);
    for (uint32_t i = 0; i < n; i++)
        ds.labels[i] = (ds.x[i * d] > 0) + 2 * (ds.x[i * d + 1] > 0); /* XOR-like: not linear */
    struct sfb_model *m;
    ASSERT_OK(open_mlp(&m, d, k, 1, hid, 1));
    struct sfb_reconstruct *r;
    ASSERT_OK(sfb_reconstruct_open(&r));
    struct sfb_eval e0 = {.size = sizeof e0}, e1 = {.size = sizeof e1};
    ASSERT_OK(sfb_model_evaluate(m, &ds, &e0));
    struct sfb_sf sf[2] = {{0}};
    uint64_t idx[20];
    for (uint32_t t = 0; t < 3000; t++) {
        for (uint32_t i = 0; i < s; i++) idx[i] = (t * s + i * 7) % n;
        double loss = 0;
        ASSERT_OK(sfb_model_factors(m, &ds, idx, s, 0.2f, sf, &loss));
        for (uint32_t l = 0; l < 2; l++) {
            const struct sfb_sf *one = &sf[l];
            ASSERT_OK(sfb_reconstruct_apply(r, sfb_model_matrix(m, l), &one, 1));
        }
    }
    ASSERT_OK(sfb_model_evaluate(m, &ds, &e1));
    ASSERT_LT(e1.loss, 0.5 * e0.loss);
    ASSERT_GE(e1.accuracy, 0.95);
    for (int i = 0; i < 2; i++) sfb_sf_free(&sf[i]);
    sfb_reconstruct_close(&r);
    sfb_model_close(&m);
    free_ds(&ds);
    return 0;
}

/* Shapes for the default and for three hidden layers; the initialisation is
 * seeded (same seed: same bits; other seed: other weights), biases start at
 * 0, and the weights' spread is He's sqrt(2/in) for ReLU layers and
 * sqrt(1/in) for the output layer. */
static int test_shapes_and_init(void)
{
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    ASSERT_EQ(s.hidden.n, 1);
    ASSERT_EQ(s.hidden.v[0], 1024);
    s.kind = "mlp";
    s.d = 784;
    s.k = 10;
    const struct sfb_model_ops *ops = sfb_model_find("mlp");
    ASSERT(ops && ops->shapes);
    uint64_t rows[SFB_MODEL_MAX_MATRICES], cols[SFB_MODEL_MAX_MATRICES];
    ASSERT_EQ(ops->shapes(&s, rows, cols), 2);
    ASSERT_EQ(rows[0], 1024);
    ASSERT_EQ(cols[0], 785);
    ASSERT_EQ(rows[1], 10);
    ASSERT_EQ(cols[1], 1025);
    s.hidden = (struct sfb_model_u32_list){3, {256, 128, 64}};
    ASSERT_EQ(ops->shapes(&s, rows, cols), 4);
    const uint64_t want_r[] = {256, 128, 64, 10}, want_c[] = {785, 257, 129, 65};
    for (int l = 0; l < 4; l++) {
        ASSERT_EQ(rows[l], want_r[l]);
        ASSERT_EQ(cols[l], want_c[l]);
    }

    struct sfb_model *a, *b, *c;
    ASSERT_OK(sfb_model_open(&a, &s));
    ASSERT_OK(sfb_model_open(&b, &s));
    s.seed = 2;
    ASSERT_OK(sfb_model_open(&c, &s));
    ASSERT_EQ(sfb_model_n_matrices(a), 4);
    for (uint32_t l = 0; l < 4; l++) {
        struct sfb_matrix *wa = sfb_model_matrix(a, l), *wb = sfb_model_matrix(b, l),
                          *wc = sfb_model_matrix(c, l);
        ASSERT_EQ(wa->rows, want_r[l]);
        ASSERT_EQ(wa->cols, want_c[l]);
        size_t cnt = (size_t)wa->rows * wa->cols;
        ASSERT(memcmp(wa->data, wb->data, cnt * sizeof(float)) == 0);
        ASSERT(memcmp(wa->data, wc->data, cnt * sizeof(float)) != 0);
        double sum2 = 0;
        for (uint32_t j = 0; j < wa->rows; j++) {
            ASSERT_EQ(wa->data[(size_t)j * wa->cols + wa->cols - 1], 0.0f);
            for (uint32_t q = 0; q + 1 < wa->cols; q++) {
                double v = wa->data[(size_t)j * wa->cols + q];
                sum2 += v * v;
            }
        }
        double var = sum2 / ((double)wa->rows * (wa->cols - 1));
        double want = (l < 3 ? 2.0 : 1.0) / (wa->cols - 1);
        ASSERT_NEAR(var / want, 1.0, 0.1);
    }
    sfb_model_close(&a);
    sfb_model_close(&b);
    sfb_model_close(&c);
    return 0;
}

/* Settings that describe no network are refused by sfb_model_open with a
 * message naming the setting; shapes() returns 0 for them. */
static int test_bad_settings(void)
{
    struct sfb_model *m = NULL;
    const uint32_t big[] = {1u << 17}, zero[] = {5, 0}, four[] = {1, 2, 3, 4};
    ASSERT_EQ(open_mlp(&m, 4, 3, 0, NULL, 1), -EINVAL);
    ASSERT(strstr(sfb_last_error(), "hidden has 0 layers, expected 1..3"));
    ASSERT_EQ(open_mlp(&m, 4, 3, 4, four, 1), -EINVAL);
    ASSERT(strstr(sfb_last_error(), "hidden has 4 layers"));
    ASSERT_EQ(open_mlp(&m, 4, 3, 2, zero, 1), -EINVAL);
    ASSERT(strstr(sfb_last_error(), "hidden layer 2 has 0 units"));
    ASSERT_EQ(open_mlp(&m, 4, 3, 1, big, 1), -EINVAL);
    ASSERT(strstr(sfb_last_error(), "hidden layer 1 has 131072 units"));
    ASSERT_EQ(open_mlp(&m, 0, 3, 1, zero, 1), -EINVAL);
    ASSERT(strstr(sfb_last_error(), "d > 0"));
    ASSERT(m == NULL);
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    s.kind = "mlp";
    s.d = 4;
    s.k = 3;
    s.hidden.n = 0;
    uint64_t rows[4], cols[4];
    ASSERT_EQ(sfb_model_find("mlp")->shapes(&s, rows, cols), 0);
    /* data of another d, and a label outside k */
    const uint32_t h[] = {3};
    ASSERT_OK(open_mlp(&m, 4, 3, 1, h, 1));
    struct sfb_dataset ds;
    make_dense(&ds, 4, 5, 3, 0.0);
    struct sfb_sf sf[2] = {{0}};
    uint64_t idx[] = {0};
    double loss = 0;
    ASSERT_EQ(sfb_model_factors(m, &ds, idx, 1, 1.0f, sf, &loss), -SFB_ESHAPE);
    ASSERT(strstr(sfb_last_error(), "data has d=5 features, model expects 4"));
    free_ds(&ds);
    make_dense(&ds, 4, 4, 3, 0.0);
    ds.labels[0] = 3;
    ASSERT_EQ(sfb_model_factors(m, &ds, idx, 1, 1.0f, sf, &loss), -EINVAL);
    ASSERT(strstr(sfb_last_error(), "sample 0 has label 3, model has 3 classes"));
    free_ds(&ds);
    sfb_model_close(&m);
    return 0;
}

/* L2: apply_local decays every weight by (1 − ηλ) and leaves every bias;
 * evaluate adds λ/2 Σ‖W‖² without the biases. */
static int test_l2(void)
{
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    s.kind = "mlp";
    s.d = 3;
    s.k = 2;
    s.lambda = 0.1;
    s.hidden = (struct sfb_model_u32_list){1, {4}};
    struct sfb_model *m;
    ASSERT_OK(sfb_model_open(&m, &s));
    struct sfb_dataset ds;
    make_dense(&ds, 10, 3, 2, 0.0);
    double reg = 0;
    float before[2][20];
    for (uint32_t l = 0; l < 2; l++) {
        struct sfb_matrix *w = sfb_model_matrix(m, l);
        for (uint32_t q = 0; q < w->rows * w->cols; q++) {
            if (q % w->cols == w->cols - 1) w->data[q] = 0.7f; /* bias */
            else reg += (double)w->data[q] * w->data[q];
            before[l][q] = w->data[q];
        }
    }
    struct sfb_eval e0 = {.size = sizeof e0};
    ASSERT_OK(sfb_model_evaluate(m, &ds, &e0));
    s.lambda = 0;
    struct sfb_model *m0;
    ASSERT_OK(sfb_model_open(&m0, &s));
    for (uint32_t l = 0; l < 2; l++)
        memcpy(sfb_model_matrix(m0, l)->data, before[l],
               (size_t)sfb_model_matrix(m, l)->rows * sfb_model_matrix(m, l)->cols * sizeof(float));
    struct sfb_eval ez = {.size = sizeof ez};
    ASSERT_OK(sfb_model_evaluate(m0, &ds, &ez));
    ASSERT_NEAR(e0.loss - ez.loss, 0.05 * reg, 1e-6);
    sfb_model_apply_local(m, 0.5f);
    for (uint32_t l = 0; l < 2; l++) {
        struct sfb_matrix *w = sfb_model_matrix(m, l);
        for (uint32_t q = 0; q < w->rows * w->cols; q++)
            ASSERT_NEAR(w->data[q], q % w->cols == w->cols - 1 ? 0.7f : 0.95f * before[l][q], 1e-7);
    }
    sfb_model_close(&m);
    sfb_model_close(&m0);
    free_ds(&ds);
    return 0;
}

static const struct test_case tests[] = {
    {"finite_differences", test_finite_differences},
    {"sparse_equals_dense", test_sparse_equals_dense},
    {"evaluate_matches_factors", test_evaluate_matches_factors},
    {"sgd_converges", test_sgd_converges},
    {"shapes_and_init", test_shapes_and_init},
    {"bad_settings", test_bad_settings},
    {"l2", test_l2},
};

TEST_MAIN(tests)
