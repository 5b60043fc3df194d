/* SF payload codec: every encoding round-trips to the same update, CSR is
 * chosen when it saves a quarter of the bytes, and malformed payloads are
 * rejected; bfloat16 payloads round to nearest even, widen back exactly,
 * and are checked as strictly. */
#include "sfb/codec.h"
#include <sfb/sf.h>
#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/wire/wire.h"
#include "test.h"

#include <float.h>
#include <math.h>
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
    size_t size = sfb__sf_choose(&sf, SFB_WIRE_F32, &sparse, &nnz);
    ASSERT_EQ(sparse, expect_sparse);
    ASSERT_EQ(size, sfb__sf_payload_size(&sf, sparse, nnz, SFB_WIRE_F32));
    uint32_t *buf = calloc(1, size + 4);
    ASSERT_OK(sfb__sf_encode(&sf, sparse, nnz, SFB_WIRE_F32, (uint8_t *)buf, size));
    ASSERT_OK(sfb__sf_view((uint8_t *)buf, size, ROWS, COLS, S, sparse, &view));
    ASSERT_EQ(view.sparse_c, sparse);
    ASSERT_NEAR(view.scale, -0.125, 0);
    float a1[ROWS * COLS] = {0}, a2[ROWS * COLS] = {0};
    apply(&sf, a1);
    apply(&view, a2);
    for (int i = 0; i < ROWS * COLS; i++) ASSERT_NEAR(a1[i], a2[i], 1e-6);
    /* forced dense of the same batch is the same update too */
    size_t dsize = sfb__sf_payload_size(&sf, 0, 0, SFB_WIRE_F32);
    uint32_t *dbuf = calloc(1, dsize);
    ASSERT_OK(sfb__sf_encode(&sf, 0, 0, SFB_WIRE_F32, (uint8_t *)dbuf, dsize));
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
    size_t size = sfb__sf_choose(&sf, SFB_WIRE_F32, &sparse, &nnz);
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
    size_t size = sfb__sf_choose(&sf, SFB_WIRE_F32, &sparse, &nnz);
    ASSERT_EQ(sparse, 1);
    ASSERT_EQ(nnz, 3);
    ASSERT_EQ(size, 8 + 4 * 4 + 3 * 4 + 3 * 8);
    uint32_t buf[64];
    ASSERT_OK(sfb__sf_encode(&sf, sparse, nnz, SFB_WIRE_F32, (uint8_t *)buf, size));
    ASSERT_OK(sfb__sf_view((uint8_t *)buf, size, 2, 6, 2, 1, &view));
    ASSERT_EQ(view.c_row_ptr[1], 2);
    ASSERT_EQ(view.c_col[1], 5);
    ASSERT_NEAR(view.c_val[2], 3.0, 0);
    ASSERT_NEAR(view.b[3], 4.0, 0);
    /* CSR cannot be forced to dense */
    ASSERT(sfb__sf_encode(&sf, 0, 0, SFB_WIRE_F32, (uint8_t *)buf,
                          sfb__sf_payload_size(&sf, 0, 0, SFB_WIRE_F32)) < 0);
    sfb_sf_free(&sf);
    return 0;
}

static int test_malformed(void)
{
    struct sfb_sf sf = {0}, view;
    fill(&sf, 0.2);
    int sparse;
    uint64_t nnz;
    size_t size = sfb__sf_choose(&sf, SFB_WIRE_F32, &sparse, &nnz);
    ASSERT_EQ(sparse, 1);
    uint32_t *buf = calloc(1, size + 8);
    uint8_t *p = (uint8_t *)buf;
    ASSERT_OK(sfb__sf_encode(&sf, 1, nnz, SFB_WIRE_F32, p, size));
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
    size_t size = sfb__sf_payload_size(&sf, 0, 0, SFB_WIRE_F32);
    uint32_t *buf = calloc(1, size);
    uint8_t *p = (uint8_t *)buf;
    ASSERT_OK(sfb__sf_encode(&sf, 0, 0, SFB_WIRE_F32, p, size));
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


/* ---- bfloat16 ---- */

/* The reference rounding, computed apart from the codec's bit trick: the
 * two bfloat16 neighbours of x (as doubles), the nearer, ties to the even
 * one; a finite x past the largest bfloat16 saturates, NaN is a NaN. */
static uint16_t ref_bf16(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    if (isnan(x)) return 0x7fc0;
    if (isinf(x)) return (uint16_t)(u >> 16);
    uint32_t lo = u & 0xffff0000u; /* toward zero */
    uint32_t hi = lo + 0x10000u;   /* away from zero (may be the infinity) */
    float flo, fhi;
    memcpy(&flo, &lo, 4);
    memcpy(&fhi, &hi, 4);
    /* past the largest bfloat16 (0x7f7f) the next step is 2^128, and the
     * half-way point to it 0x7f7f8000 = (2 - 2^-8) · 2^127 */
    double dhi = isinf(fhi) ? ldexp(2.0, 127) - fabs((double)x) : fabs((double)fhi - x);
    double dlo = fabs((double)x - flo);
    uint32_t pick = dlo < dhi ? lo : dlo > dhi ? hi : (lo >> 16) & 1 ? hi : lo;
    if (((pick >> 16) & 0x7f80u) == 0x7f80u) pick = (u & 0x80000000u) | 0x7f7f0000u;
    return (uint16_t)(pick >> 16);
}

static uint16_t bf16_of_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return sfb__bf16_from_f32(x);
}

