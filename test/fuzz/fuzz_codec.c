/* SF payload decoders (sfb__sf_view, and sfb__sf_expand for bfloat16
 * payloads): untrusted network input.
 *
 * Input: bytes 0-3 rows, 4-7 cols, 8-11 s (little-endian u32 each), byte 12
 * bit 0 = sparse, bit 1 = the payload is bfloat16 (widened first, as the
 * SFB engine does for a frame whose precision says bf16), the rest is the
 * payload (copied to a buffer of exactly its length). Shapes come straight
 * from the input, as a buggy or hostile peer's frame header could send
 * them. On success every view pointer must lie inside the (widened)
 * payload, the length must be exactly what the shapes say, the CSR
 * structure must be valid, every number finite, and re-encoding the view
 * at the payload's precision must give back the payload byte for byte. */
#include "fuzz.h"

#include "sfb/codec.h"
#include "src/base/bytes.h"

#include <math.h>
#include <string.h>

#define INSIDE(ptr, count, elem)                                                                   \
    ((const uint8_t *)(ptr) >= buf &&                                                              \
     (uint64_t)((const uint8_t *)(ptr)-buf) + (uint64_t)(count) * (elem) <= (uint64_t)len)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 13) return 0;
    uint32_t rows = sfb__get_u32(data), cols = sfb__get_u32(data + 4), s = sfb__get_u32(data + 8);
    int sparse = data[12] & 1, bf16 = (data[12] >> 1) & 1;
    unsigned prec = bf16 ? SFB_WIRE_BF16 : SFB_WIRE_F32;
    const size_t in_len = size - 13;
    /* malloc'd exactly: ASan catches a read one byte past the payload. */
    uint8_t *in = malloc(in_len ? in_len : 1);
    if (!in) abort();
    memcpy(in, data + 13, in_len);
    uint8_t *buf = in; /* what is viewed: the payload, or its widening */
    size_t len = in_len;
    int r = 0;
    if (bf16) {
        r = sfb__sf_expand_size(in, in_len, rows, cols, s, sparse, &len);
        if (!r) {
            FUZZ_CHECK(len >= in_len && len <= 2 * in_len);
            buf = malloc(len ? len : 1);
            if (!buf) abort();
            r = sfb__sf_expand(in, in_len, rows, cols, s, sparse, buf, len);
            FUZZ_CHECK(r == 0); /* the size check passed: widening cannot fail */
        }
    }
    struct sfb_sf v;
    if (!r) r = sfb__sf_view(buf, len, rows, cols, s, sparse, &v);
    if (r) {
        FUZZ_CHECK(r < 0);
        fuzz_note(r);
        if (buf != in) free(buf);
        free(in);
        return 0;
    }
    FUZZ_CHECK(v.rows == rows && v.cols == cols && v.s == s && v.sparse_c == sparse);
    FUZZ_CHECK(isfinite(v.scale));
    uint64_t nnz_in = sparse ? sfb__get_u32(in + 4) : 0;
    FUZZ_CHECK(len == sfb__sf_payload_size(&v, sparse, nnz_in, SFB_WIRE_F32));
    FUZZ_CHECK(in_len == sfb__sf_payload_size(&v, sparse, nnz_in, prec));
    FUZZ_CHECK(INSIDE(v.b, (uint64_t)s * rows, 4));
    for (uint64_t i = 0; i < (uint64_t)s * rows; i++)
        FUZZ_CHECK(isfinite(v.b[i]));
    uint64_t nnz = 0;
    if (!sparse) {
        FUZZ_CHECK(INSIDE(v.c, (uint64_t)s * cols, 4));
        for (uint64_t i = 0; i < (uint64_t)s * cols; i++)
            FUZZ_CHECK(isfinite(v.c[i]));
    } else {
        nnz = sfb__get_u32(buf + 4);
        FUZZ_CHECK(INSIDE(v.c_row_ptr, (uint64_t)s + 1, 4));
        FUZZ_CHECK(INSIDE(v.c_col, nnz, 4));
        FUZZ_CHECK(INSIDE(v.c_val, nnz, 4));
        FUZZ_CHECK(v.c_row_ptr[0] == 0 && v.c_row_ptr[s] == nnz);
        for (uint32_t i = 0; i < s; i++) {
            FUZZ_CHECK(v.c_row_ptr[i] <= v.c_row_ptr[i + 1]);
            for (uint32_t j = v.c_row_ptr[i]; j < v.c_row_ptr[i + 1]; j++) {
                FUZZ_CHECK(v.c_col[j] < cols);
                FUZZ_CHECK(j == v.c_row_ptr[i] || v.c_col[j] > v.c_col[j - 1]);
                FUZZ_CHECK(isfinite(v.c_val[j]));
            }
        }
    }
    /* Round trip: the view encodes back to the same bytes (a widened
     * bfloat16 is one exactly, so rounding it again changes nothing). */
    uint8_t *again = malloc(in_len ? in_len : 1);
    if (!again) abort();
    FUZZ_CHECK(sfb__sf_encode(&v, sparse, nnz, prec, again, in_len) == 0);
    FUZZ_CHECK(memcmp(again, in, in_len) == 0);
    free(again);
    if (buf != in) free(buf);
    free(in);
    return 0;
}
