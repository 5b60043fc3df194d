/* DML: SFs against a naive gradient and finite differences, pair sampling,
 * pair files, k-NN evaluation, and SGD learning a metric that beats the
 * Euclidean one on data where 2 of many dimensions carry the class. */
#include "models/dml.h"
#include "models/model_internal.h"
#include <sfb/model.h>
#include "test.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static uint64_t rs = 0x1234567887654321ull;

/* N(0, 1) from the library's libm-free sampler (src/base/rng.h). */
static double gauss(void)
{
    static struct sfb__rng g;
    static int seeded;
    if (!seeded) sfb__rng_seed(&g, 0x1234567887654321ull), seeded = 1;
    return sfb__rng_gauss(&g);
}

static double urand(void) /* [0, 1) */
{
    return (double)(sfb__splitmix64(&rs) >> 11) * (1.0 / 9007199254740992.0);
}

static void make_data(struct sfb_dataset *ds, uint64_t n, uint32_t d, uint32_t k)
{
    memset(ds, 0, sizeof *ds);
    ds->n = n;
    ds->d = d;
    ds->k = k;
    ds->x = malloc(n * d * sizeof(float));
    ds->labels = malloc(n * sizeof(int32_t));
    for (uint64_t q = 0; q < n * d; q++)
        ds->x[q] = (float)(2 * urand() - 1);
    for (uint64_t i = 0; i < n; i++)
        ds->labels[i] = (int32_t)(urand() * k);
}

/* Quadrant classes from dims 0 and 1 (uniform in [−1, 1]); the other d − 2
 * dims are N(0, noise²) and carry nothing. */
static void make_informative(struct sfb_dataset *ds, uint64_t n, uint32_t d, double noise)
{
    memset(ds, 0, sizeof *ds);
    ds->n = n;
    ds->d = d;
    ds->k = 4;
    ds->x = malloc(n * d * sizeof(float));
    ds->labels = malloc(n * sizeof(int32_t));
    for (uint64_t i = 0; i < n; i++) {
        float *x = ds->x + i * d;
        x[0] = (float)(2 * urand() - 1);
        x[1] = (float)(2 * urand() - 1);
        for (uint32_t q = 2; q < d; q++)
            x[q] = (float)(noise * gauss());
        ds->labels[i] = (x[0] > 0) + 2 * (x[1] > 0);
    }
}

