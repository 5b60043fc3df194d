#include "config.h"
#include "sfb/codec.h"
#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/wire/wire.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Shapes come from frame headers (untrusted): s · rows · 4 alone can pass
 * 2^64, and a wrapped size could match a short payload (fuzz_codec found
 * it), so every step is checked and an impossible size saturates. The
 * bytes before the padding (a bfloat16 payload's 0 or 2). */
static size_t unpadded_size(const struct sfb_sf *sf, int sparse, uint64_t nnz, unsigned prec)
{
    size_t b, c, n, e = sfb__wire_elem_size((uint8_t)(prec << SFB_WIRE_F_PREC_SHIFT));
    if (__builtin_mul_overflow((size_t)sf->s * sf->rows, e, &b)) return SIZE_MAX;
    if (sparse) {
        if (__builtin_mul_overflow(nnz, (uint64_t)(4 + e), &c) ||
            __builtin_add_overflow(c, ((size_t)sf->s + 1) * 4, &c))
            return SIZE_MAX;
    } else if (__builtin_mul_overflow((size_t)sf->s * sf->cols, e, &c)) {
        return SIZE_MAX;
    }
    if (__builtin_add_overflow(b, c, &n) || __builtin_add_overflow(n, (size_t)SFB_SF_PREFIX, &n))
        return SIZE_MAX;
    return n;
}

/* Every payload is a whole number of 4-byte words: a bfloat16 one ends in
 * zero bytes up to the next multiple of 4, so that frames stay multiples
 * of 4 bytes and the float32 payloads behind one in a bundle stay aligned
 * for their in-place views (a float32 payload needs none). */
size_t sfb__sf_payload_size(const struct sfb_sf *sf, int sparse, uint64_t nnz, unsigned prec)
{
    size_t n = unpadded_size(sf, sparse, nnz, prec);
    if (n > SIZE_MAX - 3) return SIZE_MAX;
    return (n + 3) & ~(size_t)3;
}

static uint64_t count_nonzero(const float *c, size_t n)
{
    uint64_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += c[i] != 0.0f;
    return nz;
}

size_t sfb__sf_choose(const struct sfb_sf *sf, unsigned prec, int *sparse, uint64_t *nnz)
{
    if (sf->sparse_c) {
        *sparse = 1;
        *nnz = sfb_sf_c_count(sf);
        return sfb__sf_payload_size(sf, 1, *nnz, prec);
    }
    uint64_t nz = count_nonzero(sf->c, (size_t)sf->s * sf->cols);
    /* (bfloat16: a value costs 2 bytes dense, 6 in CSR, so CSR takes a c
     * under ~1/4 non-zero) */
    size_t dense = sfb__sf_payload_size(sf, 0, 0, prec),
           csr = sfb__sf_payload_size(sf, 1, nz, prec);
    /* CSR only when it saves a quarter of the bytes (c under ~3/8 dense):
     * the sender compacts c (~1.8 ns a number) and every receiver expands
     * it back for the sgemm (src/factor/reconstruct.c). Fashion-MNIST's pixels,
     * about half non-zero, saved 4 % of the bytes as CSR and cost a
     * quick-start clock with 4 workers 20 us of its ~220. */
    *sparse = csr < dense - dense / 4;
    *nnz = *sparse ? nz : 0;
    return *sparse ? csr : dense;
}

size_t sfb__sf_frame_size(const struct sfb_sf *sf, unsigned prec)
{
    int sparse;
    uint64_t nnz;
    return SFB_WIRE_HDR_SIZE + sfb__sf_choose(sf, prec, &sparse, &nnz);
}

/* Round to nearest, ties to even, on the bits: adding 0x7fff plus the
 * kept part's lowest bit carries into it exactly when the dropped half is
 * above one half, or one half with an odd kept part. A NaN keeps its sign
 * and upper payload, made quiet (its dropped bits may have been all its
 * payload); a finite number that would round past the largest bfloat16
 * (0x7f7f: |x| >= 0x7f7f8000 as float32 bits) saturates to it. Branch-free
 * selects, so the loops below vectorize. */
static inline uint16_t round_bf16(uint32_t u)
{
    uint32_t mag = u & 0x7fffffffu;
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x0040u;
    uint32_t sat = ((u >> 16) & 0x8000u) | 0x7f7fu;
    r = mag >= 0x7f7f8000u && mag < 0x7f800000u ? sat : r;
    r = mag > 0x7f800000u ? nan : r;
    return (uint16_t)r;
}

uint16_t sfb__bf16_from_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return round_bf16(u);
}

