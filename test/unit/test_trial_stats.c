/* The trainer's measured --sync auto decides a flip by src/train/trial_stats.c:
 * a whole slow window is not a gain (the old rule, "the lower median wins",
 * took it), four windows that cannot tell run four more, a real gain under
 * the same slow window and a gain under a steady drift are kept, pure noise
 * is not; and sfb.torch's rule (python/sfb/torch/_autoplan.py) gives the
 * same numbers on the same windows (skipped without python3). */
#include "config.h"
#include "src/train/trial_stats.h"
#include "src/base/util.h"
#include "test.h"

#ifndef AUTOPLAN_PY
#define AUTOPLAN_PY "python/sfb/torch/_autoplan.py"
#endif

enum { HALF = 4 };

/* Windows of HALF clocks each, back to back from clock 10, one clock
 * between two windows of different engines (it pays the replan and is
 * not counted). ms(clock, window, flipped) gives each clock's time. */
struct trial {
    uint32_t nwin, n[SFB__TRIAL_MAX_WINDOWS], nb, nf;
    double t[SFB__TRIAL_MAX_WINDOWS][HALF], at[SFB__TRIAL_MAX_WINDOWS];
};

static void make(struct trial *tr, uint32_t nwin, double (*ms)(uint32_t, uint32_t, int, double),
                 double gain)
{
    memset(tr, 0, sizeof *tr);
    tr->nwin = nwin;
    uint32_t clock = 10;
    for (uint32_t w = 0; w < nwin; w++) {
        int f = sfb__trial_window_flipped(w);
        if (w && f != sfb__trial_window_flipped(w - 1)) clock++;
        for (uint32_t i = 0; i < HALF; i++, clock++) {
            tr->t[w][tr->n[w]++] = ms(clock, w, f, gain);
            tr->at[w] += clock;
        }
        tr->at[w] /= HALF;
        *(f ? &tr->nf : &tr->nb) += HALF;
    }
}

static void judge(struct trial *tr, struct sfb__trial_verdict *v)
{
    double *win[SFB__TRIAL_MAX_WINDOWS], scratch[SFB__TRIAL_MAX_WINDOWS * HALF], s[SFB__TS_N];
    struct trial copy = *tr; /* (the summary sorts the windows in place) */
    for (uint32_t w = 0; w < tr->nwin; w++) win[w] = copy.t[w];
    sfb__trial_summary(win, copy.n, tr->nwin, scratch, s);
    sfb__trial_judge(s, tr->at, tr->nwin, tr->nb, tr->nf, v);
}

static const double jitter[] = {2, 3, -9, -2, 6, 5, 2, -1, 5, 1, 8, -4};

/* 100 ms and jitter; window 1 (as it was) 60 ms slower (another job); the
 * flip `gain` ms faster */
static double slow_window(uint32_t clock, uint32_t w, int flipped, double gain)
{
    return 100 + jitter[clock % 12] + (w == 1 ? 60 : 0) - (flipped ? gain : 0);
}

static int test_a_slow_window_is_not_a_gain(void)
{
    struct trial tr;
    struct sfb__trial_verdict v;
    make(&tr, 4, slow_window, 0);
    judge(&tr, &v);
    /* the clocks' medians say the flip is faster, beyond their spread... */
    ASSERT_LT(v.flip_ms, v.base_ms - v.clear);
    ASSERT(v.clocks_say);
    /* ...the windows cannot confirm it: four more */
    ASSERT_LE(v.gain, v.bound);
    ASSERT(v.more && !v.flip);
    make(&tr, 8, slow_window, 0);
    judge(&tr, &v);
    ASSERT_LT(v.flip_ms, v.base_ms); /* the lower median (the old rule took it) */
    ASSERT(!v.flip && !v.more && v.untold);
    return 0;
}

static int test_a_real_gain_under_a_slow_window(void)
{
    struct trial tr;
    struct sfb__trial_verdict v;
    make(&tr, 8, slow_window, 150);
    judge(&tr, &v);
    ASSERT(v.clocks_say);
    ASSERT_GT(v.gain, v.bound);
    ASSERT_NEAR(v.gain, 150, 20);
    ASSERT(v.flip && !v.untold && !v.more);
    return 0;
}

/* 500 ms falling 2 ms a clock; the flip 5 ms faster */
static double drifting(uint32_t clock, uint32_t w, int flipped, double gain)
{
    (void)w;
    return 500 - 2.0 * clock - (flipped ? gain : 0);
}

static int test_a_drifting_machine(void)
{
    struct trial tr;
    struct sfb__trial_verdict v;
    make(&tr, 4, drifting, 5);
    judge(&tr, &v);
    /* the fit takes the drift: a clean 5 ms gain on four windows */
    ASSERT_NEAR(v.gain, 5, 1e-6);
    ASSERT_LT(v.bound, 1e-6);
    ASSERT(v.flip && !v.more);
    make(&tr, 4, drifting, -5); /* the flip slower: kept as it was */
    judge(&tr, &v);
    ASSERT(!v.flip && !v.more && !v.untold);
    return 0;
}

