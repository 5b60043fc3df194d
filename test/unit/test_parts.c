/* Updates in parts (sfb/parts.c): the parts partition the samples, the
 * order follows the policy's score, each gathered part holds exactly its
 * samples, and the parts applied one by one sum to the whole update
 * (integer factors: exact). And the managed sizing (sfb__parts_settings). */
#include "sfb/parts.h"
#include "src/base/util.h"
#include "src/wire/wire.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* s samples of rows × cols with small integer b and c (sample i's values
 * grow with (i·7) % s, so the scores are distinct and not in sample order);
 * sparse: c as CSR keeping every other column. */
static int make(struct sfb_sf *sf, uint32_t rows, uint32_t cols, uint32_t s, int sparse)
{
    memset(sf, 0, sizeof *sf);
    ASSERT_OK(sfb_sf_reserve(sf, rows, cols, s, sparse, sparse ? (uint64_t)s * cols : 0));
    sf->scale = -2.0f;
    uint32_t nz = 0;
    for (uint32_t i = 0; i < s; i++) {
        float g = (float)(1 + (i * 7) % s);
        for (uint32_t k = 0; k < rows; k++) sf->b[(size_t)i * rows + k] = g * (float)(1 + k % 3);
        for (uint32_t j = 0; j < cols; j++) {
            float v = (float)((i + j) % 5) - 2.0f;
            if (!sparse) {
                sf->c[(size_t)i * cols + j] = v;
            } else if (j % 2 == 0) {
                sf->c_col[nz] = j;
                sf->c_val[nz++] = v;
            }
        }
        if (sparse) sf->c_row_ptr[i + 1] = nz;
    }
    return 0;
}

static double score_of(const struct sfb_sf *sf, uint32_t i)
{
    double b = 0, c = 0;
    for (uint32_t k = 0; k < sf->rows; k++) b += pow(sf->b[(size_t)i * sf->rows + k], 2);
    if (sf->sparse_c)
        for (uint32_t q = sf->c_row_ptr[i]; q < sf->c_row_ptr[i + 1]; q++) c += pow(sf->c_val[q], 2);
    else
        for (uint32_t j = 0; j < sf->cols; j++) c += pow(sf->c[(size_t)i * sf->cols + j], 2);
    return fabs(sf->scale) * sqrt(b) * sqrt(c);
}

/* Plans, checks the partition and the order, gathers each part and
 * applies it; the sum equals the whole update applied at once. */
static int check_plan(int policy, int sparse, size_t target, uint32_t s, uint32_t want_n)
{
    const uint32_t rows = 6, cols = 9;
    struct sfb_sf sf;
    ASSERT_OK(make(&sf, rows, cols, s, sparse));
    float *wdata = calloc((size_t)rows * cols, sizeof *wdata);
    float *whole = calloc((size_t)rows * cols, sizeof *whole);
    ASSERT(wdata && whole);
    struct sfb_matrix w = {rows, cols, wdata}, ref = {rows, cols, whole};
    struct sfb__parts p;
    memset(&p, 0, sizeof p);
    ASSERT_OK(sfb__parts_plan(&p, policy, &sf, &w, target, SFB_WIRE_F32));
    ASSERT_EQ(p.n, want_n);
    ASSERT_EQ(p.first[0], 0);
    ASSERT_EQ(p.first[p.n], s);
    uint8_t *seen = calloc(s, 1);
    ASSERT(seen);
    for (uint32_t i = 0; i < s; i++) {
        ASSERT_LT(p.order[i], s);
        ASSERT_EQ(seen[p.order[i]], 0);
        seen[p.order[i]] = 1;
        if (policy == SFB__PRIORITY_FIFO) ASSERT_EQ(p.order[i], i);
        if (policy == SFB__PRIORITY_MAGNITUDE) {
            ASSERT_NEAR(p.score[p.order[i]], score_of(&sf, p.order[i]),
                        1e-5 * score_of(&sf, p.order[i]));
            if (i) ASSERT(p.score[p.order[i - 1]] >= p.score[p.order[i]]);
        }
    }
    struct sfb_reconstruct *r;
    ASSERT_OK(sfb_reconstruct_open(&r));
    float prev = INFINITY;
    for (uint32_t k = 0; k < p.n; k++) {
        ASSERT_GT(p.first[k + 1], p.first[k]); /* every part holds a sample */
        float prio;
        const struct sfb_sf *sub = sfb__parts_gather(&p, &sf, k, &prio);
        ASSERT(sub != NULL);
        ASSERT_EQ(sub->s, p.first[k + 1] - p.first[k]);
        ASSERT_EQ(sub->sparse_c, sparse);
        /* its samples, in order: b rows copied */
        for (uint32_t q = 0; q < sub->s; q++)
            ASSERT(!memcmp(sub->b + (size_t)q * rows, sf.b + (size_t)p.order[p.first[k] + q] * rows,
                           rows * sizeof(float)));
        if (policy == SFB__PRIORITY_MAGNITUDE) {
            ASSERT(prio <= prev); /* parts leave largest first */
            ASSERT(prio == p.score[p.order[p.first[k]]]);
            prev = prio;
        }
        ASSERT_OK(sfb_reconstruct_apply(r, &w, &sub, 1));
    }
    const struct sfb_sf *all = &sf;
    ASSERT_OK(sfb_reconstruct_apply(r, &ref, &all, 1));
    for (size_t q = 0; q < (size_t)rows * cols; q++) ASSERT(wdata[q] == whole[q]);
    sfb_reconstruct_close(&r);
    sfb__parts_free(&p);
    sfb_sf_free(&sf);
    free(seen);
    free(wdata);
    free(whole);
    return 0;
}

