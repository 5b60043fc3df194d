/* Explicit little-endian encoding of fixed-width integers and floats, for
 * everything that goes to disk or on the wire. */
#ifndef SFB_SRC_BYTES_H
#define SFB_SRC_BYTES_H

#include <stdint.h>
#include <string.h>

static inline void sfb__put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void sfb__put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void sfb__put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t sfb__get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t sfb__get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t sfb__get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline void sfb__put_f64(uint8_t *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    sfb__put_u64(p, v);
}
static inline double sfb__get_f64(const uint8_t *p)
{
    uint64_t v = sfb__get_u64(p);
    double d;
    memcpy(&d, &v, 8);
    return d;
}

/* float32 arrays: a plain copy on little-endian hosts, byte swaps elsewhere. */
static inline void sfb__put_f32s(uint8_t *dst, const float *src, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, n * sizeof(float));
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, &src[i], 4);
        sfb__put_u32(dst + 4 * i, v);
    }
#endif
}
static inline void sfb__get_f32s(float *dst, const uint8_t *src, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, n * sizeof(float));
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t v = sfb__get_u32(src + 4 * i);
        memcpy(&dst[i], &v, 4);
    }
#endif
}

#endif
