/* SF payload codec: how one sfb_sf travels inside an SF frame's payload.
 *
 *   0   4  scale (float32)
 *   4   4  nnz of c (u32; 0 when c is dense)
 *   8      b: s × rows elements
 *          c dense: s × cols elements
 *          c CSR:   row_ptr (s+1) u32, col (nnz) u32, val (nnz) elements
 *
 * An element is a float32, or a bfloat16 (the upper half of a float32's
 * bits) where the frame header's precision (bits 4..5 of its flags) says
 * SFB_WIRE_BF16: --factor-dtype bf16 (the scale stays float32); a bfloat16
 * payload ends in 0 or 2 zero bytes, a whole number of 4-byte words. Shapes (rows,
 * cols, s), the dense/sparse flag and the precision live in the frame
 * header; the codec is given them by the wire decoder, which has already
 * checked them against the job. All little-endian, nothing aligned in a
 * bfloat16 payload (docs/wire.md).
 *
 * A float32 payload is viewed in place (sfb__sf_view). A bfloat16 one is
 * first widened into a float32 payload of the same layout in a buffer of
 * the caller's (sfb__sf_expand), which is then viewed the same way: no
 * sbgemm here (Debian's OpenBLAS 0.3.21 has none), so the apply runs the
 * usual sgemm on the widened numbers. */
#ifndef SFB_CODEC_H
#define SFB_CODEC_H

#include <sfb/sf.h>
#include "sfb/vec.h"
#include "src/wire/wire.h"

#include <stddef.h>
#include <stdint.h>

#define SFB_SF_PREFIX 8u

/* `prec` below: the elements' precision, SFB_WIRE_F32 or SFB_WIRE_BF16
 * (enum sfb__wire_prec; the encoder takes no other). */

/* Payload bytes of `sf` encoded with dense (sparse = 0) or CSR c at
 * precision `prec`; SIZE_MAX when the shapes make it overflow (no payload
 * can have that size). */
size_t sfb__sf_payload_size(const struct sfb_sf *sf, int sparse, uint64_t nnz, unsigned prec);

/* Chooses the encoding for `sf` at precision `prec` (counting c's non-zeros
 * when c is dense: CSR when it is under 3/4 of the dense bytes) and returns
 * its payload size; *sparse and *nnz say which. */
size_t sfb__sf_choose(const struct sfb_sf *sf, unsigned prec, int *sparse, uint64_t *nnz);

/* Bytes of the frame that carries `sf` whole at precision `prec` as
 * sfb__sf_choose encodes it: the wire's header and the payload (what --sync
 * auto's cost model charges a worker's SF). */
size_t sfb__sf_frame_size(const struct sfb_sf *sf, unsigned prec);

/* Encodes `sf` into out[0 .. size) at precision `prec` as chosen by
 * sfb__sf_choose (or forced: sparse = 0 / 1 with the matching nnz). A dense
 * c can be sent as CSR (zeros dropped); a CSR c is only sent as CSR.
 * bfloat16: every number of b and c rounded to nearest, ties to even (NaN
 * stays NaN, infinities stay; a finite number beyond bfloat16's largest,
 * ~3.39e38, saturates to it rather than becoming infinite, so finite
 * factors stay finite). Returns 0 or -EINVAL. */
int sfb__sf_encode(const struct sfb_sf *sf, int sparse, uint64_t nnz, unsigned prec,
                   uint8_t *out, size_t size);

/* One float32 rounded to bfloat16 as the encoder does, and a bfloat16
 * widened to float32 (exact). */
uint16_t sfb__bf16_from_f32(float x);
float sfb__bf16_to_f32(uint16_t h);

/* The same over arrays (FMS's bfloat16 rows, dense_dtype): v rounded in
 * place to the float32 of its nearest bfloat16; n of them encoded to
 * dst (2 bytes each, little-endian, any alignment); n decoded from src
 * (any alignment) into dst. */
void sfb__bf16_round(float *v, size_t n);
void sfb__bf16_encode(uint8_t *dst, const float *src, size_t n);
void sfb__bf16_decode(float *dst, const uint8_t *src, size_t n);
/* The index of the first NaN or infinity among n bfloat16 at p (any
 * alignment), or n. */
size_t sfb__bf16_first_nonfinite(const uint8_t *p, size_t n);

/* A bfloat16 payload p[0 .. len) (untrusted: any bytes, any alignment) of
 * the header's shapes: checks its length exactly against the shapes and
 * its nnz, and sets *wide to the bytes of the float32 payload it widens to.
 * 0, or -SFB_EFORMAT with the detail recorded. */
int sfb__sf_expand_size(const uint8_t *p, size_t len, uint32_t rows, uint32_t cols, uint32_t s,
                        int sparse, size_t *wide);

/* Widens the bfloat16 payload p[0 .. len) into out[0 .. out_len), the
 * float32 payload of the same update (out_len: sfb__sf_expand_size's
 * *wide), for sfb__sf_view to validate (CSR structure; finiteness: a
 * bfloat16 whose exponent bits are all ones widens to a NaN or an
 * infinity) and view. Checks the length as sfb__sf_expand_size; -EINVAL
 * when out_len is not the widened size. */
int sfb__sf_expand(const uint8_t *p, size_t len, uint32_t rows, uint32_t cols, uint32_t s,
                   int sparse, uint8_t *out, size_t out_len);

/* Which array of `sf` holds a NaN or an infinity, and where: 0 when every
 * number (scale, b, c) is finite, else 1 with `what` (at most `cap` bytes)
 * saying "scale is nan", "b[2][7] is inf" or "c[0][3] is nan" (CSR: the
 * sample and column of the value). `sf` must be consistent (a CSR c's row
 * pointers end at its nnz). */
int sfb__sf_nonfinite(const struct sfb_sf *sf, char *what, size_t cap);

/* Makes `view` describe the payload p[0 .. len) without copying: b, c,
 * c_row_ptr, c_col, c_val point into p, which must be 4-byte aligned and
 * outlive the view (little-endian hosts; elsewhere -ENOTSUP). Validates the
 * length exactly, the CSR structure (row_ptr from 0, non-decreasing, ending
 * at nnz; columns strictly increasing per row and < cols) and that every
 * number is finite. -SFB_EFORMAT with the detail recorded on failure. */
int sfb__sf_view(const uint8_t *p, size_t len, uint32_t rows, uint32_t cols, uint32_t s,
                 int sparse, struct sfb_sf *view);

#endif
