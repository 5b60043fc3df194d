/* Frame decoder (sfb__wire_decode, BUNDLE iteration): untrusted network
 * input. The job allows two SF shapes, world 8, and S ≤ 64. On success the
 * frame must be exactly header + payload_len bytes, the payload inside the
 * buffer, every header field within the job's limits; every inner frame of a
 * bundle must lie inside the bundle and decode the same way on its own. */
#include "fuzz.h"

#include "src/wire/wire.h"

#include <string.h>

static const struct sfb__wire_shape shapes[] = {{10, 785}, {3, 4}};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* malloc'd exactly: ASan catches a read one byte past the frame. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) abort();
    memcpy(buf, data, size);
    struct sfb__wire_stats st;
    memset(&st, 0, sizeof st);
    struct sfb__wire_job job = {.job_key = 0x1122334455667788ull, .world_size = 8,
                               .shapes = shapes, .nshapes = 2, .max_s = 64,
                               .max_payload = 1 << 20, .stats = &st};
    struct sfb__wire_hdr h;
    const uint8_t *payload;
    int r = sfb__wire_decode(&job, buf, size, 1, &h, &payload);
    if (r) {
        FUZZ_CHECK(r < 0);
        fuzz_note(r);
        free(buf);
        return 0;
    }
    FUZZ_CHECK(size == SFB_WIRE_HDR_SIZE + h.payload_len);
    FUZZ_CHECK(payload == buf + SFB_WIRE_HDR_SIZE);
    FUZZ_CHECK(h.job_key == job.job_key && h.origin < 8 && h.sender < 8);
    FUZZ_CHECK(h.payload_len <= job.max_payload);
    if (h.type == SFB_WIRE_SF) {
        FUZZ_CHECK(h.matrix < 2 && h.k == shapes[h.matrix].k && h.d == shapes[h.matrix].d);
        FUZZ_CHECK(h.s >= 1 && h.s <= 64);
    }
    if (h.type == SFB_WIRE_BUNDLE) {
        struct sfb__wire_iter it;
        const uint8_t *inner, *ip;
        size_t inner_len;
        struct sfb__wire_hdr ih, again;
        sfb__wire_bundle_begin(&it, payload, h.payload_len, 1);
        while ((r = sfb__wire_bundle_next(&job, &it, &inner, &inner_len, &ih, &ip)) == 1) {
            FUZZ_CHECK(inner >= payload && inner + inner_len <= payload + h.payload_len);
            FUZZ_CHECK(ih.type != SFB_WIRE_BUNDLE);
            FUZZ_CHECK(inner_len == SFB_WIRE_HDR_SIZE + ih.payload_len);
            const uint8_t *p2;
            FUZZ_CHECK(sfb__wire_decode(&job, inner, inner_len, 1, &again, &p2) == 0);
            FUZZ_CHECK(again.checksum == ih.checksum && p2 == ip);
        }
        FUZZ_CHECK(r <= 0);
        if (r < 0) fuzz_note(r);
    }
    free(buf);
    return 0;
}
