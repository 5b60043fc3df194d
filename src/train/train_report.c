/* What a worker reports (src/train/worker.h): the metrics file's setup,
 * eval, summary, relay and teardown events (docs/formats.md). */
#include "config.h"
#include "src/base/util.h"
#include "src/base/timeline.h"
#include "src/job/job_internal.h"
#include "src/train/worker.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

uint32_t sfb__epoch_after(uint64_t done, uint64_t cpe)
{
    /* clock t (0-based) is in epoch ⌊t / cpe⌋ + 1; 0 only before any clock */
    return (uint32_t)((done + cpe - 1) / cpe);
}

/* The "setup" metrics event (docs/formats.md), once the first clock began. */
void sfb__setup_event(struct worker *w)
{
    char ph[1024];
    sfb__phase_json(SFB__PH_EXEC, SFB__PH_FIRST_CLOCK, ph, sizeof ph);
    sfb__metrics_event(&w->metrics, "setup",
                       "\"launch_s\":%.6f,\"origin\":\"%s\",\"t_launch\":%.6f,\"phases\":{%s}",
                       sfb__phase_span(SFB__PH_LAUNCH, SFB__PH_FIRST_CLOCK),
                       sfb__phase_from_launcher() ? "launcher" : "process",
                       sfb__phase_at(SFB__PH_LAUNCH), ph);
}

/* The "teardown" metrics event, the last line, once everything but the
 * metrics file is closed. */
void sfb__teardown_event(struct sfb__metrics *m)
{
    if (sfb__phase_at(SFB__PH_LAST_CLOCK) == 0) return;
    char ph[1024];
    sfb__phase_json(SFB__PH_DRAINED, SFB__PH_CLOSED, ph, sizeof ph);
    sfb__metrics_event(m, "teardown", "\"teardown_s\":%.6f,\"t_last_clock\":%.6f,\"phases\":{%s}",
                       sfb__phase_span(SFB__PH_LAST_CLOCK, SFB__PH_CLOSED),
                       sfb__phase_at(SFB__PH_LAST_CLOCK), ph);
}

/* The "eval" metrics event; NaN (e.g. sc has no accuracy) is written null. */
void sfb__eval_event(struct worker *w, uint64_t clock, uint64_t epoch, double wall,
                     const struct sfb_eval *ev, double train_loss)
{
    char a[32], b[32], c[32];
    sfb__metrics_event(&w->metrics, "eval",
                       "\"clock\":%llu,\"epoch\":%llu,\"wall\":%.6g,\"test_loss\":%s,"
                       "\"test_accuracy\":%s,\"train_loss\":%s",
                       (unsigned long long)clock, (unsigned long long)epoch, wall,
                       sfb__json_num(a, ev->loss), sfb__json_num(b, ev->accuracy),
                       sfb__json_num(c, train_loss));
}

/* The "relay" event of an overlay engine. */
static void relay_event(struct worker *w, const struct sfb__job_report *rep)
{
    const struct sfb_train_settings *s = w->s;
    char *po = malloc((size_t)w->world * 24 + 8), *pp = po;
    if (po) {
        *pp = 0;
        for (uint32_t i = 0; i < w->world && rep->per_origin; i++)
            pp += sprintf(pp, "%s%llu", i ? "," : "", (unsigned long long)rep->per_origin[i]);
    }
    sfb__metrics_event(&w->metrics, "relay",
                       "\"topology\":\"%s\",\"flush\":\"%s\",\"data_msgs\":%llu,"
                       "\"data_bytes\":%llu,\"bundles\":%llu,\"forwarded\":%llu,"
                       "\"mean_hops\":%.6g,\"max_hops\":%u,\"applied_per_origin\":[%s]",
                       s->topology ? s->topology : "full", s->flush_clock ? "clock" : "eager",
                       (unsigned long long)rep->data_msgs, (unsigned long long)rep->data_bytes,
                       (unsigned long long)rep->bundles, (unsigned long long)rep->forwarded,
                       rep->mean_hops, rep->max_hops, po ? po : "");
    free(po);
}

/* Bytes per clock the engines' design sends (each matrix by its engine's
 * formula). */
