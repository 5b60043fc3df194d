/* sfb/vec.h: the baseline loops, and the choice of AVX2's where the
 * processor has them, made once when the library is loaded. */
#include "config.h"
#include "sfb/vec.h"

#define VEC(name) name##_base
#define VEC_BYTES 16
#include "sfb/vec_kernels.h"

const struct sfb__vec_ops sfb__vec_base = {first_nonfinite_base, scale_base, add_base,
                                           add_diff_base};

#if SFB_AVX2
static const struct sfb__vec_ops *avx2;

__attribute__((constructor)) static void vec_pick(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) avx2 = &sfb__vec_avx2_table;
}
#else
static const struct sfb__vec_ops *const avx2 = NULL;
#endif

const struct sfb__vec_ops *sfb__vec_avx2(void)
{
    return avx2;
}

static const struct sfb__vec_ops *ops(void)
{
    return avx2 ? avx2 : &sfb__vec_base;
}

size_t sfb__first_nonfinite(const void *v, size_t n)
{
    return ops()->first_nonfinite(v, n);
}

void sfb__vec_scale(float *o, float s, const float *x, size_t n)
{
    ops()->scale(o, s, x, n);
}

void sfb__vec_add(float *a, const void *p, size_t n)
{
    ops()->add(a, p, n);
}

void sfb__vec_add_diff(float *a, const void *p, const float *mine, size_t n)
{
    ops()->add_diff(a, p, mine, n);
}