/* no difference, only the jitter */
static double noise(uint32_t clock, uint32_t w, int flipped, double gain)
{
    (void)w, (void)flipped, (void)gain;
    return 100 + jitter[(clock * 7) % 12];
}

static int test_noise_is_not_a_gain(void)
{
    struct trial tr;
    struct sfb__trial_verdict v;
    for (uint32_t nwin = 4; nwin <= 8; nwin += 4) {
        make(&tr, nwin, noise, 0);
        judge(&tr, &v);
        ASSERT(!v.flip && !v.clocks_say && !v.more);
    }
    return 0;
}

/* A singular fit (every window at one clock): no bound, no flip. */
static int test_singular(void)
{
    struct trial tr;
    struct sfb__trial_verdict v;
    make(&tr, 4, drifting, 50);
    for (uint32_t w = 0; w < 4; w++) tr.at[w] = 7;
    judge(&tr, &v);
    ASSERT(isinf(v.bound) && !v.flip);
    return 0;
}

/* sfb.torch's _autoplan on the same windows: the same medians, clear gain,
 * fitted gain and bound (to rounding: its sums run in another order). */
static int same_as_python(const struct trial *tr)
{
    char cmd[8192];
    size_t len = (size_t)snprintf(cmd, sizeof cmd,
        "python3 -c 'import importlib.util, sys\n"
        "s = importlib.util.spec_from_file_location(\"a\", sys.argv[1])\n"
        "a = importlib.util.module_from_spec(s); s.loader.exec_module(a)\n"
        "w = [[float(x) for x in v.split(\",\")] for v in sys.argv[2].split(\";\")]\n"
        "at = [float(x) for x in sys.argv[3].split(\",\")]\n"
        "f = [x for i, v in enumerate(w) if a._ORDER[i %% 4] for x in v]\n"
        "b = [x for i, v in enumerate(w) if not a._ORDER[i %% 4] for x in v]\n"
        "print(\"%%.17g %%.17g %%.17g %%.17g %%.17g\" %% ((a._median(b), a._median(f), "
        "a._clear_gain(w)) + a._window_gain(w, at)))' '%s' '", AUTOPLAN_PY);
    for (uint32_t w = 0; w < tr->nwin; w++)
        for (uint32_t i = 0; i < tr->n[w]; i++)
            len += (size_t)snprintf(cmd + len, sizeof cmd - len, "%s%.17g",
                                    i ? "," : w ? ";" : "", tr->t[w][i]);
    len += (size_t)snprintf(cmd + len, sizeof cmd - len, "' '");
    for (uint32_t w = 0; w < tr->nwin; w++)
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, "%s%.17g", w ? "," : "", tr->at[w]);
    snprintf(cmd + len, sizeof cmd - len, "'");
    FILE *f = popen(cmd, "r");
    ASSERT(f);
    double py[5];
    int got = fscanf(f, "%lg %lg %lg %lg %lg", &py[0], &py[1], &py[2], &py[3], &py[4]);
    int rc = pclose(f);
    ASSERT_EQ(got, 5);
    ASSERT_EQ(rc, 0);
    struct trial copy = *tr;
    struct sfb__trial_verdict v;
    judge(&copy, &v);
    double c[5] = {v.base_ms, v.flip_ms, v.clear, v.gain, v.bound};
    for (int k = 0; k < 5; k++) ASSERT_NEAR(c[k], py[k], 1e-9 * (1 + fabs(py[k])));
    return 0;
}

static int test_same_as_sfb_torch(void)
{
    if (system("python3 -c '' 2>/dev/null")) {
        fprintf(stderr, "  (no python3: not compared)\n");
        return 0;
    }
    double (*fn[])(uint32_t, uint32_t, int, double) = {slow_window, drifting, noise};
    for (uint32_t k = 0; k < 3; k++)
        for (uint32_t nwin = 4; nwin <= 8; nwin += 4) {
            struct trial tr;
            make(&tr, nwin, fn[k], 30);
            if (same_as_python(&tr)) {
                fprintf(stderr, "  (case %u, %u windows)\n", k, nwin);
                return 1;
            }
        }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        {"a_slow_window_is_not_a_gain", test_a_slow_window_is_not_a_gain},
        {"a_real_gain_under_a_slow_window", test_a_real_gain_under_a_slow_window},
        {"a_drifting_machine", test_a_drifting_machine},
        {"noise_is_not_a_gain", test_noise_is_not_a_gain},
        {"singular", test_singular},
        {"same_as_sfb_torch", test_same_as_sfb_torch},
    };
    return test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
}
