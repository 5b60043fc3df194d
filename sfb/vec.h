/* The dense path's element-wise loops over float32 numbers: the
 * finiteness check of every update a rank publishes or receives, and
 * FMS's copies, sums and applies of dense rows. Each runs on the widest
 * vectors the processor has: AVX2 where it has them (vec_avx2.c, built
 * where the compiler takes -mavx2 on x86-64: config.h SFB_AVX2), else the
 * build's baseline (SSE2 on x86-64). Each number gets the same
 * operations in the same order whichever runs (no reassociation, no fused
 * multiply-add): the results are the same bytes (test `vec`).
 *
 * Pointers to `const void` may be any received payload (no alignment);
 * the float32 arrays are the caller's, aligned as floats. */
#ifndef SFB_VEC_H
#define SFB_VEC_H

#include <stddef.h>

/* The index of the first NaN or infinity of v[0 .. n) (float32 numbers),
 * or n when every one is finite. Every received frame passes here. */
size_t sfb__first_nonfinite(const void *v, size_t n);

/* o[i] = s · x[i] for i < n (o and x do not overlap). */
void sfb__vec_scale(float *o, float s, const float *x, size_t n);

/* a[i] += p[i] for i < n (p: float32 numbers, not overlapping a). */
void sfb__vec_add(float *a, const void *p, size_t n);

/* a[i] += p[i] − mine[i] for i < n: a sum applied less the own part that
 * is in the replica already. */
void sfb__vec_add_diff(float *a, const void *p, const float *mine, size_t n);

/* One set of the loops (tests compare them): the build's baseline, and the
 * AVX2 one, NULL where this build or this processor has none. */
struct sfb__vec_ops {
    size_t (*first_nonfinite)(const void *v, size_t n);
    void (*scale)(float *o, float s, const float *x, size_t n);
    void (*add)(float *a, const void *p, size_t n);
    void (*add_diff)(float *a, const void *p, const float *mine, size_t n);
};

extern const struct sfb__vec_ops sfb__vec_base;
const struct sfb__vec_ops *sfb__vec_avx2(void);

/* vec_avx2.c's set (only in a build with SFB_AVX2: use sfb__vec_avx2) */
extern const struct sfb__vec_ops sfb__vec_avx2_table;

#endif
