/* synth: spec parsing, determinism (also a golden checksum for other
 * machines), sparse storage, and that the hidden model explains the labels. */
#include <sfb/data.h>
#include "src/base/util.h"
#include "src/data/synth.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

#define GOLDEN_DENSE 0x317a2f48bb4ca468ull
#define GOLDEN_SPARSE 0x27b992a9503cd6acull

static int parse_ok(void)
{
    struct sfb_synth_settings s;
    ASSERT_OK(sfb_synth_parse("synth", &s));
    ASSERT_EQ(s.k, 10);
    ASSERT_EQ(s.d, 100);
    ASSERT_EQ(s.n, 1000);
    ASSERT_NEAR(s.density, 1.0, 0);
    ASSERT_NEAR(s.noise, 0.1, 0);
    ASSERT_EQ(s.seed, 1);
    ASSERT_OK(sfb_synth_parse("synth:seed=18446744073709551615,noise=0,density=0.25,n=7,d=3,k=2,",
                              &s));
    ASSERT_EQ(s.k, 2);
    ASSERT_EQ(s.d, 3);
    ASSERT_EQ(s.n, 7);
    ASSERT_NEAR(s.density, 0.25, 0);
    ASSERT_NEAR(s.noise, 0.0, 0);
    ASSERT(s.seed == UINT64_MAX);
    ASSERT_OK(sfb_synth_parse("synth:k=3", &s));
    ASSERT_EQ(s.k, 3);
    ASSERT_EQ(s.d, 100); /* others keep their defaults */
    return 0;
}

static int parse_fail(const char *spec, const char *want)
{
    struct sfb_synth_settings s;
    ASSERT_EQ(sfb_synth_parse(spec, &s), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(sfb_last_error(), want);
    return 0;
}

static int parse_errors(void)
{
    if (parse_fail("synth:k=10,foo=3", "unknown key 'foo'")) return 1;
    if (parse_fail("synth:k=abc", "bad value 'abc' for key 'k'")) return 1;
    if (parse_fail("synth:k=1", "for key 'k'")) return 1;
    if (parse_fail("synth:d=0", "for key 'd'")) return 1;
    if (parse_fail("synth:n=-5", "for key 'n'")) return 1;
    if (parse_fail("synth:density=0", "for key 'density'")) return 1;
    if (parse_fail("synth:density=1.5", "for key 'density'")) return 1;
    if (parse_fail("synth:noise=nan", "for key 'noise'")) return 1;
    if (parse_fail("synth:seed=99999999999999999999", "for key 'seed'")) return 1;
    if (parse_fail("synth:k", "'k' is not key=value")) return 1;
    if (parse_fail("synthetic", "expected 'synth:")) return 1;
    return 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t checksum(const struct sfb_dataset *ds)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, ds->labels, ds->n * sizeof *ds->labels);
    if (ds->sparse) {
        uint64_t nnz = ds->row_ptr[ds->n];
        h = fnv(h, ds->row_ptr, (ds->n + 1) * sizeof *ds->row_ptr);
        h = fnv(h, ds->col, nnz * sizeof *ds->col);
        h = fnv(h, ds->val, nnz * sizeof *ds->val);
    } else {
        h = fnv(h, ds->x, ds->n * ds->d * sizeof *ds->x);
    }
    return h;
}

static int deterministic(void)
{
    struct sfb_synth_settings s;
    ASSERT_OK(sfb_synth_parse("synth:k=5,d=40,n=300,density=0.2,seed=11", &s));
    struct sfb_dataset a, b, c;
    ASSERT_OK(sfb_synth_generate(&s, &a));
    ASSERT_OK(sfb_synth_generate(&s, &b));
    ASSERT_EQ(checksum(&a), checksum(&b));
    s.seed = 12;
    ASSERT_OK(sfb_synth_generate(&s, &c));
    ASSERT_NE(checksum(&a), checksum(&c));
    sfb_dataset_free(&a);
    sfb_dataset_free(&b);
    sfb_dataset_free(&c);
    return 0;
}

