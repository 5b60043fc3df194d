/* The process's BLAS: its thread count and its working memory. Here
 * because models/ (and reconstruction) are the only BLAS callers. */
#include <sfb/sf.h>

#include "src/factor/blas.h"
#include "src/base/util.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

/* OpenBLAS's working buffer of each thread that runs it (BUFFER_SIZE of
 * OpenBLAS 0.3 on x86-64: 32 << 22 bytes; the 128 MiB mapping its threads
 * make at load time), and room for the check's own matrices. */
#define BUFFER_MIB 128u
#define SLACK_MIB 1u
/* The check's sgemm, (PROBE_N · threads)² × PROBE_N: above OpenBLAS's
 * small-matrix kernels (MNK > 100³, they need no buffer) and its
 * single-thread threshold, with PROBE_N rows for each of its threads (up to
 * PROBE_MAX_THREADS: 16 MiB of matrices). */
#define PROBE_N 128
#define PROBE_MAX_THREADS 16

static _Thread_local int reserved;

void sfb_set_blas_threads(int n)
{
    openblas_set_num_threads(n > 0 ? n : 1);
}

const char *sfb_blas_core(void)
{
    const char *name = openblas_get_corename();
    return name && *name ? name : "unknown";
}

/* OpenBLAS's kernel sets that use AVX2 and FMA (its core names): any other
 * does a fraction of their multiply-adds a cycle. */
static int wide_core(const char *name)
{
    static const char *const wide[] = {"Haswell",    "Zen",           "SkylakeX",
                                       "Cooperlake", "SapphireRapids", "Excavator"};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
        if (!strcasecmp(name, wide[i])) return 1;
    return 0;
}

const char *sfb_blas_better_core(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (getenv("OPENBLAS_CORETYPE") || wide_core(sfb_blas_core())) return NULL;
    __builtin_cpu_init(); /* (the features the OS enabled, XGETBV included) */
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    return "Haswell";
#else
    return NULL;
#endif
}

float sfb__blas_norm2(int n, const float *x)
{
    return cblas_snrm2(n, x, 1);
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
    unsigned long long used = sfb__mapped_mib(), more = lacking(used, n);
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
    /* OpenBLAS's threads map their buffers as they start: let those
     * starting take theirs before counting what is mapped (a second at
     * most: then they are stuck for want of room, which the check says). */
    int n = openblas_get_num_threads();
    for (int i = 0; i < 200 && lacking(sfb__mapped_mib(), n); i++) sfb__sleep(0.005);
    int ret = room((unsigned long long)rl.rlim_cur, n);
    if (ret) return ret;
    /* On every thread OpenBLAS runs, so that each holds its buffer when it
     * returns: its threads may be gone (a fork stops them; they come back
     * at the next threaded call) or not yet started, and one that takes its
     * buffer later takes the free one this thread's calls would reuse. */
    int dim = PROBE_N * SFB_MAX(1, SFB_MIN(n, PROBE_MAX_THREADS));
    float *a = calloc((size_t)dim * PROBE_N * 2 + (size_t)dim * dim, sizeof *a);
    if (!a) return sfb__error(-ENOMEM, "cannot allocate BLAS's working memory: out of memory");
    float *b = a + (size_t)dim * PROBE_N, *c = b + (size_t)dim * PROBE_N;
    /* alpha and beta of no special case (OpenBLAS's direct kernels take
     * no buffer) */
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, dim, dim, PROBE_N, 0.5f, a, dim, b,
                PROBE_N, 1.0f, c, dim);
    free(a);
    reserved = 1;
    return 0;
}