float sfb__bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* n float32 as bfloat16, little-endian, to dst (any alignment). In blocks
 * of 8 on little-endian hosts: GCC 12 vectorizes a loop of a fixed count at
 * -O2 (SSE2), not one of n, so one at a time with 16-bit stores took 43 us
 * for a quick-start MLP's 16·(32+785) numbers, this ~8. */
static void put_bf16s(uint8_t *restrict dst, const float *restrict src, size_t n)
{
    size_t i = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; i + 8 <= n; i += 8) {
        uint32_t u[8];
        uint16_t h[8];
        memcpy(u, src + i, sizeof u);
        for (int k = 0; k < 8; k++) h[k] = round_bf16(u[k]);
        memcpy(dst + 2 * i, h, sizeof h);
    }
#endif
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, sizeof u);
        sfb__put_u16(dst + 2 * i, round_bf16(u));
    }
}

/* n little-endian bfloat16 at src (any alignment) widened to float32,
 * written little-endian to dst (blocks of 8 as put_bf16s: 80 us a
 * quick-start MLP frame one at a time byte by byte, this ~5). */
static void get_bf16s(uint8_t *restrict dst, const uint8_t *restrict src, size_t n)
{
    size_t i = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; i + 8 <= n; i += 8) {
        uint16_t h[8];
        uint32_t u[8];
        memcpy(h, src + 2 * i, sizeof h);
        for (int k = 0; k < 8; k++) u[k] = (uint32_t)h[k] << 16;
        memcpy(dst + 4 * i, u, sizeof u);
    }
#endif
    for (; i < n; i++) sfb__put_u32(dst + 4 * i, (uint32_t)sfb__get_u16(src + 2 * i) << 16);
}

/* n values at precision e (4: float32, 2: bfloat16) to dst. */
static inline void put_vals(uint8_t *dst, const float *src, size_t n, size_t e)
{
    if (e == 4) sfb__put_f32s(dst, src, n);
    else put_bf16s(dst, src, n);
}

/* A dense c sent as CSR with values of e bytes: drops the zeros. Branch-free
 * (a zero is written and then overwritten by the next non-zero): inputs
 * such as images are half zeros in no pattern, and a branch per number
 * mispredicted at every other one (7 us for a quick-start frame). Inlined
 * with a constant e, once per precision. */
static inline int compact_c(const struct sfb_sf *sf, uint64_t nnz, uint8_t *rp, uint8_t *col,
                            uint8_t *val, size_t e)
{
    uint64_t q = 0;
    sfb__put_u32(rp, 0);
    for (uint32_t i = 0; i < sf->s; i++) {
        const float *row = sf->c + (size_t)i * sf->cols;
        for (uint32_t j = 0; j < sf->cols; j++) {
            if (q < nnz) {
                sfb__put_u32(col + 4 * (size_t)q, j);
                put_vals(val + e * (size_t)q, &row[j], 1, e);
            }
            q += row[j] != 0.0f;
        }
        if (q > nnz) return sfb__error(-EINVAL, "sf encode: more non-zeros than counted");
        sfb__put_u32(rp + 4 * ((size_t)i + 1), (uint32_t)q);
    }
    if (q != nnz) return sfb__error(-EINVAL, "sf encode: fewer non-zeros than counted");
    return 0;
}

