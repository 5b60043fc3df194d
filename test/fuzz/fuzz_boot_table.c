/* Rendezvous TABLE decoding (sfb__boot_unpack_table): what a joiner does
 * with the allgather table rank 0 sends back.
 *
 * Input: byte 0 = world (0 → 1), then the table payload (world u32 lengths,
 * then the blobs). On success the lengths must add up to exactly the
 * payload, each ≤ SFB__BOOTSTRAP_WIRE_BLOB, and the blobs must sit back to
 * back at the front of the buffer in rank order, byte for byte what
 * followed the length list. */
#include "fuzz.h"

#include "src/boot/bootstrap.h"
#include "src/base/bytes.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int world = data[0] ? data[0] : 1;
    data++;
    size--;
    uint8_t *t = malloc(size ? size : 1);
    if (!t) abort();
    memcpy(t, data, size);
    size_t lens[256];
    void *all = NULL;
    int r = sfb__boot_unpack_table(world, 1, t, size, &all, lens); /* owns t */
    if (r) {
        FUZZ_CHECK(r < 0 && all == NULL);
        fuzz_note(r);
        return 0;
    }
    size_t head = 4 * (size_t)world, sum = 0;
    FUZZ_CHECK(all == t && size >= head);
    for (int i = 0; i < world; i++) {
        FUZZ_CHECK(lens[i] == sfb__get_u32(data + 4 * (size_t)i));
        FUZZ_CHECK(lens[i] <= SFB__BOOTSTRAP_WIRE_BLOB);
        sum += lens[i];
    }
    FUZZ_CHECK(sum == size - head);
    FUZZ_CHECK(memcmp(all, data + head, sum) == 0);
    free(all);
    return 0;
}