/* Bitwise the same data on every machine: these checksums were recorded on
 * x86-64 and must hold elsewhere (the PRNG and samplers use only correctly
 * rounded arithmetic). */
static int golden(void)
{
    struct sfb_synth_settings s;
    struct sfb_dataset ds;
    ASSERT_OK(sfb_synth_parse("synth:k=4,d=16,n=50,seed=5", &s));
    ASSERT_OK(sfb_synth_generate(&s, &ds));
    uint64_t dense = checksum(&ds);
    sfb_dataset_free(&ds);
    ASSERT_OK(sfb_synth_parse("synth:k=4,d=64,n=50,density=0.1,seed=5", &s));
    ASSERT_OK(sfb_synth_generate(&s, &ds));
    uint64_t sparse = checksum(&ds);
    sfb_dataset_free(&ds);
    fprintf(stderr, "  checksums dense 0x%016" PRIx64 " sparse 0x%016" PRIx64 "\n", dense, sparse);
    ASSERT(dense == GOLDEN_DENSE);
    ASSERT(sparse == GOLDEN_SPARSE);
    return 0;
}

static int sparse_storage(void)
{
    struct sfb_synth_settings s;
    ASSERT_OK(sfb_synth_parse("synth:k=3,d=200,n=500,density=0.1,seed=3", &s));
    struct sfb_dataset ds;
    ASSERT_OK(sfb_synth_generate(&s, &ds));
    ASSERT_EQ(ds.sparse, 1);
    ASSERT(ds.x == NULL);
    ASSERT_EQ(ds.n, 500);
    ASSERT_EQ(ds.d, 200);
    ASSERT_EQ(ds.k, 3);
    uint64_t nnz = sfb_dataset_nnz(&ds);
    ASSERT_NEAR((double)nnz, 0.1 * 200 * 500, 0.05 * 0.1 * 200 * 500);
    ASSERT_EQ(ds.row_ptr[0], 0);
    for (uint64_t i = 0; i < ds.n; i++) {
        ASSERT_GT(ds.row_ptr[i + 1], ds.row_ptr[i]); /* never an empty row */
        for (uint64_t t = ds.row_ptr[i]; t < ds.row_ptr[i + 1]; t++) {
            ASSERT_LT(ds.col[t], ds.d);
            if (t > ds.row_ptr[i]) ASSERT_GT(ds.col[t], ds.col[t - 1]);
            ASSERT(isfinite(ds.val[t]) && ds.val[t] != 0.0f);
        }
        ASSERT(ds.labels[i] >= 0 && ds.labels[i] < 3);
    }
    /* Features are spread over all columns, not clustered at the start. */
    uint64_t high = 0;
    for (uint64_t t = 0; t < nnz; t++) high += ds.col[t] >= 100;
    ASSERT_NEAR((double)high / (double)nnz, 0.5, 0.05);
    sfb_dataset_free(&ds);

    /* Very low density still gives one feature per row. */
    ASSERT_OK(sfb_synth_parse("synth:k=2,d=1000,n=100,density=0.0001", &s));
    ASSERT_OK(sfb_synth_generate(&s, &ds));
    for (uint64_t i = 0; i < ds.n; i++) ASSERT_GE(ds.row_ptr[i + 1] - ds.row_ptr[i], 1);
    sfb_dataset_free(&ds);
    return 0;
}

/* Fraction of samples whose label is argmax of W·x (no noise). */
static double hidden_accuracy(const struct sfb_synth_settings *s, const struct sfb_dataset *ds)
{
    float *w = malloc((size_t)s->k * s->d * sizeof *w);
    if (!w) return -1;
    sfb__synth_model(s, w);
    uint64_t right = 0;
    for (uint64_t i = 0; i < ds->n; i++) {
        int32_t best = 0;
        double best_z = -INFINITY;
        for (uint32_t c = 0; c < s->k; c++) {
            const float *wc = w + (size_t)c * s->d;
            double z = 0;
            if (ds->sparse) {
                for (uint64_t t = ds->row_ptr[i]; t < ds->row_ptr[i + 1]; t++)
                    z += (double)wc[ds->col[t]] * (double)ds->val[t];
            } else {
                for (uint32_t j = 0; j < s->d; j++)
                    z += (double)wc[j] * (double)ds->x[i * s->d + j];
            }
            if (z > best_z) best_z = z, best = (int32_t)c;
        }
        right += best == ds->labels[i];
    }
    free(w);
    return (double)right / (double)ds->n;
}