int sfb__sf_encode(const struct sfb_sf *sf, int sparse, uint64_t nnz, unsigned prec,
                   uint8_t *out, size_t size)
{
    if (prec != SFB_WIRE_F32 && prec != SFB_WIRE_BF16)
        return sfb__error(-EINVAL, "sf encode: precision %u (float32 or bfloat16 only)", prec);
    if (size != sfb__sf_payload_size(sf, sparse, nnz, prec) || (sf->sparse_c && !sparse) ||
        nnz > UINT32_MAX)
        return sfb__error(-EINVAL, "sf encode: buffer or encoding does not match the batch");
    size_t e = prec == SFB_WIRE_F32 ? 4 : 2;
    if (e == 2) memset(out + size - 4, 0, 4); /* the padding (the rest overwritten below) */
    uint32_t scale_bits;
    memcpy(&scale_bits, &sf->scale, 4);
    sfb__put_u32(out, scale_bits);
    sfb__put_u32(out + 4, (uint32_t)nnz);
    uint8_t *p = out + SFB_SF_PREFIX;
    size_t nb = (size_t)sf->s * sf->rows;
    put_vals(p, sf->b, nb, e);
    p += nb * e;
    if (!sparse) {
        put_vals(p, sf->c, (size_t)sf->s * sf->cols, e);
        return 0;
    }
    uint8_t *rp = p, *col = p + ((size_t)sf->s + 1) * 4, *val = col + nnz * 4;
    if (sf->sparse_c) {
        for (uint32_t i = 0; i <= sf->s; i++) sfb__put_u32(rp + 4 * i, sf->c_row_ptr[i]);
        for (uint64_t j = 0; j < nnz; j++) sfb__put_u32(col + 4 * j, sf->c_col[j]);
        put_vals(val, sf->c_val, nnz, e);
        return 0;
    }
    return e == 4 ? compact_c(sf, nnz, rp, col, val, 4) : compact_c(sf, nnz, rp, col, val, 2);
}

int sfb__sf_expand_size(const uint8_t *p, size_t len, uint32_t rows, uint32_t cols, uint32_t s,
                        int sparse, size_t *wide)
{
    if (len < SFB_SF_PREFIX)
        return sfb__error(-SFB_EFORMAT, "sf payload (bfloat16): %zu bytes, too short", len);
    uint32_t nnz = sfb__get_u32(p + 4);
    struct sfb_sf shape = {.rows = rows, .cols = cols, .s = s};
    if (!sparse && nnz != 0)
        return sfb__error(-SFB_EFORMAT, "sf payload (bfloat16): dense c with nnz = %u", nnz);
    if (sparse && (uint64_t)nnz > (uint64_t)s * cols)
        return sfb__error(-SFB_EFORMAT, "sf payload (bfloat16): nnz %u exceeds %u × %u", nnz, s,
                          cols);
    size_t want = sfb__sf_payload_size(&shape, sparse, nnz, SFB_WIRE_BF16);
    if (len != want)
        return sfb__error(-SFB_EFORMAT, "sf payload (bfloat16): %zu bytes, shapes say %zu", len,
                          want);
    for (size_t i = unpadded_size(&shape, sparse, nnz, SFB_WIRE_BF16); i < len; i++)
        if (p[i])
            return sfb__error(-SFB_EFORMAT, "sf payload (bfloat16): padding byte %zu is not 0",
                              i);
    *wide = sfb__sf_payload_size(&shape, sparse, nnz, SFB_WIRE_F32);
    if (*wide == SIZE_MAX) /* twice a real buffer's length at most: cannot happen */
        return sfb__error(-SFB_EFORMAT, "sf payload (bfloat16): too large to widen");
    return 0;
}

