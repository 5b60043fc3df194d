/* A test's private temporary directory, removed with its files at exit:
 * tu_path(name) names a file in it. */
#ifndef SFB_TEST_TMP_DIR_H
#define SFB_TEST_TMP_DIR_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

#endif
