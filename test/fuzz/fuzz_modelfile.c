/* Model file loader (sfb_model_load via a memfd path).
 *
 * Input: byte 0 = flags, the rest is the file. Flag bit 0 replaces the last
 * 8 bytes with the correct XXH3-64 of everything before them, so mutations
 * get past the checksum and reach the header and shape checks (without it
 * the fuzzer would only ever exercise the checksum). On success every
 * matrix must hold exactly the file's bytes at its offset (header of 96, 80
 * or 64 + 8n bytes, matrices back to back, 8-byte checksum), shapes must be
 * what the header says, and the clock must be the header's. */
#include "fuzz.h"

#include <sfb/model.h>
#include "src/base/bytes.h"

#include <string.h>
#include <xxhash.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int fix_sum = data[0] & 1;
    data++;
    size--;
    uint8_t *file = malloc(size ? size : 1);
    if (!file) abort();
    memcpy(file, data, size);
    if (fix_sum && size >= 8) sfb__put_u64(file + size - 8, XXH3_64bits(file, size - 8));
    const char *path = fuzz_file_set(0, file, size);

    struct sfb_model *m = NULL;
    int64_t clock = -12345;
    int r = sfb_model_load(&m, path, &clock);
    if (r) {
        FUZZ_CHECK(r < 0 && m == NULL && clock == -12345);
        fuzz_note(r);
        FUZZ_CHECK(sfb_last_error() != NULL && sfb_last_error()[0] != '\0');
        free(file);
        return 0;
    }
    FUZZ_CHECK(m != NULL && size >= 72);
    FUZZ_CHECK(memcmp(file, "SFBMODL1", 8) == 0);
    uint32_t version = sfb__get_u32(file + 8);
    FUZZ_CHECK(version >= 1 && version <= 3);
    size_t hfix = version == 1 ? 64 : version == 2 ? 80 : 96;
    uint32_t n = sfb_model_n_matrices(m);
    FUZZ_CHECK(n == sfb__get_u32(file + 12) && n >= 1 && n <= SFB_MODEL_MAX_MATRICES);
    FUZZ_CHECK(clock == (int64_t)sfb__get_u64(file + 56));
    FUZZ_CHECK(sfb__get_u64(file + size - 8) == XXH3_64bits(file, size - 8));
    const struct sfb_model_settings *s = sfb_model_get_settings(m);
    FUZZ_CHECK(s->d == sfb__get_u32(file + 32));
    FUZZ_CHECK(strncmp(s->kind, (const char *)file + 16, 16) == 0);
    if (version == 3) { /* the hidden sizes the model was built from */
        FUZZ_CHECK(s->hidden.n == sfb__get_u32(file + 80) && s->hidden.n <= SFB_MODEL_LIST_MAX);
        for (uint32_t i = 0; i < s->hidden.n; i++)
            FUZZ_CHECK(s->hidden.v[i] == sfb__get_u32(file + 84 + 4 * i));
    }
    size_t off = hfix + 8 * (size_t)n;
    for (uint32_t i = 0; i < n; i++) {
        const struct sfb_matrix *a = sfb_model_matrix(m, i);
        FUZZ_CHECK(a->rows == sfb__get_u32(file + hfix + 8 * i));
        FUZZ_CHECK(a->cols == sfb__get_u32(file + hfix + 8 * i + 4));
        size_t bytes = (size_t)a->rows * a->cols * 4;
        FUZZ_CHECK(off + bytes + 8 <= size);
        for (size_t j = 0; j < (size_t)a->rows * a->cols; j++) {
            uint32_t bits;
            memcpy(&bits, &a->data[j], 4);
            FUZZ_CHECK(bits == sfb__get_u32(file + off + 4 * j));
        }
        off += bytes;
    }
    FUZZ_CHECK(off + 8 == size);
    sfb_model_close(&m);
    free(file);
    return 0;
}
