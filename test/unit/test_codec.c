/* SF payload codec: every encoding round-trips to the same update, CSR is
 * chosen when it saves a quarter of the bytes, and malformed payloads are
 * rejected. */
#include "sfb/codec.h"
#include <sfb/sf.h>
#include "src/base/bytes.h"
#include "src/base/util.h"
#include "test.h"

#include <stdlib.h>

enum { ROWS = 5, COLS = 9, S = 4 };

static void fill(struct sfb_sf *sf, double density)
{
    sfb_sf_reserve(sf, ROWS, COLS, S, 0, 0);
    sf->scale = -0.125f;
    unsigned x = 7;
    for (int i = 0; i < S * ROWS; i++) sf->b[i] = (float)((i * 37) % 11) - 5.0f;
    for (int i = 0; i < S * COLS; i++) {
        x = x * 1103515245u + 12345u;
        sf->c[i] = ((x >> 16) % 1000) < density * 1000 ? (float)(i % 7) + 0.5f : 0.0f;
    }
}

static void apply(const struct sfb_sf *sf, float *a)
{
    struct sfb_reconstruct *r;
    sfb_reconstruct_open(&r);
    struct sfb_matrix m = {ROWS, COLS, a};
    sfb_reconstruct_apply(r, &m, &sf, 1);
    sfb_reconstruct_close(&r);
}

static int roundtrip(double density, int expect_sparse)
{
    struct sfb_sf sf = {0}, view;
    fill(&sf, density);
    int sparse;
    uint64_t nnz;
    size_t size = sfb__sf_choose(&sf, &sparse, &nnz);
    ASSERT_EQ(sparse, expect_sparse);
    ASSERT_EQ(size, sfb__sf_payload_size(&sf, sparse, nnz));
    uint32_t *buf = calloc(1, size + 4);
    ASSERT_OK(sfb__sf_encode(&sf, sparse, nnz, (uint8_t *)buf, size));
    ASSERT_OK(sfb__sf_view((uint8_t *)buf, size, ROWS, COLS, S, sparse, &view));
    ASSERT_EQ(view.sparse_c, sparse);
    ASSERT_NEAR(view.scale, -0.125, 0);
    float a1[ROWS * COLS] = {0}, a2[ROWS * COLS] = {0};
    apply(&sf, a1);
    apply(&view, a2);
    for (int i = 0; i < ROWS * COLS; i++) ASSERT_NEAR(a1[i], a2[i], 1e-6);
    /* forced dense of the same batch is the same update too */
    size_t dsize = sfb__sf_payload_size(&sf, 0, 0);
    uint32_t *dbuf = calloc(1, dsize);
    ASSERT_OK(sfb__sf_encode(&sf, 0, 0, (uint8_t *)dbuf, dsize));
    ASSERT_OK(sfb__sf_view((uint8_t *)dbuf, dsize, ROWS, COLS, S, 0, &view));
    float a3[ROWS * COLS] = {0};
    apply(&view, a3);
    for (int i = 0; i < ROWS * COLS; i++) ASSERT_NEAR(a1[i], a3[i], 1e-6);
    free(buf);
    free(dbuf);
    sfb_sf_free(&sf);
    return 0;
}

static int test_dense(void)
{
    return roundtrip(0.9, 0);
}

static int test_sparse(void)
{
    return roundtrip(0.2, 1);
}

/* A dense c of 4 x 16 numbers, nnz of them non-zero: dense payload
 * 8 + 4*5*4 + 64*4 = 344 bytes, CSR 8 + 80 + 5*4 + 8*nnz = 108 + 8*nnz.
 * CSR is chosen under 3/4 of 344 (258): up to 18 non-zeros; at 19 and at
 * 24 (CSR 300 bytes, smaller but by less than a quarter) c goes dense. */
