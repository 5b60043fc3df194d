/* The measured --sync auto (trials.h): the start-up plan's close calls
 * timed clock by clock, the faster engines kept. */
#include "config.h"
#include "src/train/trials.h"
#include <sfb/job.h>
#include "src/base/util.h"
#include "src/job/job_internal.h"
#include "src/train/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OFF, WARM, TRIAL, DONE };
#define WARM_CLOCKS 3 /* not timed after the start (first touches) */
#define CLOSE 4.0     /* predictions within this factor are measured */

static double cheaper(const double ms[2])
{
    return ms[0] < ms[1] ? ms[0] : ms[1];
}

/* The groups: each measured matrix's shape, the costliest group first. */
static void make_groups(struct sfb__trials *tr, struct sfb_job *job, const double (*pred)[2],
                        const uint8_t *measured)
{
    double cost[SFB_MODEL_MAX_MATRICES] = {0};
    uint32_t rep[SFB_MODEL_MAX_MATRICES], ng = 0; /* a matrix of each group */
    uint8_t g_of[SFB_MODEL_MAX_MATRICES];
    for (uint32_t m = 0; m < tr->n; m++) {
        g_of[m] = UINT8_MAX;
        if (!measured[m]) continue;
        const struct sfb_matrix *a = sfb__job_matrix(job, m);
        uint32_t g = 0;
        while (g < ng && (sfb__job_matrix(job, rep[g])->rows != a->rows ||
                          sfb__job_matrix(job, rep[g])->cols != a->cols))
            g++;
        if (g == ng) rep[ng++] = m;
        g_of[m] = (uint8_t)g;
        cost[g] += cheaper(pred[m]);
    }
    /* rank the groups by cost (few: a selection), keep the first few */
    uint8_t rank_of[SFB_MODEL_MAX_MATRICES];
    uint8_t used[SFB_MODEL_MAX_MATRICES] = {0};
    for (uint32_t r = 0; r < ng; r++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t g = 0; g < ng; g++)
            if (!used[g] && (best == UINT32_MAX || cost[g] > cost[best])) best = g;
        used[best] = 1;
        rank_of[best] = (uint8_t)r;
    }
    tr->ngroups = SFB_MIN(ng, SFB__TRIAL_GROUPS);
    for (uint32_t m = 0; m < tr->n; m++)
        tr->group[m] = g_of[m] != UINT8_MAX && rank_of[g_of[m]] < tr->ngroups
                           ? rank_of[g_of[m]] : UINT8_MAX;
}

int sfb__trials_open(struct sfb__trials *tr, struct sfb_job *job, uint32_t trial_clocks,
                     int64_t first)
{
    memset(tr, 0, sizeof *tr);
    tr->stage = OFF;
    tr->n = sfb__job_n_matrices(job);
    if (!trial_clocks || sfb_job_world(job) < 2 || tr->n > SFB_MODEL_MAX_MATRICES) return 0;
    const char *all = getenv("SFB_DEBUG_TRIAL_ALL");
    int every = all && !strcmp(all, "1");
    double pred[SFB_MODEL_MAX_MATRICES][2];
    uint8_t measured[SFB_MODEL_MAX_MATRICES] = {0};
    uint32_t k = 0;
    for (uint32_t m = 0; m < tr->n; m++) {
        tr->fms[m] = (uint8_t)sfb__job_plan_engine_of(job, m);
        tr->ms[m][0] = tr->ms[m][1] = NAN;
        if (sfb__job_plan_ms(job, m, pred[m]) || !isfinite(pred[m][0]) || !isfinite(pred[m][1]))
            continue;
        double lo = cheaper(pred[m]), hi = pred[m][0] + pred[m][1] - lo;
        measured[m] = every || (lo > 0 && hi <= CLOSE * lo);
        k += measured[m];
    }
    if (!k) return 0;
    /* up to 8 windows of ceil(T / 2) clocks, and as much room to summarize them */
    size_t half = (trial_clocks + 1) / 2;
    if (!(tr->times = malloc(2 * SFB__TRIAL_MAX_WINDOWS * half * sizeof *tr->times)))
        return sfb__error(-ENOMEM, "--trial-clocks %u: out of memory", trial_clocks);
    make_groups(tr, job, (const double (*)[2])pred, measured);
    tr->clocks = trial_clocks;
    tr->nwin = 4;
    tr->stage = WARM;
    tr->first = tr->since = first;
    tr->last = sfb__now();
    return 0;
}

