/* XXH3-64 with xxHash's AVX2 kernels: its inline implementation (the
 * xxhash.h of libxxhash-dev) compiled for AVX2 in this file alone. Debian's
 * libxxhash is built for baseline x86-64 and runs the SSE2 kernels, half
 * the speed of these on data in the cache, where the dense path's fused
 * passes hash it (docs/performance.md). The hash is the same whichever
 * kernels compute it. Called only where the processor has AVX2 (wire.c). */
#define XXH_INLINE_ALL
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "src/wire/xxh3_avx2.h"

void sfb__xxh3_avx2_reset(void *state)
{
    XXH3_64bits_reset(state);
}

void sfb__xxh3_avx2_update(void *state, const void *p, size_t n)
{
    XXH3_64bits_update(state, p, n);
}

uint64_t sfb__xxh3_avx2_digest(const void *state)
{
    return XXH3_64bits_digest(state);
}