static int test_bf16_round(void)
{
    /* exact values stay */
    ASSERT_EQ(bf16_of_bits(0x3f800000u), 0x3f80); /* 1 */
    ASSERT_EQ(bf16_of_bits(0xc0400000u), 0xc040); /* -3 */
    ASSERT_EQ(bf16_of_bits(0x00000000u), 0x0000);
    ASSERT_EQ(bf16_of_bits(0x80000000u), 0x8000);
    /* ties go to the even neighbour, either way */
    ASSERT_EQ(bf16_of_bits(0x3f808000u), 0x3f80); /* 1 + 2^-8: down to 1 */
    ASSERT_EQ(bf16_of_bits(0x3f818000u), 0x3f82); /* 1 + 3·2^-8: up */
    ASSERT_EQ(bf16_of_bits(0xbf818000u), 0xbf82);
    ASSERT_EQ(bf16_of_bits(0x00008000u), 0x0000); /* subnormal ties */
    ASSERT_EQ(bf16_of_bits(0x00018000u), 0x0002);
    /* off the tie: the nearer */
    ASSERT_EQ(bf16_of_bits(0x3f807fffu), 0x3f80);
    ASSERT_EQ(bf16_of_bits(0x3f808001u), 0x3f81);
    ASSERT_EQ(bf16_of_bits(0x3f80ffffu), 0x3f81);
    ASSERT_EQ(bf16_of_bits(0x3fffffffu), 0x4000); /* carries into the exponent */
    /* NaN stays NaN (even one whose payload is in the dropped bits) */
    const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0xff800001u, 0x7fffffffu};
    for (size_t i = 0; i < SFB_ARRAY_LEN(nans); i++) {
        uint16_t h = bf16_of_bits(nans[i]);
        ASSERT((h & 0x7f80) == 0x7f80 && (h & 0x7f));
        ASSERT(isnan(sfb__bf16_to_f32(h)));
        ASSERT_EQ(h >> 15, nans[i] >> 31);
    }
    /* infinities stay; finite numbers past the largest bfloat16 saturate */
    ASSERT_EQ(bf16_of_bits(0x7f800000u), 0x7f80);
    ASSERT_EQ(bf16_of_bits(0xff800000u), 0xff80);
    ASSERT_EQ(bf16_of_bits(0x7f7fffffu), 0x7f7f); /* FLT_MAX */
    ASSERT_EQ(bf16_of_bits(0xff7fffffu), 0xff7f);
    ASSERT_EQ(bf16_of_bits(0x7f7f8000u), 0x7f7f);
    ASSERT_EQ(bf16_of_bits(0x7f7f7fffu), 0x7f7f);
    ASSERT_EQ(bf16_of_bits(0x7f7e8000u), 0x7f7e); /* a tie below it, to even */
    /* widening is exact */
    ASSERT(sfb__bf16_to_f32(0x3f82) == 1.015625f);
    ASSERT(sfb__bf16_to_f32(0xc040) == -3.0f);
    /* every upper half with lower halves around the tie and at random,
     * against the reference (whose NaN is one quiet NaN: compared as NaN) */
    uint32_t x = 12345;
    for (uint32_t hi = 0; hi < 0x10000u; hi++) {
        uint32_t lows[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0};
        x = x * 1103515245u + 12345u;
        lows[6] = (x >> 8) & 0xffff;
        for (size_t k = 0; k < SFB_ARRAY_LEN(lows); k++) {
            uint32_t u = hi << 16 | lows[k];
            uint16_t got = bf16_of_bits(u), want = ref_bf16(u);
            if (isnan(sfb__bf16_to_f32(want))) {
                ASSERT(isnan(sfb__bf16_to_f32(got)));
                continue;
            }
            if (got != want) {
                fprintf(stderr, "  %08x: got %04x, want %04x\n", u, got, want);
                ASSERT_EQ(got, want);
            }
        }
    }
    return 0;
}