void sfb__trials_close(struct sfb__trials *tr)
{
    free(tr->times);
    tr->times = NULL;
}

/* The group's windows summarized on every rank and combined (each entry
 * the largest over the ranks: an allgather, the same clock on every rank),
 * then judged (trial_stats.h). */
static int judge(struct sfb__trials *tr, struct sfb_job *job, struct sfb__trial_verdict *v)
{
    uint32_t half = (tr->clocks + 1) / 2, world = sfb_job_world(job), nb = 0, nf = 0;
    double *win[SFB__TRIAL_MAX_WINDOWS], at[SFB__TRIAL_MAX_WINDOWS], mine[SFB__TS_N];
    for (uint32_t w = 0; w < tr->nwin; w++) {
        win[w] = tr->times + (size_t)w * half;
        at[w] = tr->at[w] / SFB_MAX(tr->nt[w], 1u);
        *(sfb__trial_window_flipped(w) ? &nf : &nb) += tr->nt[w];
    }
    sfb__trial_summary(win, tr->nt, tr->nwin, tr->times + (size_t)SFB__TRIAL_MAX_WINDOWS * half,
                       mine);
    double *all = malloc(world * sizeof mine);
    if (!all) return sfb__error(-ENOMEM, "--trial-clocks: out of memory");
    int ret = sfb_job_allgather(job, mine, sizeof mine, all);
    double s[SFB__TS_N] = {0};
    for (uint32_t r = 0; !ret && r < world; r++)
        for (int k = 0; k < SFB__TS_N; k++) s[k] = SFB_MAX(s[k], all[r * SFB__TS_N + k]);
    free(all);
    if (!ret) sfb__trial_judge(s, at, tr->nwin, nb, nf, v);
    return ret;
}

/* "sfb,fms,..." of engines (n entries) into buf (4 bytes a matrix). */
static const char *spec(const uint8_t *fms, uint32_t n, char *buf)
{
    size_t len = 0;
    for (uint32_t m = 0; m < n; m++)
        len += (size_t)sprintf(buf + len, "%s%s", m ? "," : "", sfb__job_plan_engine(fms[m]));
    return buf;
}

static void log_plan(const struct sfb__trials *tr, struct sfb_job *job)
{
    for (uint32_t m = 0; m < tr->n; m++) {
        if (tr->group[m] == UINT8_MAX) continue;
        const struct sfb_matrix *a = sfb__job_matrix(job, m);
        SFB_LOG_I("--sync auto, measured: matrix %u %ux%u: %.4g ms a clock by %s, %.4g ms by "
                  "%s -> %s%s", m, a->rows, a->cols, tr->ms[m][0], sfb__job_plan_engine(0),
                  tr->ms[m][1], sfb__job_plan_engine(1), sfb__job_plan_engine(tr->fms[m]),
                  tr->untold[m] ? " (within the noise, kept)" : "");
    }
}

/* The base engines with group g flipped, into out. */
static void flipped(const struct sfb__trials *tr, int g, uint8_t *out)
{
    for (uint32_t m = 0; m < tr->n; m++) out[m] = tr->base[m] ^ (tr->group[m] == (uint8_t)g);
}

/* From clock t + 1 on, the engines `to` (a replan unless they run now). */
static int run_engines(struct sfb__trials *tr, struct sfb_job *job, int64_t t, const uint8_t *to)
{
    if (!memcmp(to, tr->fms, tr->n)) return 0;
    char buf[SFB_MODEL_MAX_MATRICES * 4 + 1];
    int ret = sfb_job_replan(job, t, spec(to, tr->n, buf));
    if (ret) return ret;
    memcpy(tr->fms, to, tr->n);
    tr->since = t + 1;
    tr->replans++;
    return 0;
}