static int choose_with(uint32_t nnz_in, int want_sparse)
{
    struct sfb_sf sf = {0};
    ASSERT_OK(sfb_sf_reserve(&sf, 5, 16, 4, 0, 0));
    for (uint32_t i = 0; i < 64; i++) sf.c[i] = i < nnz_in ? 1.0f + (float)i : 0.0f;
    int sparse;
    uint64_t nnz;
    size_t size = sfb__sf_choose(&sf, &sparse, &nnz);
    ASSERT_EQ(sparse, want_sparse);
    ASSERT_EQ(size, sparse ? 108 + 8 * (size_t)nnz_in : 344);
    ASSERT_EQ(nnz, sparse ? nnz_in : 0);
    sfb_sf_free(&sf);
    return 0;
}

static int test_threshold(void)
{
    ASSERT_OK(choose_with(0, 1));
    ASSERT_OK(choose_with(18, 1));
    ASSERT_OK(choose_with(19, 0));
    ASSERT_OK(choose_with(24, 0));
    ASSERT_OK(choose_with(64, 0));
    return 0;
}

static int test_csr_input(void)
{
    /* a CSR batch encodes as CSR and views back to the same structure */
    struct sfb_sf sf = {0}, view;
    ASSERT_OK(sfb_sf_reserve(&sf, 2, 6, 2, 1, 3));
    sf.scale = 2.0f;
    float b[] = {1, 2, 3, 4};
    memcpy(sf.b, b, sizeof b);
    uint32_t rp[] = {0, 2, 3}, col[] = {1, 5, 0};
    float val[] = {0.5f, -1.0f, 3.0f};
    memcpy(sf.c_row_ptr, rp, sizeof rp);
    memcpy(sf.c_col, col, sizeof col);
    memcpy(sf.c_val, val, sizeof val);
    int sparse;
    uint64_t nnz;
    size_t size = sfb__sf_choose(&sf, &sparse, &nnz);
    ASSERT_EQ(sparse, 1);
    ASSERT_EQ(nnz, 3);
    ASSERT_EQ(size, 8 + 4 * 4 + 3 * 4 + 3 * 8);
    uint32_t buf[64];
    ASSERT_OK(sfb__sf_encode(&sf, sparse, nnz, (uint8_t *)buf, size));
    ASSERT_OK(sfb__sf_view((uint8_t *)buf, size, 2, 6, 2, 1, &view));
    ASSERT_EQ(view.c_row_ptr[1], 2);
    ASSERT_EQ(view.c_col[1], 5);
    ASSERT_NEAR(view.c_val[2], 3.0, 0);
    ASSERT_NEAR(view.b[3], 4.0, 0);
    /* CSR cannot be forced to dense */
    ASSERT(sfb__sf_encode(&sf, 0, 0, (uint8_t *)buf, sfb__sf_payload_size(&sf, 0, 0)) < 0);
    sfb_sf_free(&sf);
    return 0;
}