/* n rounded up to whole 4-byte words (a bf16 payload's zero padding). */
static size_t words(size_t n)
{
    return (n + 3) & ~(size_t)3;
}

/* sf's factors rounded to bfloat16 (in place): what a bf16 payload carries. */
static void round_sf(struct sfb_sf *sf)
{
    size_t nb = (size_t)sf->s * sf->rows;
    for (size_t i = 0; i < nb; i++) sf->b[i] = sfb__bf16_to_f32(sfb__bf16_from_f32(sf->b[i]));
    size_t nc = sf->sparse_c ? sf->c_row_ptr[sf->s] : (size_t)sf->s * sf->cols;
    float *c = sf->sparse_c ? sf->c_val : sf->c;
    for (size_t i = 0; i < nc; i++) c[i] = sfb__bf16_to_f32(sfb__bf16_from_f32(c[i]));
}

/* A bf16 payload p[0 .. size) widened and viewed (the caller frees *wide). */
static int widen_view(const uint8_t *p, size_t size, uint32_t rows, uint32_t cols, uint32_t s,
                      int sparse, uint8_t **wide, struct sfb_sf *view)
{
    size_t wlen;
    ASSERT_OK(sfb__sf_expand_size(p, size, rows, cols, s, sparse, &wlen));
    struct sfb_sf shape = {.rows = rows, .cols = cols, .s = s};
    ASSERT_EQ(wlen, sfb__sf_payload_size(&shape, sparse, sfb__get_u32(p + 4), SFB_WIRE_F32));
    *wide = malloc(wlen);
    ASSERT(*wide);
    ASSERT_EQ(sfb__sf_expand(p, size, rows, cols, s, sparse, *wide, wlen - 4), -EINVAL);
    ASSERT_OK(sfb__sf_expand(p, size, rows, cols, s, sparse, *wide, wlen));
    return sfb__sf_view(*wide, wlen, rows, cols, s, sparse, view);
}

/* The wire decoder takes a bf16 SF frame of this payload length (its
 * length rule and the codec's agree). */
static int wire_takes(const uint8_t *payload, size_t size, uint32_t rows, uint32_t cols,
                      uint32_t s, int sparse)
{
    struct sfb__wire_shape shape = {rows, cols};
    struct sfb__wire_job job = {.job_key = 7, .world_size = 2, .shapes = &shape, .nshapes = 1,
                                .max_s = s, .max_payload = 1 << 20};
    struct sfb__wire_hdr h = {.type = SFB_WIRE_SF,
                              .flags = (uint8_t)((sparse ? SFB_WIRE_F_SPARSE : 0) |
                                                 SFB_WIRE_BF16 << SFB_WIRE_F_PREC_SHIFT),
                              .job_key = 7, .origin = 1, .sender = 1, .k = rows, .d = cols,
                              .s = s, .payload_len = size};
    uint8_t *frame = malloc(SFB_WIRE_HDR_SIZE + size);
    ASSERT(frame);
    memcpy(frame + SFB_WIRE_HDR_SIZE, payload, size);
    struct sfb__wire_piece piece = {payload, size};
    ASSERT_OK(sfb__wire_encode(&h, &piece, 1, frame));
    struct sfb__wire_hdr got;
    const uint8_t *pl;
    ASSERT_OK(sfb__wire_decode(&job, frame, SFB_WIRE_HDR_SIZE + size, 1, &got, &pl));
    ASSERT_EQ(sfb__wire_elem_size(got.flags), 2);
    free(frame);
    return 0;
}

/* Encoded as bf16 (dense and CSR, chosen and forced), widened and viewed:
 * exactly the rounded factors, whose update the view applies; values that
 * bfloat16 holds come back bit for bit. `exact`: fill's values (small
 * integers and halves, all bfloat16); else b and c get thirds added. */
