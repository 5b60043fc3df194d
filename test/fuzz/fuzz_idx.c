/* IDX reader (sfb_idx_read via two memfd paths).
 *
 * Input: byte 0 = classes (0: infer), bytes 1-2 = little-endian length L of
 * the images file, then L bytes of images file (clamped to what is there),
 * the rest is the labels file. Either may be gzip (zlib reads both kinds).
 * On success: n·d pixels in [0, 1], each one byte of an images file of
 * ≥ 16 + n·d bytes uncompressed, labels in [0, k), k = classes when given. */
#include "fuzz.h"

#include <sfb/data.h>

#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    uint32_t classes = data[0];
    size_t ilen = (size_t)data[1] | (size_t)data[2] << 8;
    data += 3;
    size -= 3;
    if (ilen > size) ilen = size;
    const char *im = fuzz_file_set(0, data, ilen);
    const char *lb = fuzz_file_set(1, data + ilen, size - ilen);
    struct sfb_dataset ds;
    int r = sfb_idx_read(im, lb, classes, &ds);
    if (r) {
        FUZZ_CHECK(r < 0);
        fuzz_note(r);
        FUZZ_CHECK(ds.x == NULL && ds.labels == NULL && ds.n == 0);
        FUZZ_CHECK(sfb_last_error() != NULL && sfb_last_error()[0] != '\0');
        return 0;
    }
    FUZZ_CHECK(ds.sparse == 0 && ds.x && ds.labels);
    FUZZ_CHECK(ds.n >= 1 && ds.d >= 1 && ds.k >= 1);
    if (classes) FUZZ_CHECK(ds.k == classes);
    /* gzip can expand ~1000x, so only a loose bound relates n·d to the input. */
    FUZZ_CHECK(ds.n * ds.d <= (uint64_t)1100 * (ilen + 64));
    for (uint64_t i = 0; i < ds.n * ds.d; i++)
        FUZZ_CHECK(ds.x[i] >= 0.0f && ds.x[i] <= 1.0f);
    for (uint64_t i = 0; i < ds.n; i++)
        FUZZ_CHECK(ds.labels[i] >= 0 && (uint32_t)ds.labels[i] < ds.k);
    sfb_dataset_free(&ds);
    return 0;
}
