/* The process's BLAS: its thread count and its working memory. Here
 * because models/ (and reconstruction) are the only BLAS callers. */
#include <sfb/sf.h>

#include "src/base/common.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

/* OpenBLAS's working buffer of each thread that runs it (BUFFER_SIZE of
 * OpenBLAS 0.3 on x86-64: 32 << 22 bytes; the 128 MiB mapping its threads
 * make at load time), and room for the check's own matrices. */
#define BUFFER_MIB 128u
#define SLACK_MIB 1u
/* The check's sgemm: above OpenBLAS's small-matrix kernels (MNK > 100³),
 * which need no buffer, so it takes the one later calls use. */
#define PROBE_N 128

static _Thread_local int reserved;

void sfb_set_blas_threads(int n)
{
    openblas_set_num_threads(n > 0 ? n : 1);
}

/* The address space this process maps now, in MiB. */
static unsigned long long mapped_mib(void)
{
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu", &pages) != 1) pages = 0;
        fclose(f);
    }
    return pages * (unsigned long long)sysconf(_SC_PAGESIZE) >> 20;
}

/* How many of OpenBLAS's own threads (n - 1 for n BLAS threads) have not
 * mapped their buffer yet: they map it as they start, and one that found
 * no room retries forever. An estimate from the size of what is mapped,
 * as what else is mapped is not known. */
static unsigned long long lacking(unsigned long long used, int n)
{
    unsigned long long pool = n > 1 ? (unsigned long long)n - 1 : 0;
    return pool - SFB_MIN(pool, used / BUFFER_MIB);
}

/* 0 when the limit leaves room for this thread's buffer and those OpenBLAS's
 * threads still lack, else -ENOMEM saying what is needed. */
static int room(unsigned long long limit, int n)
{
    unsigned long long used = mapped_mib(), more = lacking(used, n);
    size_t len = (size_t)((1 + more) * BUFFER_MIB + SLACK_MIB) << 20;
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
        munmap(p, len);
        return 0;
    }
    unsigned long long need = used + (len >> 20);
    return sfb__error(-ENOMEM, "cannot allocate BLAS's working memory: the address-space limit "
                      "(ulimit -v) is %llu MiB and %llu MiB of it are mapped; OpenBLAS maps "
                      "%u MiB for each thread that runs it (this one and its own %d), "
                      "retrying a failed mapping forever, and %llu more do not fit: raise the "
                      "limit to at least %llu MiB (ulimit -v %llu), or lift it",
                      limit >> 20, used, BUFFER_MIB, n > 1 ? n - 1 : 0, 1 + more, need,
                      need << 10);
}

int sfb_blas_reserve(void)
{
    SFB_ENTER();
    struct rlimit rl;
    if (reserved || getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
    /* OpenBLAS's threads map their buffers as they start; its slots are
     * shared, and one that starts after the sgemm below would take the
     * buffer it leaves free: let them take theirs first (a second at most:
     * then they are stuck for want of room, which the check says). */
    int n = openblas_get_num_threads();
    for (int i = 0; i < 200 && lacking(mapped_mib(), n); i++) sfb__sleep(0.005);
    int ret = room((unsigned long long)rl.rlim_cur, n);
    if (ret) return ret;
    float *m = calloc(3 * (size_t)PROBE_N * PROBE_N, sizeof *m);
    if (!m) return sfb__error(-ENOMEM, "cannot allocate BLAS's working memory: out of memory");
    /* on this thread alone: never waiting for OpenBLAS's threads, one of
     * which may still be mapping its buffer; alpha and beta of no special
     * case (OpenBLAS's direct kernels need none) */
    if (n > 1) openblas_set_num_threads(1);
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, PROBE_N, PROBE_N, PROBE_N, 0.5f, m,
                PROBE_N, m + PROBE_N * PROBE_N, PROBE_N, 1.0f, m + 2 * PROBE_N * PROBE_N, PROBE_N);
    if (n > 1) openblas_set_num_threads(n);
    free(m);
    reserved = 1;
    return 0;
}
