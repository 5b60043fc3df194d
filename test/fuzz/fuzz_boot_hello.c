/* Rendezvous HELLO decoding and checking (sfb__boot_hdr_decode,
 * sfb__boot_check_hello): what rank 0 does with the first 32 bytes a
 * stranger sends to its listening port.
 *
 * Input: 32 header bytes, then (optional) rank 0's view: u64 key, a byte
 * whose bit 0 = key_given, u16 world (0 → 4), then one "already joined"
 * flag byte per rank (missing ones are 0). On acceptance every field must
 * be what a valid hello carries; on rejection the reason must be a
 * non-empty string. decode ∘ encode must be the identity on the header. */
#include "fuzz.h"

#include <sfb/common.h>
#include "src/boot/bootstrap.h"
#include "src/base/bytes.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < SFB__BOOT_HDR_SIZE) return 0;
    struct sfb__boot_hdr h;
    sfb__boot_hdr_decode(data, &h);
    uint8_t again[SFB__BOOT_HDR_SIZE];
    sfb__boot_hdr_encode(&h, again);
    FUZZ_CHECK(memcmp(again, data, SFB__BOOT_HDR_SIZE) == 0);

    const uint8_t *p = data + SFB__BOOT_HDR_SIZE;
    size_t rest = size - SFB__BOOT_HDR_SIZE;
    uint64_t key = 0x1234567890abcdefull;
    int key_given = 1;
    uint32_t world = 4;
    if (rest >= 11) {
        key = sfb__get_u64(p);
        key_given = p[8] & 1;
        world = sfb__get_u16(p + 9);
        if (world == 0) world = 4;
        p += 11;
        rest -= 11;
    }
    unsigned char *seen = calloc(world, 1);
    if (!seen) abort();
    for (size_t i = 0; i < rest && i < world; i++)
        seen[i] = p[i] & 1;

    char why[256];
    memset(why, 'X', sizeof why);
    int r = sfb__boot_check_hello(&h, key, key_given, world, seen, why, sizeof why);
    if (r == 0) {
        FUZZ_CHECK(h.magic == SFB__BOOT_MAGIC && h.version == SFB__BOOT_VERSION);
        FUZZ_CHECK(h.type == SFB__BOOT_HELLO && h.world == world);
        FUZZ_CHECK(h.key == (key_given ? key : 0));
        FUZZ_CHECK(h.rank >= 1 && h.rank < world && !seen[h.rank]);
        FUZZ_CHECK(h.seq == 0 && h.len == 0);
    } else {
        FUZZ_CHECK(r < 0);
        FUZZ_CHECK(memchr(why, '\0', sizeof why) != NULL && why[0] != '\0');
        fuzz_rejected = 1;
        if (fuzz_verbose) dprintf(2, "  -> %d (%s): %s\n", r, sfb_strerror(r), why);
    }
    free(seen);
    return 0;
}