int sfb__sf_expand(const uint8_t *p, size_t len, uint32_t rows, uint32_t cols, uint32_t s,
                   int sparse, uint8_t *out, size_t out_len)
{
    size_t wide;
    int ret = sfb__sf_expand_size(p, len, rows, cols, s, sparse, &wide);
    if (ret) return ret;
    if (out_len != wide)
        return sfb__error(-EINVAL, "sf expand: %zu bytes of room for a %zu-byte payload", out_len,
                          wide);
    memcpy(out, p, SFB_SF_PREFIX); /* scale and nnz, as they are */
    size_t nb = (size_t)s * rows;
    get_bf16s(out + SFB_SF_PREFIX, p + SFB_SF_PREFIX, nb);
    const uint8_t *q = p + SFB_SF_PREFIX + 2 * nb;
    uint8_t *o = out + SFB_SF_PREFIX + 4 * nb;
    if (!sparse) {
        get_bf16s(o, q, (size_t)s * cols);
        return 0;
    }
    /* row pointers and columns: little-endian u32 either way */
    size_t nnz = sfb__get_u32(p + 4), idx = ((size_t)s + 1 + nnz) * 4;
    memcpy(o, q, idx);
    get_bf16s(o + idx, q + idx, nnz);
    return 0;
}

void sfb__bf16_round(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, v + i, sizeof u);
        u = (uint32_t)round_bf16(u) << 16;
        memcpy(v + i, &u, sizeof u);
    }
}

void sfb__bf16_encode(uint8_t *dst, const float *src, size_t n)
{
    put_bf16s(dst, src, n);
}

void sfb__bf16_decode(float *dst, const uint8_t *src, size_t n)
{
    get_bf16s((uint8_t *)dst, src, n);
}

size_t sfb__bf16_first_nonfinite(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n;) { /* blocks without an exit (as sfb/vec.h's check) */
        size_t m = SFB_MIN(n - i, (size_t)1024);
        uint32_t bad = 0;
        for (size_t j = 0; j < m; j++)
            bad |= (sfb__get_u16(p + 2 * (i + j)) & 0x7f80u) == 0x7f80u;
        if (bad)
            for (size_t j = 0; j < m; j++)
                if ((sfb__get_u16(p + 2 * (i + j)) & 0x7f80u) == 0x7f80u) return i + j;
        i += m;
    }
    return n;
}

/* "NAME[i][j] is nan" for the first non-finite of v (s rows of `width`
 * numbers, or `cols` for CSR with row pointers rp), else 0. */
static int name_nonfinite(const char *name, const float *v, uint64_t n, uint32_t width,
                          const uint32_t *rp, const uint32_t *col, char *what, size_t cap)
{
    size_t at = sfb__first_nonfinite(v, (size_t)n);
    if (at == n) return 0;
    size_t row = width ? at / width : 0, j = width ? at % width : 0;
    if (rp) { /* the CSR row holding value `at`, and its column */
        while (rp[row + 1] <= at) row++;
        j = col[at];
    }
    float x;
    memcpy(&x, v + at, sizeof x);
    snprintf(what, cap, "%s[%zu][%zu] is %s", name, row, j, isnan(x) ? "nan" : "inf");
    return 1;
}

int sfb__sf_nonfinite(const struct sfb_sf *sf, char *what, size_t cap)
{
    if (!isfinite(sf->scale)) {
        snprintf(what, cap, "scale is %s", isnan(sf->scale) ? "nan" : "inf");
        return 1;
    }
    if (name_nonfinite("b", sf->b, (uint64_t)sf->s * sf->rows, sf->rows, NULL, NULL, what, cap))
        return 1;
    if (sf->sparse_c)
        return name_nonfinite("c", sf->c_val, sf->c_row_ptr[sf->s], 0, sf->c_row_ptr, sf->c_col,
                              what, cap);
    return name_nonfinite("c", sf->c, (uint64_t)sf->s * sf->cols, sf->cols, NULL, NULL, what, cap);
}

