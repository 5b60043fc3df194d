/* Is a measured flip faster beyond the noise: see trial_stats.h. */
#include "config.h"
#include "src/train/trial_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, uint32_t n)
{
    if (!n) return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void sfb__trial_summary(double *const *times, const uint32_t *n, uint32_t nwin,
                        double *scratch, double s[SFB__TS_N])
{
    memset(s, 0, SFB__TS_N * sizeof *s);
    uint32_t k = 0;
    for (int flip = 0; flip < 2; flip++) { /* the base clocks, then the flipped */
        uint32_t k0 = k;
        for (uint32_t w = 0; w < nwin; w++)
            if (sfb__trial_window_flipped(w) == flip) {
                memcpy(scratch + k, times[w], n[w] * sizeof *scratch);
                k += n[w];
            }
        s[flip ? SFB__TS_FLIP : SFB__TS_BASE] = median(scratch + k0, k - k0);
    }
    /* each clock's distance from its window's median */
    k = 0;
    for (uint32_t w = 0; w < nwin; w++) {
        double m = s[w] = median(times[w], n[w]);
        for (uint32_t i = 0; i < n[w]; i++) scratch[k++] = fabs(times[w][i] - m);
    }
    s[SFB__TS_SIGMA] = 1.4826 * median(scratch, k);
}

/* The 3 × 3 determinant. */
static double det3(double m[3][3])
{
    return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
           m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
           m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
}

/* The windows' medians y fitted as level + drift (at) + the flipped
 * windows' difference: the gain (minus that difference) and its one-sided
 * 95 % bound (infinite where the fit is singular: then no flip). */
static void window_gain(const double *y, const double *at, uint32_t nwin, double *gain,
                        double *bound)
{
    static const double t95[] = {0, 6.314, 2.920, 2.353, 2.132, 2.015}; /* one-sided, by dof */
    double x[SFB__TRIAL_MAX_WINDOWS][3], t0 = 0;
    for (uint32_t w = 0; w < nwin; w++) t0 += at[w];
    t0 /= nwin;
    for (uint32_t w = 0; w < nwin; w++) {
        x[w][0] = 1;
        x[w][1] = at[w] - t0;
        x[w][2] = sfb__trial_window_flipped(w);
    }
    double xtx[3][3] = {{0}}, xty[3] = {0};
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++)
            for (uint32_t w = 0; w < nwin; w++) xtx[i][j] += x[w][i] * x[w][j];
        for (uint32_t w = 0; w < nwin; w++) xty[i] += x[w][i] * y[w];
    }
    double d = det3(xtx), beta[3];
    *gain = 0;
    *bound = INFINITY;
    if (fabs(d) < 1e-12) return;
    for (int k = 0; k < 3; k++) { /* Cramer's rule */
        double m[3][3];
        memcpy(m, xtx, sizeof m);
        for (int i = 0; i < 3; i++) m[i][k] = xty[i];
        beta[k] = det3(m) / d;
    }
    double rss = 0;
    for (uint32_t w = 0; w < nwin; w++) {
        double r = y[w] - (beta[0] * x[w][0] + beta[1] * x[w][1] + beta[2] * x[w][2]);
        rss += r * r;
    }
    double inv22 = (xtx[0][0] * xtx[1][1] - xtx[0][1] * xtx[1][0]) / d; /* (X'X)^-1 [2][2] */
    uint32_t dof = nwin - 3;
    *gain = -beta[2];
    *bound = t95[dof] * sqrt(fmax(rss, 0) / dof * fmax(inv22, 0));
}

void sfb__trial_judge(const double s[SFB__TS_N], const double *at, uint32_t nwin, uint32_t nb,
                      uint32_t nf, struct sfb__trial_verdict *v)
{
    memset(v, 0, sizeof *v);
    v->base_ms = s[SFB__TS_BASE];
    v->flip_ms = s[SFB__TS_FLIP];
    v->clear = nb && nf ? 2 * 1.253 * s[SFB__TS_SIGMA] * sqrt(1.0 / nb + 1.0 / nf) : 0;
    v->clocks_say = v->flip_ms < v->base_ms - v->clear;
    window_gain(s, at, nwin, &v->gain, &v->bound);
    int windows_say = v->gain > v->bound;
    v->more = v->clocks_say && !windows_say && nwin == 4;
    v->flip = v->clocks_say && windows_say;
    v->untold = !v->more && !v->flip && v->flip_ms < v->base_ms;
}
