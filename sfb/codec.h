/* SF payload codec: how one sfb_sf travels inside an SF frame's payload.
 *
 *   0   4  scale (float32)
 *   4   4  nnz of c (u32; 0 when c is dense)
 *   8      b: s × rows float32
 *          c dense: s × cols float32
 *          c CSR:   row_ptr (s+1) u32, col (nnz) u32, val (nnz) float32
 *
 * Shapes (rows, cols, s) and the dense/sparse flag live in the frame header;
 * the codec is given them by the wire decoder, which has already checked
 * them against the job. All little-endian (docs/wire.md). */
#ifndef SFB_CODEC_H
#define SFB_CODEC_H

#include <sfb/sf.h>

#include <stddef.h>
#include <stdint.h>

#define SFB_SF_PREFIX 8u

/* Payload bytes of `sf` encoded with dense (sparse = 0) or CSR c; SIZE_MAX
 * when the shapes make it overflow (no payload can have that size). */
size_t sfb__sf_payload_size(const struct sfb_sf *sf, int sparse, uint64_t nnz);

/* Chooses the encoding for `sf` (counting c's non-zeros when c is dense:
 * CSR when it is under 3/4 of the dense bytes) and returns its payload
 * size; *sparse and *nnz say which. */
size_t sfb__sf_choose(const struct sfb_sf *sf, int *sparse, uint64_t *nnz);

/* Bytes of the frame that carries `sf` whole as sfb__sf_choose encodes it:
 * the wire's header and the payload (what --sync auto's cost model charges
 * a worker's SF). */
size_t sfb__sf_frame_size(const struct sfb_sf *sf);

/* Encodes `sf` into out[0 .. size) as chosen by sfb__sf_choose (or forced:
 * sparse = 0 / 1 with the matching nnz). A dense c can be sent as CSR (zeros
 * dropped); a CSR c is only sent as CSR. Returns 0 or -EINVAL. */
int sfb__sf_encode(const struct sfb_sf *sf, int sparse, uint64_t nnz, uint8_t *out, size_t size);

/* The index of the first NaN or infinity of v[0 .. n), or n when every
 * number is finite. Vectorized: every received frame passes here. */
size_t sfb__first_nonfinite(const float *v, size_t n);

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