int sfb__sf_view(const uint8_t *p, size_t len, uint32_t rows, uint32_t cols, uint32_t s,
                 int sparse, struct sfb_sf *view)
{
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    return sfb__error(-ENOTSUP, "sf view: zero-copy views need a little-endian host");
#endif
    memset(view, 0, sizeof *view);
    if ((uintptr_t)p % 4)
        return sfb__error(-EINVAL, "sf view: payload is not 4-byte aligned");
    if (len < SFB_SF_PREFIX) return sfb__error(-SFB_EFORMAT, "sf payload: %zu bytes, too short", len);
    uint32_t nnz = sfb__get_u32(p + 4);
    struct sfb_sf shape = {.rows = rows, .cols = cols, .s = s};
    if (!sparse && nnz != 0)
        return sfb__error(-SFB_EFORMAT, "sf payload: dense c with nnz = %u", nnz);
    if (sparse && (uint64_t)nnz > (uint64_t)s * cols)
        return sfb__error(-SFB_EFORMAT, "sf payload: nnz %u exceeds %u × %u", nnz, s, cols);
    size_t want = sfb__sf_payload_size(&shape, sparse, nnz, SFB_WIRE_F32);
    if (len != want)
        return sfb__error(-SFB_EFORMAT, "sf payload: %zu bytes, shapes say %zu", len, want);
    memcpy(&view->scale, p, 4);
    char what[64];
    if (!isfinite(view->scale))
        return sfb__error(-SFB_EFORMAT, "sf payload: scale is %s", isnan(view->scale) ? "nan" : "inf");
    view->rows = rows;
    view->cols = cols;
    view->s = s;
    view->sparse_c = sparse;
    const uint8_t *q = p + SFB_SF_PREFIX;
    view->b = (float *)(uintptr_t)q;
    q += (size_t)s * rows * 4;
    if (sfb__first_nonfinite(view->b, (size_t)s * rows) < (size_t)s * rows) {
        name_nonfinite("b", view->b, (uint64_t)s * rows, rows, NULL, NULL, what, sizeof what);
        return sfb__error(-SFB_EFORMAT, "sf payload: %s", what);
    }
    if (!sparse) {
        view->c = (float *)(uintptr_t)q;
        if (sfb__first_nonfinite(view->c, (size_t)s * cols) < (size_t)s * cols) {
            name_nonfinite("c", view->c, (uint64_t)s * cols, cols, NULL, NULL, what, sizeof what);
            return sfb__error(-SFB_EFORMAT, "sf payload: %s", what);
        }
        return 0;
    }
    view->c_row_ptr = (uint32_t *)(uintptr_t)q;
    view->c_col = view->c_row_ptr + s + 1;
    view->c_val = (float *)(view->c_col + nnz);
    if (view->c_row_ptr[0] != 0 || view->c_row_ptr[s] != nnz)
        return sfb__error(-SFB_EFORMAT, "sf payload: CSR row pointers do not span 0..%u", nnz);
    for (uint32_t i = 0; i < s; i++) {
        uint32_t a = view->c_row_ptr[i], b = view->c_row_ptr[i + 1];
        if (b < a || b > nnz)
            return sfb__error(-SFB_EFORMAT, "sf payload: CSR row %u pointers decrease", i);
        for (uint32_t j = a; j < b; j++) {
            if (view->c_col[j] >= cols || (j > a && view->c_col[j] <= view->c_col[j - 1]))
                return sfb__error(-SFB_EFORMAT,
                                  "sf payload: CSR row %u column %u out of order or >= %u", i,
                                  view->c_col[j], cols);
        }
    }
    if (sfb__first_nonfinite(view->c_val, nnz) < nnz) {
        name_nonfinite("c", view->c_val, nnz, 0, view->c_row_ptr, view->c_col, what, sizeof what);
        return sfb__error(-SFB_EFORMAT, "sf payload: %s", what);
    }
    return 0;
}
