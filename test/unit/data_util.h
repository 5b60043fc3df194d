/* Test helpers for the data tests: a private temporary directory removed at
 * exit, and small file writers. */
#ifndef SFB_TEST_DATA_UTIL_H
#define SFB_TEST_DATA_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char tu_dir[512];
static char tu_files[256][600];
static int tu_nfiles;

static void tu_cleanup(void)
{
    for (int i = 0; i < tu_nfiles; i++) unlink(tu_files[i]);
    if (tu_dir[0]) rmdir(tu_dir);
}

/* Path of `name` inside the test's temporary directory (created on first
 * use). The returned string stays valid until exit. */
static const char *tu_path(const char *name)
{
    if (!tu_dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(tu_dir, sizeof tu_dir, "%s/sfb-test-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tu_dir)) {
            perror("mkdtemp");
            exit(1);
        }
        atexit(tu_cleanup);
    }
    for (int i = 0; i < tu_nfiles; i++) {
        const char *slash = strrchr(tu_files[i], '/');
        if (strcmp(slash + 1, name) == 0) return tu_files[i];
    }
    if (tu_nfiles == 256) {
        fprintf(stderr, "too many temp files\n");
        exit(1);
    }
    snprintf(tu_files[tu_nfiles], sizeof tu_files[0], "%s/%s", tu_dir, name);
    return tu_files[tu_nfiles++];
}

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
