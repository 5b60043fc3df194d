/* Tiny test harness: one executable per module, a {name, fn} table, and
 * assertion macros that print both operands. A failing assertion returns 1
 * from the test function. `./test_x [name]` runs all tests or one. */
#ifndef SFB_TEST_H
#define SFB_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct test_case {
    const char *name;
    int (*fn)(void);
};

#define TEST_FAIL_AT(...)                                                       \
    do {                                                                       \
        fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                      \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
        return 1;                                                              \
    } while (0)

#define ASSERT(c)                                                               \
    do {                                                                       \
        if (!(c)) TEST_FAIL_AT("assertion failed: %s", #c);                    \
    } while (0)

/* Operands compare as long double, which holds every 64-bit integer
 * exactly and every float, so the same macros serve ints and doubles. */
#define ASSERT_INT_OP(a, op, b)                                                 \
    do {                                                                       \
        long double a_ = (long double)(a), b_ = (long double)(b);              \
        if (!(a_ op b_))                                                       \
            TEST_FAIL_AT("%s %s %s: %.17Lg vs %.17Lg", #a, #op, #b, a_, b_);   \
    } while (0)
#define ASSERT_EQ(a, b) ASSERT_INT_OP(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_INT_OP(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_INT_OP(a, <, b)
#define ASSERT_LE(a, b) ASSERT_INT_OP(a, <=, b)
#define ASSERT_GT(a, b) ASSERT_INT_OP(a, >, b)
#define ASSERT_GE(a, b) ASSERT_INT_OP(a, >=, b)

#define ASSERT_OK(expr)                                                         \
    do {                                                                       \
        int r_ = (expr);                                                       \
        if (r_ != 0)                                                           \
            TEST_FAIL_AT("%s returned %d (%s) %s", #expr, r_, sfb_strerror(r_), \
                         sfb_last_error());                                    \
    } while (0)

#define ASSERT_NEAR(a, b, tol)                                                  \
    do {                                                                       \
        double a_ = (double)(a), b_ = (double)(b);                             \
        if (!(fabs(a_ - b_) <= (tol)))                                         \
            TEST_FAIL_AT("%s ≈ %s: %.9g vs %.9g (tol %g)", #a, #b, a_, b_,     \
                         (double)(tol));                                       \
    } while (0)

#define ASSERT_STR_CONTAINS(hay, needle)                                        \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        if (!h_ || !strstr(h_, n_))                                            \
            TEST_FAIL_AT("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", \
                         n_);                                                  \
    } while (0)

/* SFB_TEST_SKIP: cases a test setup leaves out, "module:case" separated
 * by spaces, module = the executable's name less "test_" (meson.build's
 * valgrind setup names the cases whose code paths other cases of the same
 * run cover). A case named on the command line always runs. */
static inline int test_skipped(const char *argv0, const char *name)
{
    const char *list = getenv("SFB_TEST_SKIP"), *base = strrchr(argv0, '/');
    base = base ? base + 1 : argv0;
    if (!list) return 0;
    if (strncmp(base, "test_", 5) == 0) base += 5;
    size_t nb = strlen(base), nn = strlen(name);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, " ");
        if (len == nb + 1 + nn && strncmp(p, base, nb) == 0 && p[nb] == ':' &&
            strncmp(p + nb + 1, name, nn) == 0)
            return 1;
        p += len;
        p += strspn(p, " ");
    }
    return 0;
}

static inline int test_main(int argc, char **argv, const struct test_case *t, size_t n)
{
    int failed = 0, ran = 0, skipped = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], t[i].name) != 0) continue;
        if (argc == 1 && test_skipped(argv[0], t[i].name)) {
            fprintf(stderr, "skip %s (SFB_TEST_SKIP)\n", t[i].name);
            skipped++;
            continue;
        }
        ran++;
        int r = t[i].fn();
        fprintf(stderr, "%s %s\n", r ? "FAIL" : "ok  ", t[i].name);
        failed += r != 0;
    }
    if (ran == 0 && !skipped) {
        fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "(any)");
        return 1;
    }
    fprintf(stderr, "%d passed, %d failed\n", ran - failed, failed);
    return failed ? 1 : 0;
}

#define TEST_MAIN(table)                                                        \
    int main(int argc, char **argv)                                            \
    {                                                                          \
        return test_main(argc, argv, table, sizeof(table) / sizeof(table[0])); \
    }

#endif
