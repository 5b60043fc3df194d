/* memfd-backed files for path-taking parsers; see fuzz.h. */
#include "fuzz.h"

#include <sfb/common.h>

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SLOTS 4

static int fds[SLOTS] = {-1, -1, -1, -1};
static char paths[SLOTS][32];

const char *fuzz_file_set(int slot, const void *data, size_t size)
{
    if (slot < 0 || slot >= SLOTS) abort();
    if (fds[slot] < 0) {
        fds[slot] = memfd_create("sfb-fuzz", MFD_CLOEXEC);
        if (fds[slot] < 0) {
            perror("fuzz: memfd_create");
            abort();
        }
        snprintf(paths[slot], sizeof paths[slot], "/proc/self/fd/%d", fds[slot]);
    }
    /* Each open() of the /proc path gets its own offset, so truncating and
     * rewriting in place is all a new iteration needs. */
    if (ftruncate(fds[slot], 0) != 0) abort();
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(fds[slot], (const char *)data + done, size - done, (off_t)done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
    return paths[slot];
}

void fuzz_quiet_stdio(void)
{
    static int done;
    if (done) return;
    done = 1;
    FILE *null = fopen("/dev/null", "w");
    if (!null) return;
    /* glibc's stdout/stderr are assignable; fd 1 and 2 stay as they were. */
    fflush(stdout);
    fflush(stderr);
    stdout = null;
    stderr = null;
}

int fuzz_verbose;
int fuzz_rejected;

void fuzz_note(int code)
{
    fuzz_rejected = 1;
    if (!fuzz_verbose) return;
    const char *e = sfb_last_error();
    dprintf(2, "  -> %d (%s): %s\n", code, sfb_strerror(code), e ? e : "");
}