static void free_ds(struct sfb_dataset *ds)
{
    free(ds->x);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

static int open_dml(struct sfb_model **m, uint32_t d, uint32_t rank, double lambda)
{
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    s.kind = "dml";
    s.d = d;
    s.proj_dim = rank;
    s.lambda = lambda;
    s.seed = 7;
    return sfb_model_open(m, &s);
}

/* Finds the partner j with c_i = x_a − x_j. */
static int64_t find_partner(const struct sfb_dataset *ds, uint64_t a, const float *c)
{
    for (uint64_t j = 0; j < ds->n; j++) {
        int ok = 1;
        for (uint32_t q = 0; q < ds->d && ok; q++)
            ok = c[q] == ds->x[a * ds->d + q] - ds->x[j * ds->d + q];
        if (ok) return (int64_t)j;
    }
    return -1;
}

/* Σ pair losses in double for pairs (a_i, j_i). */
static double naive_obj(const double *l, uint32_t k, const struct sfb_dataset *ds,
                        const uint64_t *a, const uint64_t *j, uint32_t s, double lambda,
                        double *grad /* k × d or NULL */)
{
    const uint32_t d = ds->d;
    double tot = 0;
    if (grad) memset(grad, 0, sizeof(double) * k * d);
    for (uint32_t i = 0; i < s; i++) {
        double delta[64], z[16], q = 0;
        for (uint32_t c = 0; c < d; c++)
            delta[c] = (double)ds->x[a[i] * d + c] - ds->x[j[i] * d + c];
        for (uint32_t r = 0; r < k; r++) {
            z[r] = 0;
            for (uint32_t c = 0; c < d; c++)
                z[r] += l[r * d + c] * delta[c];
            q += z[r] * z[r];
        }
        int sim = ds->labels[a[i]] == ds->labels[j[i]];
        double f = 0;
        if (sim) {
            tot += q;
            f = 2;
        } else if (q < 1) {
            tot += lambda * (1 - q);
            f = -2 * lambda;
        }
        if (grad)
            for (uint32_t r = 0; r < k; r++)
                for (uint32_t c = 0; c < d; c++)
                    grad[r * d + c] += f * z[r] * delta[c];
    }
    return tot;
}

/* scale·Σ b cᵀ equals −η/S · ∇ (naive), the loss is the naive loss, and the
 * naive gradient matches central differences of the objective. */
static int test_factors_vs_naive_and_fd(void)
{
    const uint32_t d = 7, k = 3, s = 12;
    const float eta = 0.2f;
    const double lambda = 0.7;
    struct sfb_dataset ds;
    make_data(&ds, 40, d, 3);
    struct sfb_model *m;
    ASSERT_OK(open_dml(&m, d, k, lambda));
    struct sfb_matrix *L = sfb_model_matrix(m, 0);
    ASSERT_EQ(L->rows, k);
    ASSERT_EQ(L->cols, d);
    /* Mid-sized L so both active and inactive dissimilar pairs occur. */
    for (uint32_t q = 0; q < k * d; q++)
        L->data[q] = (float)(0.35 * (2 * urand() - 1));
    uint64_t idx[12], a[12], j[12];
    for (uint32_t i = 0; i < s; i++)
        idx[i] = a[i] = (uint64_t)(urand() * ds.n);
    struct sfb_sf sf = {0};
    double loss = 0.25;
    ASSERT_OK(sfb_model_factors(m, &ds, idx, s, eta, &sf, &loss));
    ASSERT_EQ(sf.rows, k);
    ASSERT_EQ(sf.cols, d);
    ASSERT_EQ(sf.s, s);
    ASSERT_EQ(sf.sparse_c, 0);
    ASSERT_NEAR(sf.scale, -eta / s, 1e-9);
    uint32_t nsim = 0;
    for (uint32_t i = 0; i < s; i++) {
        int64_t p = find_partner(&ds, a[i], sf.c + (size_t)i * d);
        ASSERT_GE(p, 0);
        j[i] = (uint64_t)p;
        nsim += ds.labels[a[i]] == ds.labels[j[i]];
    }
    ASSERT_GT(nsim, 0);
    ASSERT_LT(nsim, s);
    double l[3 * 7], grad[3 * 7];
    for (uint32_t q = 0; q < k * d; q++)
        l[q] = L->data[q];
    double obj = naive_obj(l, k, &ds, a, j, s, lambda, grad);
    ASSERT_NEAR(loss - 0.25, obj, 1e-4);
    for (uint32_t r = 0; r < k; r++)
        for (uint32_t c = 0; c < d; c++) {
            double delta = 0;
            for (uint32_t i = 0; i < s; i++)
                delta += (double)sf.scale * sf.b[(size_t)i * k + r] * sf.c[(size_t)i * d + c];
            ASSERT_NEAR(delta, -eta / s * grad[r * d + c], 1e-5);
            /* Central differences of the objective. */
            const double h = 1e-5;
            double save = l[r * d + c];
            l[r * d + c] = save + h;
            double fp = naive_obj(l, k, &ds, a, j, s, lambda, NULL);
            l[r * d + c] = save - h;
            double fm = naive_obj(l, k, &ds, a, j, s, lambda, NULL);
            l[r * d + c] = save;
            ASSERT_NEAR((fp - fm) / (2 * h), grad[r * d + c], 1e-4);
        }
    sfb_sf_free(&sf);
    sfb_model_close(&m);
    free_ds(&ds);
    return 0;
}

/* Pairs are deterministic for a seed, change from clock to clock, and are
 * similar about half of the time. */
static int test_pair_sampling(void)
{
    struct sfb_dataset ds;
    make_data(&ds, 200, 5, 10);
    struct sfb_model *m1, *m2;
    ASSERT_OK(open_dml(&m1, 5, 2, 1.0));
    ASSERT_OK(open_dml(&m2, 5, 2, 1.0));
    ASSERT(memcmp(sfb_model_matrix(m1, 0)->data, sfb_model_matrix(m2, 0)->data,
                  sizeof(float) * 10) == 0);
    uint64_t idx[50];
    for (int i = 0; i < 50; i++)
        idx[i] = (uint64_t)i * 3;
    struct sfb_sf a = {0}, b = {0}, c = {0};
    double loss = 0;
    ASSERT_OK(sfb_model_factors(m1, &ds, idx, 50, 0.1f, &a, &loss));
    ASSERT_OK(sfb_model_factors(m2, &ds, idx, 50, 0.1f, &b, &loss));
    ASSERT(memcmp(a.c, b.c, sizeof(float) * 50 * 5) == 0);
    ASSERT(memcmp(a.b, b.b, sizeof(float) * 50 * 2) == 0);
    ASSERT_OK(sfb_model_factors(m1, &ds, idx, 50, 0.1f, &c, &loss)); /* next clock */
    ASSERT(memcmp(a.c, c.c, sizeof(float) * 50 * 5) != 0);
    uint32_t sim = 0, total = 0;
    for (int t = 0; t < 20; t++) {
        ASSERT_OK(sfb_model_factors(m1, &ds, idx, 50, 0.1f, &c, &loss));
        for (uint32_t i = 0; i < 50; i++) {
            int64_t p = find_partner(&ds, idx[i], c.c + (size_t)i * 5);
            ASSERT_GE(p, 0);
            ASSERT_NE((uint64_t)p, idx[i]);
            sim += ds.labels[p] == ds.labels[idx[i]];
            total++;
        }
    }
    ASSERT_GT(sim, total * 0.4);
    ASSERT_LT(sim, total * 0.6);
    sfb_sf_free(&a);
    sfb_sf_free(&b);
    sfb_sf_free(&c);
    sfb_model_close(&m1);
    sfb_model_close(&m2);
    free_ds(&ds);
    return 0;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    fclose(f);
    return 0;
}

static int test_pair_files(void)
{
    char dir[] = "/tmp/sfb_dml_XXXXXX", sp[64], dp[64], bad[64];
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(sp, sizeof sp, "%s/simi", dir);
    snprintf(dp, sizeof dp, "%s/diff", dir);
    snprintf(bad, sizeof bad, "%s/bad", dir);
    ASSERT_EQ(write_file(sp, "# similar pairs\n0 1\n\n2 3\r\n"), 0);
    ASSERT_EQ(write_file(dp, "0 2\n1 3\n"), 0);
    uint64_t *pairs, n;
    uint32_t *lines;
    ASSERT_OK(sfb__dml_read_pairs(sp, &pairs, &lines, &n));
    ASSERT_EQ(n, 2);
    ASSERT_EQ(pairs[0], 0);
    ASSERT_EQ(pairs[1], 1);
    ASSERT_EQ(pairs[2], 2);
    ASSERT_EQ(pairs[3], 3);
    ASSERT_EQ(lines[1], 4);
    free(pairs);
    free(lines);
    const char *bads[] = {"0 1\n2 x\n", "0 1\n3\n", "1 2 3\n", "-1 2\n",
                          "99999999999999999999 1\n", "1x 2\n"};
    const char *where[] = {":2:", ":2:", ":1:", ":1:", ":1:", ":1:"};
    const char *why[] = {"expected a second sample index", "expected a second sample index",
                         "more than two fields", "expected a sample index (unsigned integer)",
                         "sample index too large", "unexpected character after a sample index"};
    for (int i = 0; i < 6; i++) {
        ASSERT_EQ(write_file(bad, bads[i]), 0);
        ASSERT_EQ(sfb__dml_read_pairs(bad, &pairs, &lines, &n), -SFB_EFORMAT);
        ASSERT_STR_CONTAINS(sfb_last_error(), bad);
        ASSERT_STR_CONTAINS(sfb_last_error(), where[i]);
        ASSERT_STR_CONTAINS(sfb_last_error(), why[i]);
        ASSERT(pairs == NULL);
    }
    ASSERT_EQ(write_file(bad, "# nothing\n"), 0);
    ASSERT_EQ(sfb__dml_read_pairs(bad, &pairs, &lines, &n), -SFB_EFORMAT);

    /* Training with pair files uses exactly those pairs, typed by file. */
    struct sfb_dataset ds;
    make_data(&ds, 4, 3, 1); /* one class: labels cannot make the types */
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    s.kind = "dml";
    s.d = 3;
    s.proj_dim = 2;
    s.lambda = 1.0;
    s.simi_pairs = sp;
    s.diff_pairs = dp;
    struct sfb_model *m;
    ASSERT_OK(sfb_model_open(&m, &s));
    ASSERT(sfb_model_get_settings(m)->simi_pairs == NULL);
    struct sfb_matrix *L = sfb_model_matrix(m, 0);
    for (int q = 0; q < 6; q++)
        L->data[q] = 0.1f * (float)(q + 1); /* all ‖Lδ‖² < 1 */
    uint64_t idx[64];
    for (int i = 0; i < 64; i++)
        idx[i] = (uint64_t)i % 4;
    struct sfb_sf sf = {0};
    double loss = 0;
    const uint64_t pa[4][2] = {{0, 1}, {2, 3}, {0, 2}, {1, 3}};
    int seen[4] = {0};
    for (int t = 0; t < 64; t++) {
        /* The draw depends on (seed, clock, index): one entry per clock. */
        ASSERT_OK(sfb_model_factors(m, &ds, idx + t, 1, 0.1f, &sf, &loss));
        const int i = 0;
        int hit = -1;
        for (int p = 0; p < 4 && hit < 0; p++) {
            int ok = 1;
            for (int c = 0; c < 3; c++)
                ok &= sf.c[i * 3 + c] == ds.x[pa[p][0] * 3 + c] - ds.x[pa[p][1] * 3 + c];
            if (ok) hit = p;
        }
        ASSERT_GE(hit, 0);
        seen[hit]++;
        /* Similar: b = 2Lδ; dissimilar (active): b = −2λLδ: opposite signs. */
        double z0 = 0;
        for (int c = 0; c < 3; c++)
            z0 += L->data[c] * sf.c[i * 3 + c];
        ASSERT_NEAR(sf.b[i * 2], (hit < 2 ? 2.0 : -2.0) * z0, 1e-5);
    }
    for (int p = 0; p < 4; p++)
        ASSERT_GT(seen[p], 4);
    sfb_model_close(&m);
    /* An index beyond the training set is reported with file and line. */
    ASSERT_EQ(write_file(bad, "0 1\n# x\n1 7\n"), 0);
    s.simi_pairs = bad;
    s.diff_pairs = NULL;
    ASSERT_OK(sfb_model_open(&m, &s));
    int r = 0;
    for (int t = 0; t < 8 && r == 0; t++)
        r = sfb_model_factors(m, &ds, idx, 16, 0.1f, &sf, &loss);
    ASSERT_EQ(r, -EINVAL);
    ASSERT_STR_CONTAINS(sfb_last_error(), ":3:");
    sfb_model_close(&m);
    s.simi_pairs = "/nonexistent/pairs";
    ASSERT_EQ(sfb_model_open(&m, &s), -ENOENT);
    ASSERT(m == NULL);
    sfb_sf_free(&sf);
    free_ds(&ds);
    unlink(sp);
    unlink(dp);
    unlink(bad);
    rmdir(dir);
    return 0;
}

/* With L = I (rank = d) the learned-metric k-NN equals the Euclidean one;
 * fields of other models are NaN; tiny sets work. */
static int test_evaluate_identity(void)
{
    const uint32_t d = 6;
    struct sfb_dataset ds;
    make_data(&ds, 300, d, 3);
    struct sfb_model *m;
    ASSERT_OK(open_dml(&m, d, d, 1.0));
    struct sfb_matrix *L = sfb_model_matrix(m, 0);
    for (uint32_t q = 0; q < d * d; q++)
        L->data[q] = q % (d + 1) == 0 ? 1.0f : 0.0f;
    struct sfb_eval e = {.size = sizeof e};
    ASSERT_OK(sfb_model_evaluate(m, &ds, &e));
    ASSERT_EQ(e.n, 300);
    ASSERT(isfinite(e.loss) && e.loss > 0);
    ASSERT_GE(e.knn_accuracy, 0.0);
    ASSERT_LE(e.knn_accuracy, 1.0);
    ASSERT_EQ(e.knn_accuracy, e.knn_accuracy_euclid);
    ASSERT_EQ(e.accuracy, e.knn_accuracy);
    ASSERT(isnan(e.recon_error) && isnan(e.sparsity));
    /* One sample: no references, no k-NN; loss of the zero pair is 0. */
    struct sfb_dataset one = ds;
    one.n = 1;
    ASSERT_OK(sfb_model_evaluate(m, &one, &e));
    ASSERT_EQ(e.loss, 0.0);
    ASSERT(isnan(e.knn_accuracy));
    one.n = 0;
    ASSERT_OK(sfb_model_evaluate(m, &one, &e));
    ASSERT(isnan(e.loss));
    sfb_model_close(&m);
    free_ds(&ds);
    return 0;
}

/* k-NN votes, k = 2, on five points of a line where every point's two
 * nearest others carry different labels for a, b, c (a tie the nearest must
 * win) and agree for d, e:
 *
 *   a=0 A   b=1 A   c=2.9 B   d=3.8 B   e=5.5 B
 *
 * With 5 samples the evaluation has one query and four references; every
 * seed picks some query, and each is classified right only if ties go to
 * the nearest (ties to the lowest label get c wrong; to the farther, a, b
 * and c). */
static int test_knn_ties_to_nearest(void)
{
    const float pos[5] = {0.0f, 1.0f, 2.9f, 3.8f, 5.5f};
    const int32_t lab[5] = {0, 0, 1, 1, 1};
    struct sfb_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.n = 5;
    ds.d = 1;
    ds.k = 2;
    ds.x = (float *)pos;
    ds.labels = (int32_t *)lab;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        struct sfb_model_settings st;
        sfb_model_default_settings(&st);
        st.kind = "dml";
        st.d = 1;
        st.proj_dim = 1;
        st.lambda = 1.0;
        st.knn_k = 2;
        st.seed = seed;
        struct sfb_model *m;
        ASSERT_OK(sfb_model_open(&m, &st));
        sfb_model_matrix(m, 0)->data[0] = -3.0f; /* any L ≠ 0 keeps the order */
        struct sfb_eval e = {.size = sizeof e};
        ASSERT_OK(sfb_model_evaluate(m, &ds, &e));
        ASSERT_EQ(e.knn_accuracy, 1.0);
        ASSERT_EQ(e.knn_accuracy_euclid, 1.0);
        sfb_model_close(&m);
    }
    return 0;
}

