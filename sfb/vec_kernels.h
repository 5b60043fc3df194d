/* The loops of sfb/vec.h, compiled once per vector width: vec.c (the
 * baseline) and vec_avx2.c (-mavx2) each define VEC(name), a suffix for
 * their copies, and VEC_BYTES, the width of the check's vectors, before
 * including this. The plain loops are vectorized by the compiler (libsfb's
 * -ftree-vectorize); the check is written in GCC's vector extensions, as
 * the compiler would not keep it branch-free. */
#include "src/base/util.h"

#include <stdint.h>
#include <string.h>

typedef uint32_t VEC(u32v) __attribute__((vector_size(VEC_BYTES)));

static float VEC(load)(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* NaN and infinity have an exponent of all ones: a block of 1024 numbers
 * is tested with whole vectors (compared, OR-ed, one test at the end), and
 * only a block that holds one is walked number by number. */
static size_t VEC(first_nonfinite)(const void *v, size_t n)
{
    enum { LANES = VEC_BYTES / 4, STEP = 4 * LANES };
    const unsigned char *p = v;
    const VEC(u32v) exp = (VEC(u32v)){0} + 0x7f800000u;
    size_t i = 0;
    while (n - i >= STEP) {
        size_t end = i + SFB_MIN((n - i) / STEP * STEP, (size_t)1024);
        VEC(u32v) bad = {0};
        for (size_t k = i; k < end; k += STEP) {
            VEC(u32v) a, b, c, d;
            memcpy(&a, p + 4 * k, VEC_BYTES);
            memcpy(&b, p + 4 * k + VEC_BYTES, VEC_BYTES);
            memcpy(&c, p + 4 * k + 2 * VEC_BYTES, VEC_BYTES);
            memcpy(&d, p + 4 * k + 3 * VEC_BYTES, VEC_BYTES);
            bad |= ((a & exp) == exp) | ((b & exp) == exp) | ((c & exp) == exp) |
                   ((d & exp) == exp);
        }
        uint64_t w[VEC_BYTES / 8], any = 0;
        memcpy(w, &bad, sizeof w);
        for (size_t k = 0; k < VEC_BYTES / 8; k++) any |= w[k];
        if (any) break; /* (the walk below finds it in [i, end)) */
        i = end;
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, p + 4 * i, sizeof u);
        if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
    return n;
}

static void VEC(scale)(float *o, float s, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) o[i] = s * x[i];
}

static void VEC(add)(float *a, const void *p, size_t n)
{
    const unsigned char *q = p;
    for (size_t i = 0; i < n; i++) a[i] += VEC(load)(q + 4 * i);
}

static void VEC(add_diff)(float *a, const void *p, const float *mine, size_t n)
{
    const unsigned char *q = p;
    for (size_t i = 0; i < n; i++) a[i] += VEC(load)(q + 4 * i) - mine[i];
}
