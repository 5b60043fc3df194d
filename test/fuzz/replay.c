/* Replay driver: main() for a fuzz target built without libFuzzer (the normal
 * gcc build). Runs LLVMFuzzerTestOneInput on every file named on the command
 * line and every regular file in every directory named (sorted, so runs are
 * reproducible). A crash or abort() is the failure, and so is a verdict
 * that contradicts the file name (ok-* accepted, bad-* rejected; see
 * fuzz.h); finding no input at all fails too, so a moved corpus cannot turn
 * the test into a no-op. */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        dprintf(2, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        dprintf(2, "replay: %s: read failed\n", path);
        free(buf);
        return -1;
    }
    if (fuzz_verbose) dprintf(2, "%s\n", path);
    /* An exact-size copy, so ASan sees reads past the input's end. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) abort();
    memcpy(exact, buf, len);
    free(buf);
    fuzz_rejected = 0;
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    /* Seeds named ok-* / bad-* also pin the verdict, so a parser that starts
     * accepting a bad input (or rejecting a good one) fails the test. */
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!strncmp(base, "ok-", 3) && fuzz_rejected) {
        dprintf(2, "replay: %s: rejected, but ok-* seeds must be accepted\n", path);
        return -1;
    }
    if (!strncmp(base, "bad-", 4) && !fuzz_rejected) {
        dprintf(2, "replay: %s: accepted, but bad-* seeds must be rejected\n", path);
        return -1;
    }
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, unsigned long *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        dprintf(2, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) abort();
            names = nn;
        }
        size_t l = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(l);
        if (!names[n]) abort();
        snprintf(names[n], l, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, by_name);
    int r = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(names[i]))
                r = -1;
            else
                (*count)++;
        }
        free(names[i]);
    }
    free(names);
    return r;
}

int main(int argc, char **argv)
{
    fuzz_verbose = getenv("SFB_FUZZ_VERBOSE") != NULL;
    LLVMFuzzerInitialize(&argc, &argv);
    unsigned long count = 0;
    int r = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            dprintf(2, "replay: %s: %s\n", argv[i], strerror(errno));
            r = -1;
        } else if (S_ISDIR(st.st_mode)) {
            if (run_dir(argv[i], &count)) r = -1;
        } else if (run_file(argv[i]) == 0) {
            count++;
        } else {
            r = -1;
        }
    }
    dprintf(2, "replay: %lu inputs\n", count);
    if (count == 0) {
        dprintf(2, "replay: no inputs found\n");
        return 1;
    }
    return r ? 1 : 0;
}