/* Plain single-worker SGD (factors + reconstruct + apply_local) learns a
 * metric under which k-NN beats Euclidean k-NN by a clear margin. */
static int test_sgd_learns_metric(void)
{
    const uint32_t d = 20, batch = 32;
    struct sfb_dataset tr, te;
    make_informative(&tr, 2000, d, 1.0);
    make_informative(&te, 600, d, 1.0);
    struct sfb_model *m;
    ASSERT_OK(open_dml(&m, d, 8, 1.0));
    struct sfb_eval e0 = {.size = sizeof e0}, e1 = {.size = sizeof e1};
    ASSERT_OK(sfb_model_evaluate(m, &te, &e0));
    struct sfb_reconstruct *r;
    ASSERT_OK(sfb_reconstruct_open(&r));
    struct sfb_sf sf = {0};
    uint64_t idx[32];
    for (int t = 0; t < 400; t++) {
        for (uint32_t i = 0; i < batch; i++)
            idx[i] = sfb__splitmix64(&rs) % tr.n;
        double loss = 0;
        ASSERT_OK(sfb_model_factors(m, &tr, idx, batch, 0.02f, &sf, &loss));
        const struct sfb_sf *set[] = {&sf};
        ASSERT_OK(sfb_reconstruct_apply(r, sfb_model_matrix(m, 0), set, 1));
        sfb_model_apply_local(m, 0.02f);
    }
    ASSERT_OK(sfb_model_evaluate(m, &te, &e1));
    fprintf(stderr, "  dml: loss %.3f -> %.3f, knn %.3f -> %.3f (euclid %.3f)\n", e0.loss, e1.loss,
            e0.knn_accuracy, e1.knn_accuracy, e1.knn_accuracy_euclid);
    ASSERT_LT(e1.loss, e0.loss * 0.7);
    ASSERT_EQ(e0.knn_accuracy_euclid, e1.knn_accuracy_euclid);
    ASSERT_GT(e1.knn_accuracy, e1.knn_accuracy_euclid + 0.2);
    sfb_sf_free(&sf);
    sfb_reconstruct_close(&r);
    sfb_model_close(&m);
    free_ds(&tr);
    free_ds(&te);
    return 0;
}

