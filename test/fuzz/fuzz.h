/* Shared helpers for the fuzz targets (test/fuzz/fuzz_*.c).
 *
 * Every target defines LLVMFuzzerTestOneInput. Built with clang and
 * -Dfuzzing=true it links libFuzzer; otherwise replay.c supplies main() and
 * runs the committed corpus, so every CI run replays it.
 *
 * FUZZ_CHECK aborts on a violated invariant: a parser that returns 0 with
 * inconsistent output is a bug the fuzzer must report, not only a crash. */
#ifndef SFB_TEST_FUZZ_H
#define SFB_TEST_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            dprintf(2, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* An in-memory file (memfd) reused across iterations: fuzz_file_set replaces
 * its contents and returns a path ("/proc/self/fd/N") that a path-taking
 * parser can open. `slot` picks one of a few independent files. Aborts if
 * the memfd cannot be made (an environment problem, not a finding). */
const char *fuzz_file_set(int slot, const void *data, size_t size);

/* Set by replay.c when SFB_FUZZ_VERBOSE is set: fuzz_note then prints each
 * rejection (code and sfb_last_error()) to fd 2, which is how the table of
 * bad inputs in docs/robustness.md is made. */
extern int fuzz_verbose;
/* Records that the parser rejected this input (and prints it when verbose).
 * replay.c clears fuzz_rejected before each input and checks it against the
 * file name: "ok-*" seeds must be accepted, "bad-*" seeds rejected, others
 * (regress-*, fuzzer finds) only must not crash. */
extern int fuzz_rejected;
void fuzz_note(int code);

/* Sends the parsers' stdio chatter to /dev/null (sanitizer reports use fd 2
 * directly and still show). */
void fuzz_quiet_stdio(void);

#endif