/* A group's windows ended at clock t: four that cannot tell a gain the
 * clocks show run four more; otherwise keep a flip faster beyond the noise,
 * start the next group or finish. */
static int decide(struct sfb__trials *tr, struct sfb_job *job, int64_t t,
                  struct sfb__metrics *metrics, uint32_t rank)
{
    struct sfb__trial_verdict v;
    int ret = judge(tr, job, &v);
    if (ret) return ret;
    if (v.more) { /* windows 4..7: flipped (as 3 was: no replan), as it was twice, flipped */
        tr->nwin = SFB__TRIAL_MAX_WINDOWS;
        return 0;
    }
    uint8_t flip[SFB_MODEL_MAX_MATRICES];
    char b0[SFB_MODEL_MAX_MATRICES * 4 + 1], b1[SFB_MODEL_MAX_MATRICES * 4 + 1];
    char n[4][32];
    flipped(tr, tr->on, flip);
    sfb__metrics_event(metrics, "trial", "\"clock\":%lld,\"engines\":\"%s\",\"ms_per_clock\":%s,"
                       "\"flipped\":\"%s\",\"flipped_ms_per_clock\":%s,\"windows\":%u,"
                       "\"gain_ms\":%s,\"bound_ms\":%s,\"kept\":\"%s\"", (long long)t,
                       spec(tr->base, tr->n, b0), sfb__json_num(n[0], v.base_ms),
                       spec(flip, tr->n, b1), sfb__json_num(n[1], v.flip_ms), tr->nwin,
                       sfb__json_num(n[2], v.gain), sfb__json_num(n[3], v.bound),
                       v.flip ? "flipped" : "engines");
    for (uint32_t m = 0; m < tr->n; m++)
        if (tr->group[m] == (uint8_t)tr->on) {
            tr->ms[m][tr->base[m]] = v.base_ms;
            tr->ms[m][flip[m]] = v.flip_ms;
            tr->untold[m] = (uint8_t)v.untold;
        }
    if (v.flip) memcpy(tr->base, flip, tr->n);
    memset(tr->nt, 0, sizeof tr->nt);
    memset(tr->at, 0, sizeof tr->at);
    tr->window = 0;
    tr->nwin = 4;
    if ((uint32_t)++tr->on < tr->ngroups) {
        flipped(tr, tr->on, flip);
        return run_engines(tr, job, t, flip);
    }
    tr->stage = DONE;
    ret = run_engines(tr, job, t, tr->base);
    if (!ret && rank == 0) log_plan(tr, job);
    return ret;
}

int sfb__trials_clock(struct sfb__trials *tr, struct sfb_job *job, int64_t t,
                      struct sfb__metrics *metrics, uint32_t rank)
{
    if (tr->stage == OFF || tr->stage == DONE) return 0;
    double now = sfb__now(), dt = now - tr->last;
    tr->last = now;
    uint8_t to[SFB_MODEL_MAX_MATRICES];
    if (tr->stage == WARM) {
        if (t + 1 - tr->first < WARM_CLOCKS) return 0;
        tr->stage = TRIAL;
        memcpy(tr->base, tr->fms, tr->n);
        flipped(tr, 0, to);
        return run_engines(tr, job, t, to);
    }
    /* the first clock under new engines paid the replan; windows 0 and 3
     * (and 4 and 7) run the flipped engines, the others the base (a steady
     * drift cancels) */
    uint32_t half = (tr->clocks + 1) / 2, w = (uint32_t)tr->window;
    if (t > tr->since) {
        tr->times[(size_t)w * half + tr->nt[w]++] = dt * 1e3;
        tr->at[w] += (double)t;
        tr->counted++;
    }
    if (tr->counted < half) return 0;
    tr->counted = 0;
    if ((uint32_t)++tr->window == tr->nwin) return decide(tr, job, t, metrics, rank);
    if (sfb__trial_window_flipped((uint32_t)tr->window)) flipped(tr, tr->on, to);
    else memcpy(to, tr->base, tr->n);
    return run_engines(tr, job, t, to);
}
