/* libsvm/svmlight reader (sfb_libsvm_read via a memfd path).
 *
 * An optional first line "#cfg BASE DIM CLASSES" (BASE: a = auto, 0, 1; DIM
 * and CLASSES: 0 = infer) picks the settings; to the parser it is a comment,
 * so every input is also a plain libsvm file. On success the dataset must be
 * well-formed CSR: row_ptr from 0, non-decreasing, ending at nnz; columns
 * < d and strictly increasing per row; labels in [0, k); finite values; d
 * and k equal to the settings when given. */
#include "fuzz.h"

#include <sfb/data.h>

#include <math.h>
#include <string.h>

static void settings_from(const uint8_t *data, size_t size, struct sfb_libsvm_settings *s)
{
    sfb_libsvm_default_settings(s);
    s->use_meta = 0; /* "/proc/self/fd/N.meta" never exists anyway */
    if (size < 5 || memcmp(data, "#cfg ", 5) != 0) return;
    char line[64];
    size_t n = 0;
    while (5 + n < size && n + 1 < sizeof line && data[5 + n] != '\n') {
        line[n] = (char)data[5 + n];
        n++;
    }
    line[n] = '\0';
    char base = 'a';
    unsigned long dim = 0, classes = 0;
    if (sscanf(line, "%c %lu %lu", &base, &dim, &classes) < 1) return;
    s->index_base = base == '0' ? SFB_INDEX_0 : base == '1' ? SFB_INDEX_1 : SFB_INDEX_AUTO;
    s->dim = (uint32_t)dim;
    s->classes = (uint32_t)classes;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sfb_libsvm_settings s;
    settings_from(data, size, &s);
    const char *path = fuzz_file_set(0, data, size);
    struct sfb_dataset ds;
    int r = sfb_libsvm_read(path, &s, &ds);
    if (r) {
        /* Nothing half-loaded on failure. */
        FUZZ_CHECK(r < 0);
        fuzz_note(r);
        FUZZ_CHECK(ds.labels == NULL && ds.row_ptr == NULL && ds.col == NULL && ds.n == 0);
        FUZZ_CHECK(sfb_last_error() != NULL && sfb_last_error()[0] != '\0');
        return 0;
    }
    FUZZ_CHECK(ds.sparse == 1);
    FUZZ_CHECK(ds.n >= 1);
    FUZZ_CHECK(ds.labels && ds.row_ptr && ds.col && ds.val);
    if (s.dim) FUZZ_CHECK(ds.d == s.dim);
    if (s.classes) FUZZ_CHECK(ds.k == s.classes);
    FUZZ_CHECK(ds.k >= 1);
    FUZZ_CHECK(ds.row_ptr[0] == 0);
    /* Each line holds at least a label, so there are at most size/1 rows, and
     * every pair is at least 4 bytes ("1:1 "). */
    FUZZ_CHECK(ds.n <= size);
    uint64_t nnz = sfb_dataset_nnz(&ds);
    FUZZ_CHECK(nnz == ds.row_ptr[ds.n]);
    FUZZ_CHECK(nnz <= size / 3);
    for (uint64_t i = 0; i < ds.n; i++) {
        FUZZ_CHECK(ds.labels[i] >= 0 && (uint32_t)ds.labels[i] < ds.k);
        FUZZ_CHECK(ds.row_ptr[i] <= ds.row_ptr[i + 1]);
        for (uint64_t j = ds.row_ptr[i]; j < ds.row_ptr[i + 1]; j++) {
            FUZZ_CHECK(ds.col[j] < ds.d);
            FUZZ_CHECK(j == ds.row_ptr[i] || ds.col[j] > ds.col[j - 1]);
            FUZZ_CHECK(isfinite(ds.val[j]));
        }
    }
    sfb_dataset_free(&ds);
    return 0;
}