static int test_settings_errors(void)
{
    struct sfb_model *m;
    ASSERT_EQ(open_dml(&m, 5, 2, 0.0), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "lambda");
    ASSERT_EQ(open_dml(&m, 5, 0, 1.0), -EINVAL);
    ASSERT_EQ(open_dml(&m, 0, 2, 1.0), -EINVAL);
    ASSERT(m == NULL);
    ASSERT(sfb_model_find("dml") != NULL);
    ASSERT_STR_CONTAINS(sfb_model_names(), "dml");
    ASSERT_OK(open_dml(&m, 5, 2, 1.0));
    struct sfb_dataset ds;
    make_data(&ds, 10, 4, 2);
    struct sfb_sf sf = {0};
    double loss = 0;
    uint64_t idx[] = {1};
    ASSERT_EQ(sfb_model_factors(m, &ds, idx, 1, 0.1f, &sf, &loss), -SFB_ESHAPE);
    free_ds(&ds);
    make_data(&ds, 10, 5, 2);
    idx[0] = 10;
    ASSERT_EQ(sfb_model_factors(m, &ds, idx, 1, 0.1f, &sf, &loss), -EINVAL);
    free(ds.labels);
    ds.labels = NULL;
    idx[0] = 1;
    ASSERT_EQ(sfb_model_factors(m, &ds, idx, 1, 0.1f, &sf, &loss), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "labels");
    free_ds(&ds);
    sfb_sf_free(&sf);
    sfb_model_close(&m);
    return 0;
}

static const struct test_case tests[] = {
    {"factors_vs_naive_and_fd", test_factors_vs_naive_and_fd},
    {"pair_sampling", test_pair_sampling},
    {"pair_files", test_pair_files},
    {"evaluate_identity", test_evaluate_identity},
    {"knn_ties_to_nearest", test_knn_ties_to_nearest},
    {"sgd_learns_metric", test_sgd_learns_metric},
    {"settings_errors", test_settings_errors},
};

TEST_MAIN(tests)
