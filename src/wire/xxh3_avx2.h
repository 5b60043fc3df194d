/* XXH3-64's streaming calls on xxHash's AVX2 kernels (xxh3_avx2.c), for a
 * processor that has AVX2; `state` is an XXH3_state_t. Built where the
 * compiler takes -mavx2 on x86-64 (config.h: SFB_AVX2). */
#ifndef SFB_WIRE_XXH3_AVX2_H
#define SFB_WIRE_XXH3_AVX2_H

#include <stddef.h>
#include <stdint.h>

void sfb__xxh3_avx2_reset(void *state);
void sfb__xxh3_avx2_update(void *state, const void *p, size_t n);
uint64_t sfb__xxh3_avx2_digest(const void *state);

#endif