static int hidden_model(void)
{
    static const char *specs[] = {
        "synth:k=10,d=100,n=3000,noise=0.1,seed=1",
        "synth:k=10,d=500,n=3000,density=0.05,noise=0.1,seed=2",
        "synth:k=2,d=20,n=3000,noise=0.1,seed=3",
    };
    for (size_t i = 0; i < SFB_ARRAY_LEN(specs); i++) {
        struct sfb_synth_settings s;
        struct sfb_dataset ds;
        ASSERT_OK(sfb_synth_parse(specs[i], &s));
        ASSERT_OK(sfb_synth_generate(&s, &ds));
        double acc = hidden_accuracy(&s, &ds);
        fprintf(stderr, "  %s: hidden model accuracy %.4f\n", specs[i], acc);
        ASSERT(acc >= 0.90);
        /* Every class occurs, roughly balanced. */
        uint64_t count[10] = {0};
        for (uint64_t j = 0; j < ds.n; j++) count[ds.labels[j]]++;
        for (uint32_t c = 0; c < s.k; c++) ASSERT_GT(count[c], ds.n / s.k / 3);
        sfb_dataset_free(&ds);
    }
    /* Without noise the labels are exactly argmax W·x. */
    struct sfb_synth_settings s;
    struct sfb_dataset ds;
    ASSERT_OK(sfb_synth_parse("synth:k=7,d=30,n=1000,noise=0,density=0.3,seed=4", &s));
    ASSERT_OK(sfb_synth_generate(&s, &ds));
    ASSERT(hidden_accuracy(&s, &ds) == 1.0);
    sfb_dataset_free(&ds);
    /* Heavy noise lowers it, so the noise really enters the labels. */
    ASSERT_OK(sfb_synth_parse("synth:k=10,d=100,n=2000,noise=3", &s));
    ASSERT_OK(sfb_synth_generate(&s, &ds));
    double acc = hidden_accuracy(&s, &ds);
    ASSERT(acc < 0.6 && acc > 0.15);
    sfb_dataset_free(&ds);
    return 0;
}

static int sample_seed(void)
{
    struct sfb_synth_settings s;
    ASSERT_OK(sfb_synth_parse("synth:k=4,d=10,n=200,seed=9", &s));
    struct sfb_dataset a, b;
    ASSERT_OK(sfb_synth_generate(&s, &a));
    ASSERT_OK(sfb__synth_generate(&s, s.seed + 1, NULL, &b));
    ASSERT(memcmp(a.x, b.x, 10 * sizeof(float)) != 0);
    ASSERT(hidden_accuracy(&s, &b) >= 0.9); /* same hidden model */
    sfb_dataset_free(&a);
    sfb_dataset_free(&b);
    return 0;
}

static int invalid_settings(void)
{
    struct sfb_synth_settings s;
    sfb_synth_default_settings(&s);
    s.density = 0;
    struct sfb_dataset ds;
    ASSERT_EQ(sfb_synth_generate(&s, &ds), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "density");
    sfb_synth_default_settings(&s);
    s.k = 100000;
    s.d = 100000;
    s.n = UINT64_MAX / 2;
    ASSERT_EQ(sfb_synth_generate(&s, &ds), -ENOMEM);
    return 0;
}

static const struct test_case tests[] = {
    {"parse_ok", parse_ok},
    {"parse_errors", parse_errors},
    {"deterministic", deterministic},
    {"golden", golden},
    {"sparse_storage", sparse_storage},
    {"hidden_model", hidden_model},
    {"sample_seed", sample_seed},
    {"invalid_settings", invalid_settings},
};

TEST_MAIN(tests)
