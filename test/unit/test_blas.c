/* The process's BLAS (src/factor/blas.c): under an address-space limit,
 * sfb_blas_reserve refuses with -ENOMEM naming the limit when OpenBLAS's
 * buffer would not fit (OpenBLAS itself would retry forever), and with
 * room takes the buffer at once so later sgemms, in this process and in
 * processes forked from it, map nothing more. Each case runs in a child
 * (the limit is the process's), under alarm(): a spin fails the case
 * instead of hanging it. */
#include <sfb/sf.h>
#include "src/base/util.h"
#include "test.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static int limit_to(unsigned long long mib)
{
    struct rlimit rl = {(rlim_t)mib << 20, (rlim_t)mib << 20};
    return setrlimit(RLIMIT_AS, &rl);
}

/* A 256 × 256 × 64 update through the reconstruction's sgemm. */
static int some_sgemm(void)
{
    enum { R = 256, C = 256, S = 64 };
    static float a[R * C], b[S * R], c[S * C];
    struct sfb_matrix m = {R, C, a};
    struct sfb_sf sf = {.rows = R, .cols = C, .s = S, .scale = 0.5f, .b = b, .c = c};
    const struct sfb_sf *list[1] = {&sf};
    struct sfb_reconstruct *r = NULL;
    int ret = sfb_reconstruct_open(&r);
    if (!ret) ret = sfb_reconstruct_apply(r, &m, list, 1);
    sfb_reconstruct_close(&r);
    return ret;
}

/* Whether an address-space limit means here what it means in a plain
 * process: not under ASan (terabytes of shadow reserved) nor valgrind
 * (its own address space inside the limit). */
static int limits_apply(void)
{
    const char *pre = getenv("LD_PRELOAD");
    if (sfb__mapped_mib() > (1ull << 20) || (pre && strstr(pre, "vgpreload"))) {
        fprintf(stderr, "  not run: under ASan or valgrind an address-space limit means "
                        "something else\n");
        return 0;
    }
    return 1;
}

/* Runs fn in a child with a 30 s alarm; its exit status (0: passed). */
static int in_child(int (*fn)(void))
{
    if (!limits_apply()) return 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(30);
        _exit(fn()); /* _exit: OpenBLAS's threads may be stuck allocating */
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "  the case died by signal %d (%s)\n", WTERMSIG(st),
                WTERMSIG(st) == SIGALRM ? "stuck: OpenBLAS spinning?" : "crash");
        return 1;
    }
    return WEXITSTATUS(st);
}

static int refuses_child(void)
{
    ASSERT_OK(limit_to(sfb__mapped_mib() + 40));
    int ret = sfb_blas_reserve();
    ASSERT_EQ(ret, -ENOMEM);
    const char *m = sfb_error_message(ret);
    ASSERT_STR_CONTAINS(m, "cannot allocate BLAS's working memory: the address-space limit "
                           "(ulimit -v) is ");
    ASSERT_STR_CONTAINS(m, "OpenBLAS maps 128 MiB for each thread that runs it");
    ASSERT_STR_CONTAINS(m, "raise the limit to at least ");
    return 0;
}

/* Too little room: a clear -ENOMEM at once, not a spin. */
static int test_refuses(void)
{
    return in_child(refuses_child);
}

static int reserves_child(void)
{
    unsigned long long lim = sfb__mapped_mib() + 400;
    ASSERT_OK(limit_to(lim));
    ASSERT_OK(sfb_blas_reserve());
    unsigned long long after = sfb__mapped_mib();
    ASSERT_OK(sfb_blas_reserve()); /* once per thread: nothing more */
    ASSERT_EQ(sfb__mapped_mib(), after);
    /* what is left under the limit now is less than another buffer: the
     * sgemms below would spin if they needed one */
    ASSERT_OK(limit_to(after + 64));
    for (int i = 0; i < 3; i++) ASSERT_OK(some_sgemm());
    /* a forked process has it too */
    pid_t pid = fork();
    if (pid == 0) {
        alarm(30);
        _exit(sfb_blas_reserve() || some_sgemm() ? 3 : 0);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return 0;
}

/* Room: the buffer is taken at once; later sgemms need no more. */
static int test_reserves(void)
{
    return in_child(reserves_child);
}

static int unlimited_child(void)
{
    struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
    if (setrlimit(RLIMIT_AS, &rl)) return 0; /* a hard limit of its own: nothing to check */
    unsigned long long before = sfb__mapped_mib();
    ASSERT_OK(sfb_blas_reserve());
    ASSERT_EQ(sfb__mapped_mib(), before);
    return 0;
}

/* No limit: nothing to do, nothing mapped. */
static int test_unlimited(void)
{
    return in_child(unlimited_child);
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        {"refuses", test_refuses},
        {"reserves", test_reserves},
        {"unlimited", test_unlimited},
    };
    return test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
}
