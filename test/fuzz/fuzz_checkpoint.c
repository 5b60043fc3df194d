/* Checkpoint loader (sfb__ckpt_decode, src/train/checkpoint.c).
 *
 * Input: byte 0 = flags, the rest is the file. Flag bit 0 replaces the last
 * 8 bytes with the correct XXH3-64 of everything before them, bit 1 does the
 * same for the embedded model file (where the header's lengths place it),
 * so mutations get past the checksums to the field and model checks. On
 * success the decoded fields must be the file's: rank, world, clock, cursor,
 * the configuration text and its hash, the model state blob, and the
 * embedded model's clock. */
#include "fuzz.h"

#include "src/base/bytes.h"
#include "src/train/checkpoint.h"

#include <string.h>
#include <xxhash.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int flags = data[0];
    data++;
    size--;
    uint8_t *file = malloc(size ? size : 1);
    if (!file) abort();
    memcpy(file, data, size);
    if ((flags & 2) && size >= SFB__CKPT_HDR + 8) {
        uint64_t off = SFB__CKPT_HDR + (uint64_t)sfb__get_u32(file + 92) + sfb__get_u32(file + 96);
        uint64_t mlen = sfb__get_u64(file + 104);
        if (mlen >= 8 && mlen <= size && off <= size - mlen) {
            uint8_t *m = file + off;
            sfb__put_u64(m + mlen - 8, XXH3_64bits(m, (size_t)mlen - 8));
        }
    }
    if ((flags & 1) && size >= 8) sfb__put_u64(file + size - 8, XXH3_64bits(file, size - 8));

    struct sfb__ckpt *c = malloc(sizeof *c);
    if (!c) abort();
    int r = sfb__ckpt_decode(file, size, "fuzz", c);
    if (r) {
        FUZZ_CHECK(r < 0 && c->model == NULL);
        fuzz_note(r);
        FUZZ_CHECK(sfb_last_error() != NULL && sfb_last_error()[0] != '\0');
        free(c);
        free(file);
        return 0;
    }
    FUZZ_CHECK(c->model != NULL && size >= SFB__CKPT_HDR + 8);
    FUZZ_CHECK(memcmp(file, SFB__CKPT_MAGIC, 8) == 0);
    FUZZ_CHECK(sfb__get_u64(file + size - 8) == XXH3_64bits(file, size - 8));
    FUZZ_CHECK(c->st.rank == sfb__get_u32(file + 12) && c->st.world == sfb__get_u32(file + 16));
    FUZZ_CHECK(c->st.rank < c->st.world);
    FUZZ_CHECK(c->st.clock == (int64_t)sfb__get_u64(file + 24) && c->st.clock >= 0);
    FUZZ_CHECK(c->st.cursor == sfb__get_u64(file + 32));
    size_t clen = sfb__get_u32(file + 92);
    FUZZ_CHECK(strlen(c->config) == clen);
    FUZZ_CHECK(memcmp(c->config, file + SFB__CKPT_HDR, clen) == 0);
    FUZZ_CHECK(c->config_hash == XXH3_64bits(c->config, clen));
    FUZZ_CHECK(c->st.model_state_len == sfb__get_u32(file + 96));
    FUZZ_CHECK(memcmp(c->st.model_state, file + SFB__CKPT_HDR + clen, c->st.model_state_len) == 0);
    FUZZ_CHECK(sfb_model_n_matrices(c->model) >= 1);
    sfb__ckpt_free(c);
    FUZZ_CHECK(c->model == NULL);
    free(c);
    free(file);
    return 0;
}