static int test_partitions(void)
{
    for (int policy = 0; policy < 3; policy++)
        for (int sparse = 0; sparse < 2; sparse++) {
            /* one sample: 6·4 + 9·4 (dense) bytes; 20 samples */
            ASSERT_OK(check_plan(policy, sparse, 0, 20, 1));       /* no target: whole */
            ASSERT_OK(check_plan(policy, sparse, 1 << 20, 20, 1)); /* all fits */
            ASSERT_OK(check_plan(policy, sparse, 1, 20, 20));      /* a sample each */
            ASSERT_OK(check_plan(policy, sparse, 1, 200, SFB_WIRE_MAX_PARTS)); /* capped */
        }
    /* dense samples of 60 bytes, 240 bytes a part: 20 samples in 5 */
    ASSERT_OK(check_plan(SFB__PRIORITY_MAGNITUDE, 0, 240, 20, 5));
    return 0;
}

/* relative: a sample whose b falls on a row the replica holds large counts
 * for less than under magnitude. */
static int test_relative(void)
{
    struct sfb_sf sf;
    memset(&sf, 0, sizeof sf);
    ASSERT_OK(sfb_sf_reserve(&sf, 2, 3, 2, 0, 0));
    sf.scale = 1;
    float b[4] = {10, 0, 0, 1}, c[6] = {1, 1, 1, 1, 1, 1}; /* x on row 0, y on row 1 */
    memcpy(sf.b, b, sizeof b);
    memcpy(sf.c, c, sizeof c);
    float a[6] = {1000, 0, 0, 1, 0, 0}; /* row 0 norm 1000, row 1 norm 1 */
    struct sfb_matrix w = {2, 3, a};
    struct sfb__parts p;
    memset(&p, 0, sizeof p);
    ASSERT_OK(sfb__parts_plan(&p, SFB__PRIORITY_MAGNITUDE, &sf, &w, 1, SFB_WIRE_F32));
    ASSERT_EQ(p.order[0], 0);
    ASSERT_OK(sfb__parts_plan(&p, SFB__PRIORITY_RELATIVE, &sf, &w, 1, SFB_WIRE_F32));
    ASSERT_EQ(p.order[0], 1);
    ASSERT_NEAR(p.score[0], 10.0 / 1000 * sqrt(3), 1e-5);
    ASSERT_NEAR(p.score[1], 1.0 / 1 * sqrt(3), 1e-5);
    /* a zero replica: rows floored alike, so relative orders as magnitude */
    memset(a, 0, sizeof a);
    ASSERT_OK(sfb__parts_plan(&p, SFB__PRIORITY_RELATIVE, &sf, &w, 1, SFB_WIRE_F32));
    ASSERT_EQ(p.order[0], 0);
    ASSERT(isfinite(p.score[0]) && isfinite(p.score[1]));
    sfb__parts_free(&p);
    sfb_sf_free(&sf);
    return 0;
}

static int test_settings(void)
{
    float d[4] = {0};
    struct sfb_matrix m = {2, 2, d};
    int pol;
    size_t part, cap;
    ASSERT_OK(sfb__parts_settings(NULL, 0, 4, 5, &m, 1, 8, &pol, &part, &cap));
    ASSERT(pol == SFB__PRIORITY_FIFO && part == 0 && cap == 0); /* as before: whole, uncapped */
    ASSERT_OK(sfb__parts_settings("magnitude", 0, 4, 5, &m, 1, 8, &pol, &part, &cap));
    ASSERT(pol == SFB__PRIORITY_MAGNITUDE && part == 16384 && cap == 0);
    ASSERT_OK(sfb__parts_settings("relative", 1e8, 4, 5, &m, 1, 8, &pol, &part, &cap));
    ASSERT(pol == SFB__PRIORITY_RELATIVE && part == 250000 && cap == 250000);
    ASSERT_OK(sfb__parts_settings("fifo", 1e5, 4, 5, &m, 1, 8, &pol, &part, &cap));
    ASSERT(part == 4096 && cap == 4096); /* floors */
    ASSERT_EQ(sfb__parts_settings("largest", 0, 4, 5, &m, 1, 8, &pol, &part, &cap), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "fifo|magnitude|relative");
    /* one frame: 64 + 8 + 8 + 8 · 2 · 4 = 144 bytes; 5 s peer timeout */
    ASSERT_EQ(sfb__parts_settings(NULL, 28, 4, 5, &m, 1, 8, &pol, &part, &cap), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "at least 144 bytes");
    ASSERT_OK(sfb__parts_settings(NULL, 29, 4, 5, &m, 1, 8, &pol, &part, &cap));
    ASSERT_OK(sfb__parts_settings(NULL, 28, 1, 5, &m, 1, 8, &pol, &part, &cap)); /* alone */
    return 0;
}

static const struct test_case tests[] = {
    {"partitions", test_partitions},
    {"relative", test_relative},
    {"settings", test_settings},
};
TEST_MAIN(tests)