static int bf16_roundtrip(double density, int expect_sparse, int exact)
{
    struct sfb_sf sf = {0}, rounded = {0}, view;
    fill(&sf, density);
    if (!exact) {
        for (int i = 0; i < S * ROWS; i++) sf.b[i] += 1.0f / 3.0f;
        for (int i = 0; i < S * COLS; i++)
            if (sf.c[i] != 0.0f) sf.c[i] = sf.c[i] / 3.0f + 1e-3f * (float)i;
    }
    fill(&rounded, density);
    memcpy(rounded.b, sf.b, sizeof(float) * S * ROWS);
    memcpy(rounded.c, sf.c, sizeof(float) * S * COLS);
    round_sf(&rounded);
    int differs = 0;
    for (int i = 0; i < S * ROWS; i++) differs |= rounded.b[i] != sf.b[i];
    ASSERT_EQ(differs, !exact);
    for (int forced = 0; forced < 2; forced++) {
        int sparse;
        uint64_t nnz;
        size_t size = sfb__sf_choose(&sf, SFB_WIRE_BF16, &sparse, &nnz);
        if (forced) { /* the other encoding of the same batch */
            sparse = !sparse;
            nnz = 0;
            if (sparse)
                for (int i = 0; i < S * COLS; i++) nnz += sf.c[i] != 0.0f;
            size = sfb__sf_payload_size(&sf, sparse, nnz, SFB_WIRE_BF16);
        } else {
            ASSERT_EQ(sparse, expect_sparse);
        }
        /* b and c in 2 bytes a value, CSR indices in 4, padded to 4-byte words */
        ASSERT_EQ(size, words(sparse ? 8 + (size_t)S * ROWS * 2 + (S + 1) * 4 + nnz * 6
                                     : 8 + (size_t)S * (ROWS + COLS) * 2));
        ASSERT_EQ(size, sfb__sf_payload_size(&sf, sparse, nnz, SFB_WIRE_BF16));
        /* an odd address: a bf16 payload assumes no alignment */
        uint8_t *mem = calloc(1, size + 1), *p = mem + 1;
        ASSERT_OK(sfb__sf_encode(&sf, sparse, nnz, SFB_WIRE_BF16, p, size));
        ASSERT_EQ(sfb__get_u16(p + SFB_SF_PREFIX), sfb__bf16_from_f32(sf.b[0]));
        ASSERT_OK(wire_takes(p, size, ROWS, COLS, S, sparse));
        uint8_t *wide;
        ASSERT_OK(widen_view(p, size, ROWS, COLS, S, sparse, &wide, &view));
        ASSERT_EQ(view.sparse_c, sparse);
        ASSERT(view.scale == sf.scale); /* the scale stays float32 */
        for (int i = 0; i < S * ROWS; i++) ASSERT(view.b[i] == rounded.b[i]);
        if (!sparse)
            for (int i = 0; i < S * COLS; i++) ASSERT(view.c[i] == rounded.c[i]);
        else
            for (uint32_t i = 0; i < S; i++)
                for (uint32_t q = view.c_row_ptr[i]; q < view.c_row_ptr[i + 1]; q++)
                    ASSERT(view.c_val[q] == rounded.c[i * COLS + view.c_col[q]]);
        /* the update it applies is scale·BᵀC of the rounded factors */
        float a1[ROWS * COLS] = {0}, a2[ROWS * COLS] = {0};
        apply(&rounded, a1);
        apply(&view, a2);
        for (int i = 0; i < ROWS * COLS; i++) ASSERT_NEAR(a1[i], a2[i], 1e-6 * (1 + fabs(a1[i])));
        if (exact) { /* nothing rounded: the same update as float32's */
            float a3[ROWS * COLS] = {0};
            apply(&sf, a3);
            for (int i = 0; i < ROWS * COLS; i++) ASSERT(a3[i] == a2[i]);
        }
        /* re-encoding the widened view gives the same bytes */
        uint8_t *again = malloc(size);
        ASSERT_OK(sfb__sf_encode(&view, sparse, nnz, SFB_WIRE_BF16, again, size));
        ASSERT(memcmp(again, p, size) == 0);
        free(again);
        free(wide);
        free(mem);
    }
    sfb_sf_free(&sf);
    sfb_sf_free(&rounded);
    return 0;
}

static int test_bf16_dense(void)
{
    return bf16_roundtrip(0.9, 0, 1) || bf16_roundtrip(0.9, 0, 0);
}