static int test_malformed(void)
{
    struct sfb_sf sf = {0}, view;
    fill(&sf, 0.2);
    int sparse;
    uint64_t nnz;
    size_t size = sfb__sf_choose(&sf, &sparse, &nnz);
    ASSERT_EQ(sparse, 1);
    uint32_t *buf = calloc(1, size + 8);
    uint8_t *p = (uint8_t *)buf;
    ASSERT_OK(sfb__sf_encode(&sf, 1, nnz, p, size));
    /* wrong length, both ways */
    ASSERT_EQ(sfb__sf_view(p, size - 4, ROWS, COLS, S, 1, &view), -SFB_EFORMAT);
    ASSERT_EQ(sfb__sf_view(p, size + 4, ROWS, COLS, S, 1, &view), -SFB_EFORMAT);
    /* shapes that disagree with the payload */
    ASSERT_EQ(sfb__sf_view(p, size, ROWS + 1, COLS, S, 1, &view), -SFB_EFORMAT);
    ASSERT_EQ(sfb__sf_view(p, size, ROWS, COLS, S, 0, &view), -SFB_EFORMAT);
    /* a NaN in b */
    size_t boff = SFB_SF_PREFIX;
    uint8_t save[4];
    memcpy(save, p + boff, 4);
    sfb__put_u32(p + boff, 0x7fc00000u);
    ASSERT_EQ(sfb__sf_view(p, size, ROWS, COLS, S, 1, &view), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "sf payload: b[0][0] is nan");
    memcpy(p + boff, save, 4);
    ASSERT_OK(sfb__sf_view(p, size, ROWS, COLS, S, 1, &view));
    /* a column index out of range, then out of order */
    size_t coloff = SFB_SF_PREFIX + S * ROWS * 4 + (S + 1) * 4;
    uint32_t c0 = sfb__get_u32(p + coloff);
    sfb__put_u32(p + coloff, COLS);
    ASSERT_EQ(sfb__sf_view(p, size, ROWS, COLS, S, 1, &view), -SFB_EFORMAT);
    sfb__put_u32(p + coloff, c0);
    /* row pointers that lie */
    size_t rpoff = SFB_SF_PREFIX + S * ROWS * 4;
    sfb__put_u32(p + rpoff + 4, 0xffffffffu);
    ASSERT_EQ(sfb__sf_view(p, size, ROWS, COLS, S, 1, &view), -SFB_EFORMAT);
    sfb__put_u32(p + rpoff + 4, sfb__get_u32(p + rpoff + 8) + 1);
    ASSERT_EQ(sfb__sf_view(p, size, ROWS, COLS, S, 1, &view), -SFB_EFORMAT);
    /* nnz larger than possible */
    sfb__put_u32(p + 4, S * COLS + 1);
    ASSERT_EQ(sfb__sf_view(p, size, ROWS, COLS, S, 1, &view), -SFB_EFORMAT);
    /* misaligned payload */
    ASSERT_EQ(sfb__sf_view(p + 1, size, ROWS, COLS, S, 1, &view), -EINVAL);
    free(buf);
    sfb_sf_free(&sf);
    return 0;
}

/* Every position of b and c (dense: whole 16-value blocks and the tail)
 * refuses NaN and both infinities, and takes the extreme finite values. */
static int test_nonfinite_everywhere(void)
{
    struct sfb_sf sf = {0}, view;
    fill(&sf, 1.0);
    size_t size = sfb__sf_payload_size(&sf, 0, 0);
    uint32_t *buf = calloc(1, size);
    uint8_t *p = (uint8_t *)buf;
    ASSERT_OK(sfb__sf_encode(&sf, 0, 0, p, size));
    const uint32_t bad[] = {0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u, 0x7f800001u};
    const uint32_t good[] = {0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000000u, 0x00800000u};
    size_t nvals = (size_t)S * (ROWS + COLS);
    for (size_t i = 0; i < nvals; i++) {
        uint8_t *at = p + SFB_SF_PREFIX + 4 * i;
        uint32_t save = sfb__get_u32(at);
        for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
            sfb__put_u32(at, bad[k]);
            ASSERT_EQ(sfb__sf_view(p, size, ROWS, COLS, S, 0, &view), -SFB_EFORMAT);
            /* the message says where: b[sample][row] or c[sample][column] */
            char want[64];
            int in_b = i < (size_t)S * ROWS;
            size_t j = in_b ? i : i - (size_t)S * ROWS, w = in_b ? ROWS : COLS;
            snprintf(want, sizeof want, "sf payload: %s[%zu][%zu] is %s", in_b ? "b" : "c", j / w,
                     j % w, (bad[k] & 0x7fffffu) ? "nan" : "inf");
            ASSERT_STR_CONTAINS(sfb_last_error(), want);
        }
        for (size_t k = 0; k < sizeof good / sizeof *good; k++) {
            sfb__put_u32(at, good[k]);
            ASSERT_OK(sfb__sf_view(p, size, ROWS, COLS, S, 0, &view));
        }
        sfb__put_u32(at, save);
    }
    ASSERT_OK(sfb__sf_view(p, size, ROWS, COLS, S, 0, &view));
    free(buf);
    sfb_sf_free(&sf);
    return 0;
}

static const struct test_case tests[] = {
    {"dense", test_dense},
    {"sparse", test_sparse},
    {"threshold", test_threshold},
    {"csr_input", test_csr_input},
    {"malformed", test_malformed},
    {"nonfinite_everywhere", test_nonfinite_everywhere},
};
TEST_MAIN(tests)
