/* Test helpers for the data tests: small file writers in the test's private
 * temporary directory (tmp_dir.h). */
#ifndef SFB_TEST_DATA_UTIL_H
#define SFB_TEST_DATA_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "tmp_dir.h"

/* Writes `len` bytes (gzip-compressed if gz) to tu_path(name); returns the
 * path or NULL. */
static const char *tu_write(const char *name, const void *data, size_t len, int gz)
{
    const char *path = tu_path(name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f) return NULL;
        int ok = len == 0 || gzwrite(f, data, (unsigned)len) == (int)len;
        if (gzclose(f) != Z_OK || !ok) return NULL;
        return path;
    }
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    int ok = fwrite(data, 1, len, f) == len;
    if (fclose(f) != 0 || !ok) return NULL;
    return path;
}

static const char *tu_write_str(const char *name, const char *text)
{
    return tu_write(name, text, strlen(text), 0);
}

#endif
