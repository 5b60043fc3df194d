/* The dense path's element-wise loops (sfb/vec.h): every set this build
 * and this processor have (the baseline, AVX2) and the one the library
 * chose give the bytes a plain loop gives, on any length and alignment;
 * the check finds the first NaN or infinity wherever it is and nothing
 * in finite numbers, however large or small. */
#include "sfb/vec.h"
#include "src/base/rng.h"
#include "src/base/util.h"
#include "test.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MAXN = 5000 };

/* The sets to check: the chosen one (through the library's calls), the
 * baseline and AVX2's where there is one. */
static const struct sfb__vec_ops chosen = {sfb__first_nonfinite, sfb__vec_scale, sfb__vec_add,
                                           sfb__vec_add_diff};

static int sets(const struct sfb__vec_ops *out[3])
{
    int n = 0;
    out[n++] = &chosen;
    out[n++] = &sfb__vec_base;
    if (sfb__vec_avx2()) out[n++] = sfb__vec_avx2();
    return n;
}

static size_t first_bad_ref(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return i;
    return n;
}

static void fill(struct sfb__rng *r, float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) v[i] = (float)(sfb__rng_uniform(r) * 2 - 1);
}

/* Lengths 0 .. 300 and a few past the blocks, at every offset of a
 * float and at odd byte offsets (a received payload has no alignment). */
static const size_t lengths[] = {0, 1, 3, 15, 16, 17, 63, 64, 65, 1023, 1024, 1025, 4095, 4096,
                                 4097, MAXN};

static int test_first_nonfinite(void)
{
    const struct sfb__vec_ops *s[3];
    int nsets = sets(s);
    unsigned char *raw = malloc(4 * MAXN + 16);
    float *v = malloc(4 * MAXN);
    ASSERT(raw && v);
    struct sfb__rng r;
    sfb__rng_seed(&r, 7);
    const float bad[] = {NAN, -NAN, INFINITY, -INFINITY};
    const float edge[] = {FLT_MAX, -FLT_MAX, FLT_MIN, FLT_TRUE_MIN, -0.0f, 0.0f};
    for (size_t li = 0; li < SFB_ARRAY_LEN(lengths); li++) {
        size_t n = lengths[li];
        fill(&r, v, n);
        for (size_t i = 0; i < n; i += 1 + n / 37) v[i] = edge[i % SFB_ARRAY_LEN(edge)];
        for (size_t off = 0; off < 8; off++) { /* (bytes: 0, 4 aligned; the rest not) */
            memcpy(raw + off, v, 4 * n);
            for (int k = 0; k < nsets; k++) ASSERT_EQ(s[k]->first_nonfinite(raw + off, n), n);
            /* one bad number at a spread of places; then a second after it */
            for (size_t at = 0; at < n; at += 1 + n / 23 + (at & 3)) {
                float x = bad[at % 4], y = bad[(at + 1) % 4], keep;
                memcpy(&keep, raw + off + 4 * at, 4);
                memcpy(raw + off + 4 * at, &x, 4);
                for (int k = 0; k < nsets; k++) ASSERT_EQ(s[k]->first_nonfinite(raw + off, n), at);
                if (at + 1 < n) {
                    size_t at2 = at + 1 + (n - at - 1) / 2;
                    memcpy(raw + off + 4 * at2, &y, 4);
                    for (int k = 0; k < nsets; k++) {
                        ASSERT_EQ(s[k]->first_nonfinite(raw + off, n), at);
                        /* past the first: the second */
                        ASSERT_EQ(s[k]->first_nonfinite(raw + off + 4 * (at + 1), n - at - 1),
                                  at2 - at - 1);
                    }
                    memcpy(raw + off + 4 * at2, v + at2, 4);
                }
                memcpy(raw + off + 4 * at, &keep, 4);
            }
        }
        memcpy(raw, v, 4 * n);
        ASSERT_EQ(first_bad_ref((const float *)(const void *)raw, n), n);
    }
    free(raw);
    free(v);
    return 0;
}

/* scale, add and add_diff: the bytes of the plain loops, overflow to an
 * infinity included. */
static int test_arithmetic(void)
{
    const struct sfb__vec_ops *s[3];
    int nsets = sets(s);
    float *x = malloc(4 * MAXN), *mine = malloc(4 * MAXN), *a0 = malloc(4 * MAXN);
    float *want = malloc(4 * MAXN), *got = malloc(4 * MAXN);
    unsigned char *raw = malloc(4 * MAXN + 8);
    ASSERT(x && mine && a0 && want && got && raw);
    struct sfb__rng r;
    sfb__rng_seed(&r, 11);
    const float scales[] = {1.0f, -0.37f, 3e37f};
    for (size_t li = 0; li < SFB_ARRAY_LEN(lengths); li++) {
        size_t n = lengths[li];
        fill(&r, x, n);
        fill(&r, mine, n);
        fill(&r, a0, n);
        if (n > 2) x[n / 2] = 1e30f; /* (× 3e37: an infinity) */
        for (size_t si = 0; si < SFB_ARRAY_LEN(scales); si++) {
            float sc = scales[si];
            for (size_t i = 0; i < n; i++) want[i] = sc * x[i];
            for (int k = 0; k < nsets; k++) {
                memset(got, 0xff, 4 * n);
                s[k]->scale(got, sc, x, n);
                ASSERT(memcmp(got, want, 4 * n) == 0);
            }
        }
        for (size_t off = 0; off < 4; off++) {
            memcpy(raw + off, x, 4 * n);
            for (size_t i = 0; i < n; i++) want[i] = a0[i] + x[i];
            for (int k = 0; k < nsets; k++) {
                memcpy(got, a0, 4 * n);
                s[k]->add(got, raw + off, n);
                ASSERT(memcmp(got, want, 4 * n) == 0);
            }
            for (size_t i = 0; i < n; i++) want[i] = a0[i] + (x[i] - mine[i]);
            for (int k = 0; k < nsets; k++) {
                memcpy(got, a0, 4 * n);
                s[k]->add_diff(got, raw + off, mine, n);
                ASSERT(memcmp(got, want, 4 * n) == 0);
            }
        }
    }
    free(x);
    free(mine);
    free(a0);
    free(want);
    free(got);
    free(raw);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        {"first_nonfinite", test_first_nonfinite},
        {"arithmetic", test_arithmetic},
    };
    return test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
}