static int test_bf16_sparse(void)
{
    return bf16_roundtrip(0.05, 1, 1) || bf16_roundtrip(0.05, 1, 0);
}

/* The CSR choice weighs bf16's bytes: a dense c of 4 x 16 with nnz
 * non-zeros is 8 + 4*5*2 + 64*2 = 176 bytes dense, 8 + 40 + 5*4 + 6*nnz =
 * 68 + 6*nnz as CSR (and 2 bytes of padding for an odd nnz): CSR under 3/4
 * of 176 (132), up to 10 non-zeros. */
static int test_bf16_threshold(void)
{
    for (uint32_t nz = 0; nz <= 64; nz++) {
        struct sfb_sf sf = {0};
        ASSERT_OK(sfb_sf_reserve(&sf, 5, 16, 4, 0, 0));
        for (uint32_t i = 0; i < 64; i++) sf.c[i] = i < nz ? 1.0f + (float)i : 0.0f;
        int sparse;
        uint64_t nnz;
        size_t size = sfb__sf_choose(&sf, SFB_WIRE_BF16, &sparse, &nnz);
        ASSERT_EQ(sparse, nz <= 10);
        ASSERT_EQ(size, sparse ? words(68 + 6 * (size_t)nz) : 176);
        /* dense both ways: half of float32's bytes after the prefix */
        int fs;
        uint64_t fn;
        size_t f32 = sfb__sf_choose(&sf, SFB_WIRE_F32, &fs, &fn);
        if (!fs && !sparse) ASSERT_EQ(2 * (size - 8), f32 - 8);
        ASSERT(size < f32);
        sfb_sf_free(&sf);
    }
    return 0;
}

static int test_bf16_csr_input(void)
{
    struct sfb_sf sf = {0}, view;
    ASSERT_OK(sfb_sf_reserve(&sf, 2, 6, 2, 1, 3));
    sf.scale = 2.0f;
    float b[] = {1, 2.0078125f /* 2 + 2^-7: a tie, to 2 */, 3, 1.0f / 3.0f};
    memcpy(sf.b, b, sizeof b);
    uint32_t rp[] = {0, 2, 3}, col[] = {1, 5, 0};
    float val[] = {0.5f, -1.0f, 0.1f};
    memcpy(sf.c_row_ptr, rp, sizeof rp);
    memcpy(sf.c_col, col, sizeof col);
    memcpy(sf.c_val, val, sizeof val);
    int sparse;
    uint64_t nnz;
    size_t size = sfb__sf_choose(&sf, SFB_WIRE_BF16, &sparse, &nnz);
    ASSERT_EQ(sparse, 1);
    ASSERT_EQ(nnz, 3);
    ASSERT_EQ(size, 8 + 4 * 2 + 3 * 4 + 3 * 6 + 2); /* 46, padded to 48 */
    uint8_t buf[64];
    ASSERT_OK(sfb__sf_encode(&sf, sparse, nnz, SFB_WIRE_BF16, buf, size));
    uint8_t *wide;
    ASSERT_OK(widen_view(buf, size, 2, 6, 2, 1, &wide, &view));
    ASSERT_EQ(view.c_row_ptr[1], 2);
    ASSERT_EQ(view.c_col[1], 5);
    ASSERT(view.b[1] == 2.0f);
    ASSERT(view.b[3] == sfb__bf16_to_f32(0x3eab)); /* 1/3 = 0x3eaaaaab: up */
    ASSERT(view.c_val[2] == sfb__bf16_to_f32(0x3dcd)); /* 0.1 = 0x3dcccccd: up */
    ASSERT(view.c_val[1] == -1.0f);
    free(wide);
    /* only float32 and bfloat16 are encoded */
    ASSERT_EQ(sfb__sf_encode(&sf, sparse, nnz, SFB_WIRE_F64, buf, size), -EINVAL);
    sfb_sf_free(&sf);
    return 0;
}

/* Lengths that disagree with the shapes (truncated, one byte short, longer),
 * a bad nnz, CSR structure and every non-finite bfloat16 are rejected. */
