/* BLAS for the layers above: only src/factor and models/ include <cblas.h>
 * (docs/design.md "Layers"), so what the engines compute by BLAS is
 * reached through here (src/factor/blas.c, reconstruct.c). */
#ifndef SFB_FACTOR_BLAS_H
#define SFB_FACTOR_BLAS_H

#include <stdint.h>

struct sfb_sf;

/* ‖x[0 .. n)‖₂, by the process's BLAS (cblas_snrm2, unit stride). Any
 * thread. */
float sfb__blas_norm2(int n, const float *x);

/* out ← rows [r0, r1) of sf->scale · BᵀC, row-major with sf->cols numbers
 * a row, overwritten (out need not be zeroed), for an SF with dense c and
 * at least one sample (the caller checks: r0 ≤ r1 ≤ sf->rows): one sgemm
 * on B's columns r0.. in place. What sfb_reconstruct_apply of that SF adds
 * to a zeroed matrix's rows: FMS forms its own update chunk by chunk with
 * it, so each chunk leaves while the next is computed
 * (src/factor/reconstruct.c). Any thread. */
void sfb__reconstruct_rows(const struct sfb_sf *sf, uint32_t r0, uint32_t r1, float *out);

/* out ← scale · BᵀC + beta · out (beta 0: out need not be initialized), B
 * s × rows with rows ≥ 1 numbers and ldb ≥ rows between its rows' starts, C
 * s × cols, out rows × cols, all row-major; one sgemm. FMS's owner sums the
 * factors pushed for its rows with it. Any thread. */
void sfb__factors_product(uint32_t rows, uint32_t cols, uint32_t s, float scale, const float *b,
                          uint32_t ldb, const float *c, float beta, float *out);

#endif