static double formula_bytes(struct worker *w)
{
    double sum = 0;
    for (uint32_t m = 0; m < sfb_model_n_matrices(w->model); m++)
        sum += sfb__job_formula_bytes(w->job, m, w->batch);
    return sum;
}

void sfb__engines_event(struct worker *w)
{
    char buf[1024];
    size_t len = 0;
    uint32_t n = sfb_model_n_matrices(w->model);
    for (uint32_t m = 0; m < n && len < sizeof buf; m++) {
        const struct sfb_matrix *a = sfb_model_matrix(w->model, m);
        double ms[2];
        char p0[32], p1[32];
        int planned = !sfb__job_plan_ms(w->job, m, ms);
        len += (size_t)snprintf(buf + len, sizeof buf - len,
                                "%s{\"matrix\":%u,\"rows\":%u,\"cols\":%u,\"engine\":\"%s\","
                                "\"sfb_ms\":%s,\"fms_ms\":%s}", m ? "," : "", m, a->rows, a->cols,
                                sfb_job_engine(w->job, m),
                                planned ? sfb__json_num(p0, ms[0]) : "null",
                                planned ? sfb__json_num(p1, ms[1]) : "null");
    }
    sfb__metrics_event(&w->metrics, "sync", "\"sync\":\"%s\",\"matrices\":[%s]",
                       w->s->sync ? w->s->sync : "sfb", buf);
}

void sfb__summary_events(struct worker *w, const struct sfb__run_totals *rt,
                         const struct sfb_train_result *res)
{
    struct sfb_job_stats now = {.size = sizeof now};
    sfb_job_stats(w->job, &now);
    const struct sfb_job_stats *s0 = &rt->first;
    const uint64_t *hist = sfb__job_staleness_hist(w->job);
    char hs[SFB__JOB_STALENESS_BINS * 24] = "", *hp = hs;
    for (int i = 0; i < SFB__JOB_STALENESS_BINS; i++)
        hp += sprintf(hp, "%s%llu", i ? "," : "", (unsigned long long)hist[i]);
    char acc[32], launch[32] = "null"; /* as the setup event writes it */
    double launch_s = sfb__phase_span(SFB__PH_LAUNCH, SFB__PH_FIRST_CLOCK);
    if (launch_s >= 0) snprintf(launch, sizeof launch, "%.6f", launch_s);
    uint64_t sent = now.bytes_sent - s0->bytes_sent;
    sfb__metrics_event(
        &w->metrics, "summary",
        "\"world\":%u,\"start_clock\":%llu,\"clocks\":%llu,\"samples\":%llu,\"wall\":%.6g,"
        "\"samples_per_s\":%.6g,\"test_accuracy\":%s,\"bytes_sent\":%llu,\"bytes_sent_per_clock\":%.6g,"
        "\"formula_bytes_per_clock\":%.6g,\"staleness_hist\":[%s],\"rejected_frames\":%llu,"
        "\"msgs_sent\":%llu,\"data_msgs\":%llu,\"data_bytes\":%llu,\"train_rows\":%llu,"
        "\"peak_rss_bytes\":%llu,\"launch_s\":%s,\"bandwidth\":%.6g,\"wait_s\":%.6g,"
        "\"budget_wait_s\":%.6g,\"budget_held_s\":%.6g,\"pss_bytes\":%llu",
        w->world, (unsigned long long)rt->start, (unsigned long long)res->clocks,
        (unsigned long long)res->samples, res->wall,
        res->wall > 0 ? (double)res->samples / res->wall : 0.0,
        sfb__json_num(acc, res->test_accuracy), (unsigned long long)sent,
        res->clocks ? (double)sent / (double)res->clocks : 0.0, formula_bytes(w), hs,
        (unsigned long long)now.rejected_frames,
        (unsigned long long)(now.msgs_sent - s0->msgs_sent),
        (unsigned long long)(now.data_msgs - s0->data_msgs),
        (unsigned long long)(now.data_bytes - s0->data_bytes), (unsigned long long)w->train.n,
        (unsigned long long)res->peak_rss_bytes, launch, w->s->bandwidth, res->wait_s,
        res->budget_wait_s, res->budget_held_s, (unsigned long long)sfb__pss_bytes());
    struct sfb__job_report rep;
    sfb__job_report(w->job, &rep);
    if (rep.relays) relay_event(w, &rep);
}
