/* sfb/vec.h's loops on AVX2 (this file alone is built with -mavx2), for
 * vec.c to call where the processor has AVX2. */
#include "sfb/vec.h"

#define VEC(name) name##_avx2
#define VEC_BYTES 32
#include "sfb/vec_kernels.h"

const struct sfb__vec_ops sfb__vec_avx2_table = {first_nonfinite_avx2, scale_avx2, add_avx2,
                                                 add_diff_avx2};