static int test_bf16_malformed(void)
{
    struct sfb_sf sf = {0}, view;
    fill(&sf, 0.05);
    int sparse;
    uint64_t nnz;
    size_t size = sfb__sf_choose(&sf, SFB_WIRE_BF16, &sparse, &nnz), wide;
    ASSERT_EQ(sparse, 1);
    uint8_t *p = calloc(1, size + 8);
    ASSERT_OK(sfb__sf_encode(&sf, 1, nnz, SFB_WIRE_BF16, p, size));
    ASSERT_OK(sfb__sf_expand_size(p, size, ROWS, COLS, S, 1, &wide));
    const size_t lens[] = {0, 7, 8, size - 2, size - 1, size + 1, size + 2};
    for (size_t i = 0; i < SFB_ARRAY_LEN(lens); i++) {
        ASSERT_EQ(sfb__sf_expand_size(p, lens[i], ROWS, COLS, S, 1, &wide), -SFB_EFORMAT);
        ASSERT_EQ(sfb__sf_expand(p, lens[i], ROWS, COLS, S, 1, p, size), -SFB_EFORMAT);
    }
    ASSERT_STR_CONTAINS(sfb_last_error(), "sf payload (bfloat16)");
    /* the padding must be zero (3 non-zeros: 86 bytes and 2 of padding) */
    ASSERT_EQ(nnz, 3);
    ASSERT_EQ(size, 88);
    p[87] = 1;
    ASSERT_EQ(sfb__sf_expand_size(p, size, ROWS, COLS, S, 1, &wide), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "padding byte 87 is not 0");
    p[87] = 0;
    /* the float32 reading of a bf16 payload fails on length too */
    ASSERT_EQ(sfb__sf_expand_size(p, size, ROWS + 1, COLS, S, 1, &wide), -SFB_EFORMAT);
    ASSERT_EQ(sfb__sf_expand_size(p, size, ROWS, COLS, S, 0, &wide), -SFB_EFORMAT);
    uint32_t n0 = sfb__get_u32(p + 4);
    sfb__put_u32(p + 4, S * COLS + 1);
    ASSERT_EQ(sfb__sf_expand_size(p, size, ROWS, COLS, S, 1, &wide), -SFB_EFORMAT);
    sfb__put_u32(p + 4, n0);
    /* CSR structure: checked on the widened payload */
    size_t coloff = SFB_SF_PREFIX + S * ROWS * 2 + (S + 1) * 4;
    uint32_t c0 = sfb__get_u32(p + coloff);
    sfb__put_u32(p + coloff, COLS);
    uint8_t *w;
    ASSERT_EQ(widen_view(p, size, ROWS, COLS, S, 1, &w, &view), -SFB_EFORMAT);
    free(w);
    sfb__put_u32(p + coloff, c0);
    ASSERT_OK(widen_view(p, size, ROWS, COLS, S, 1, &w, &view));
    free(w);
    /* a bfloat16 whose exponent bits are all ones, in b and in c's values */
    const uint16_t bad[] = {0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff};
    size_t valoff = coloff + nnz * 4;
    const size_t at[] = {SFB_SF_PREFIX, SFB_SF_PREFIX + 2 * (S * ROWS - 1), valoff,
                         valoff + 2 * (nnz - 1)};
    for (size_t i = 0; i < SFB_ARRAY_LEN(at); i++) {
        uint16_t save = sfb__get_u16(p + at[i]);
        for (size_t k = 0; k < SFB_ARRAY_LEN(bad); k++) {
            sfb__put_u16(p + at[i], bad[k]);
            ASSERT_EQ(widen_view(p, size, ROWS, COLS, S, 1, &w, &view), -SFB_EFORMAT);
            ASSERT_STR_CONTAINS(sfb_last_error(), (bad[k] & 0x7f) ? "is nan" : "is inf");
            free(w);
        }
        sfb__put_u16(p + at[i], 0x7f7f); /* the largest finite: fine */
        ASSERT_OK(widen_view(p, size, ROWS, COLS, S, 1, &w, &view));
        free(w);
        sfb__put_u16(p + at[i], save);
    }
    /* a non-finite scale (float32 in either payload) */
    sfb__put_u32(p, 0x7f800000u);
    ASSERT_EQ(widen_view(p, size, ROWS, COLS, S, 1, &w, &view), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "scale is inf");
    free(w);
    free(p);
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
    {"bf16_round", test_bf16_round},
    {"bf16_dense", test_bf16_dense},
    {"bf16_sparse", test_bf16_sparse},
    {"bf16_threshold", test_bf16_threshold},
    {"bf16_csr_input", test_bf16_csr_input},
    {"bf16_malformed", test_bf16_malformed},
};
TEST_MAIN(tests)
