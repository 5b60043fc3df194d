/* One worker's training loop, a user of the job API (sfb/job.h):
 *
 *     join the job → load data, build the replica (train_setup.c)
 *     for t in clocks:
 *         sfb_job_wait(t)       SSP: every origin's updates ≤ t−s−1 applied
 *         model.apply_local     of clock t−1: regularizer / projection, every
 *                               replica itself, once SSP's updates are in
 *         SFs of this worker's minibatch of clock t
 *         sfb_job_publish(t)    to the peers; own update applied at once
 *     sfb_job_drain(last), finish   all replicas end identical
 *
 * The step is per global minibatch: each worker's SFs carry 1/world of it,
 * so under BSP P workers with batch S follow exactly one worker with batch
 * P·S that reads the same samples (each worker reads its own data shard:
 * SFB_DEBUG_SAMPLE_AS makes one worker read the P shards' union). */
#include "config.h"
#include <sfb/job.h>
#include <sfb/model.h>
#include <sfb/train.h>
#include "src/base/util.h"
#include "src/base/rng.h"
#include "src/base/timeline.h"
#include "src/job/job_internal.h"
#include "src/train/train_settings.h"
#include "src/train/worker.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <time.h>


/* Debug knobs (SFB_DEBUG_DELAY_MS, SFB_DEBUG_SLOW_RANK and _FACTOR): a
 * random delay and one slowed rank, applied after the real compute so the
 * SSP machinery sees genuine stragglers. */
static void debug_delay(struct worker *w, double compute_s)
{
    const struct sfb__train_debug *d = &w->debug;
    double extra = 0;
    if (d->delay_ms > 0) extra += sfb__rng_uniform(&w->debug_rng) * d->delay_ms * 1e-3;
    if (d->slow_rank == (int)w->rank && d->slow_factor > 1)
        extra += (d->slow_factor - 1) * compute_s;
    sfb__sleep(extra);
}

static int evaluate(struct worker *w, struct sfb_eval *ev)
{
    ev->size = sizeof *ev;
    ev->loss = ev->accuracy = NAN;
    ev->n = 0;
    if (w->test.n == 0) return 0;
    return sfb_model_evaluate(w->model, &w->test, ev);
}

static int write_model(struct worker *w, int64_t clock)
{
    const char *out = w->s->model_out;
    if (!out) return 0;
    int per_rank = strstr(out, "%r") != NULL;
    if (!per_rank && w->rank != 0) return 0;
    char *path = sfb__path_for_rank(out, w->rank);
    if (!path) return -ENOMEM;
    int ret = sfb_model_save(w->model, path, clock);
    free(path);
    return ret;
}

/* A consistent checkpoint of `clock`: every rank drains to clock − 1 and
 * passes a barrier, so no rank starts `clock` before every replica holds
 * exactly the updates of clocks < clock; then each rank writes its file. */
static int checkpoint(struct worker *w, int64_t clock, int drained)
{
    double t0 = sfb__now();
    int ret = 0;
    if (!drained && clock > 0) ret = sfb_job_drain(w->job, clock - 1, NULL);
    /* after the job's finish (drained) peers may already be gone: no barrier */
    if (!ret && !drained) ret = sfb_job_barrier(w->job);
    if (ret) return ret;
    struct sfb__ckpt_state st;
    memset(&st, 0, sizeof st);
    st.rank = w->rank;
    st.world = w->world;
    st.clock = clock;
    st.cursor = (uint64_t)clock * w->batch;
    st.rng = w->debug_rng;
    sfb__ckpt_save_model_state(w->model, &st);
    if ((ret = sfb__ckpt_write(w->ckpt_dir, &st, w->ckpt_config, w->model))) return ret;
    double dt = sfb__now() - t0;
    sfb__metrics_event(&w->metrics, "checkpoint", "\"clock\":%lld,\"seconds\":%.6g",
                       (long long)clock, dt);
    if (w->rank == 0)
        SFB_LOG_I("checkpoint of clock %lld written to %s (%.2f s)", (long long)clock,
                  w->ckpt_dir, dt);
    return 0;
}

/* The run's end once the world changed at clock t: --clocks keeps it;
 * --epochs keeps the samples still to come, `left` worker-clocks (clocks
 * left times the workers that would have computed them), now computed by
 * the job's workers. */
static uint64_t end_after_change(const struct worker *w, uint64_t t, uint64_t total,
                                 uint64_t left)
{
    if (w->s->clocks) return total;
    return t + (left + w->world - 1) / w->world;
}

/* Elastic jobs, at each replica check (--check-every): the processes that
 * asked to join come in (sfb_job_grow), and this worker takes its shard
 * of the grown job. Rank 0 then tells everyone, the joiners too (after
 * their attach: sfb__worker_open), the run's end and its clocks per epoch
 * (the learning rate's schedule counts in them). */
static int grow(struct worker *w, struct sfb__run_totals *rt, uint64_t t)
{
    uint64_t every = w->s->check_every;
    if (!w->s->elastic || !every || t == 0 || t % every) return 0;
    uint32_t n, was = w->world;
    double t0 = sfb__now();
    uint64_t left = (rt->total - t) * was;
    int ret = sfb_job_grow(w->job, (int64_t)t, w->join_text, 0, &n);
    if (ret || !n) return ret;
    if ((ret = sfb__worker_new_world(w))) return ret;
    uint64_t run[2] = {end_after_change(w, t, rt->total, left), rt->cpe};
    if ((ret = sfb_job_broadcast(w->job, 0, run, sizeof run))) return ret;
    rt->total = rt->pr.clocks = run[0];
    double dt = sfb__now() - t0;
    sfb__metrics_event(&w->metrics, "grow", "\"clock\":%llu,\"joined\":%u,\"world\":%u,"
                       "\"seconds\":%.6g", (unsigned long long)t, n, w->world, dt);
    if (w->rank == 0)
        SFB_LOG_I("clock %llu: %u worker%s joined: %u → %u workers (%.2f s)",
                  (unsigned long long)t, n, n > 1 ? "s" : "", was, w->world, dt);
    return 0;
}

/* Wait, local step, SFs and publish of clock t; fills the clock's timing. */
static int step(struct worker *w, struct sfb__run_totals *rt, uint64_t t,
                struct sfb__clock_metrics *cm, struct sfb_job_clock *acct, double *loss)
{
    const struct sfb_train_settings *s = w->s;
    uint32_t nm = sfb_model_n_matrices(w->model);
    int ret = sfb_job_wait(w->job, (int64_t)t, acct);
    if (ret) return ret;
    cm->min_applied = acct->min_applied;
    /* The previous clock's regularizer / projection, now that the wait
     * applied every update the SSP bound requires: under BSP every
     * replica decays / projects the same matrix. (A checkpoint of clock
     * t holds the replica before this step; a resumed run redoes it.) */
    if (t > 0 && w->skip_local != (int64_t)t)
        sfb_model_apply_local(w->model, (float)sfb_train_lr(s, t - 1, rt->cpe));
    w->local_through = (int64_t)t - 1;
    /* every replica holds the updates of clocks < t: compared here (a
     * worker that joined at t comes after that clock's check), and the
     * processes waiting to join an elastic job come in */
    if (w->skip_check != (int64_t)t) {
        if ((ret = sfb__replicas_at_clock(w, &w->replicas, (int64_t)t))) return ret;
        if ((ret = grow(w, rt, t))) return ret;
    }

    double t0 = sfb__now();
    cm->t_begin = t0;
    if ((ret = sfb_sampler_batch(w->sampler, t, w->idx))) return ret;
    ret = sfb_model_factors(w->model, &w->train, w->idx, w->batch, (float)(cm->lr / w->world),
                            w->sf, loss);
    if (ret) return ret;
    debug_delay(w, sfb__now() - t0);
    /* before publishing: the factors of a diverged step hold NaNs, which
     * publish (and every peer) refuses; the loss says why */
    if (!isfinite(*loss))
        return sfb__error(-ERANGE,
                          "training diverged at clock %llu (loss is %g): lower --lr "
                          "(now %g)",
                          (unsigned long long)t, *loss, sfb_train_lr0(s));
    double t1 = sfb__now();
    cm->t_publish = t1;
    if (t + 1 == rt->total && (ret = sfb_job_set_last_clock(w->job, (int64_t)t))) return ret;
    if ((ret = sfb_job_publish(w->job, (int64_t)t, w->sf, nm))) return ret;
    double t2 = sfb__now();
    if (t + 1 == rt->total) sfb__phase_mark(SFB__PH_LAST_CLOCK);
    cm->compute_s = t1 - t0;
    cm->wall = t2 - rt->t_start;
    cm->apply_s = acct->apply_s + (t2 - t1);
    return 0;
}

/* The clock's metrics line and the loss sums. What publish spent waiting
 * for peers' frames (step() counted all of publish as apply) is a wait. */
static void account(struct worker *w, struct sfb__run_totals *rt, uint64_t t,
                    struct sfb__clock_metrics *cm, struct sfb_job_clock *acct,
                    struct sfb_job_stats *prev, double loss)
{
    struct sfb_job_stats now = {.size = sizeof now};
    sfb_job_stats(w->job, &now);
    double pw = now.publish_wait_s - prev->publish_wait_s;
    acct->wait_s += pw;
    cm->apply_s = SFB_MAX(0.0, cm->apply_s - pw);
    cm->bytes_sent = now.bytes_sent - prev->bytes_sent;
    cm->bytes_recv = now.bytes_recv - prev->bytes_recv;
    cm->msgs_sent = now.msgs_sent - prev->msgs_sent;
    cm->msgs_recv = now.msgs_recv - prev->msgs_recv;
    cm->data_msgs = now.data_msgs - prev->data_msgs;
    cm->data_bytes = now.data_bytes - prev->data_bytes;
    *prev = now;
    cm->wait_s = acct->wait_s;
    cm->budget_wait_s = acct->budget_wait_s;
    cm->queued_bytes = now.queued_bytes;
    cm->staleness = acct->staleness;
    cm->applied_early = acct->applied_early;
    cm->objective = loss / w->batch;
    cm->samples_per_s = (double)(t + 1 - rt->start) * w->batch / (cm->wall);
    sfb__metrics_clock(&w->metrics, cm);
    rt->loss_sum += loss;
    rt->loss_n += w->batch;
    rt->epoch_loss += loss;
    rt->epoch_n += w->batch;
}

/* After clock t: the epoch's evaluation (rank 0) and the progress line. */
static int report_clock(struct worker *w, struct sfb__run_totals *rt, uint64_t t,
                        const struct sfb__clock_metrics *cm, sfb_progress_fn progress,
                        void *user, double interval, struct sfb_train_result *res)
{
    const struct sfb_train_settings *s = w->s;
    uint32_t epoch = cm->epoch;
    int epoch_end = (t + 1) % rt->cpe == 0 || t + 1 == rt->total;
    int do_eval = w->rank == 0 && epoch_end && t + 1 < rt->total && s->eval_every &&
                  epoch % s->eval_every == 0;
    struct sfb_progress *pr = &rt->pr;
    pr->has_eval = 0;
    if (do_eval) {
        struct sfb_eval ev;
        int ret = evaluate(w, &ev);
        if (ret) return ret;
        pr->has_eval = ev.n > 0;
        pr->test_loss = ev.loss;
        pr->test_accuracy = ev.accuracy;
        if (ev.n)
            sfb__eval_event(w, t + 1, epoch, sfb__now() - rt->t_start, &ev,
                            rt->epoch_n ? rt->epoch_loss / rt->epoch_n : NAN);
    }
    if (epoch_end) {
        res->train_loss = rt->epoch_n ? rt->epoch_loss / rt->epoch_n : NAN;
        rt->epoch_loss = 0;
        rt->epoch_n = 0;
    }
    double now = sfb__now();
    if (progress && t + 1 < rt->total && (pr->has_eval || now - rt->last_report >= interval)) {
        pr->clock = t + 1;
        pr->epoch = epoch;
        pr->wall = now - rt->t_start;
        pr->train_loss = rt->loss_n ? rt->loss_sum / rt->loss_n : NAN;
        pr->samples_per_s = cm->samples_per_s;
        progress(user, pr);
        rt->last_report = now;
        rt->loss_sum = 0;
        rt->loss_n = 0;
    }
    return 0;
}

/* Every replica applies every update before anyone evaluates or writes;
 * then the last checkpoint, local step and evaluation. */
static int finish(struct worker *w, struct sfb__run_totals *rt, struct sfb_train_result *res,
                  struct sfb_eval *ev)
{
    const struct sfb_train_settings *s = w->s;
    uint64_t total = rt->total, start = rt->start, every = s->checkpoint_every;
    int ret;
    if (total && (ret = sfb_job_drain(w->job, (int64_t)total - 1, NULL))) return ret;
    sfb__phase_mark(SFB__PH_DRAINED);
    if ((ret = sfb__replicas_final(w, &w->replicas, (int64_t)total))) return ret;
    if ((ret = sfb__job_finish_after_drain(w->job, (int64_t)total - 1))) return ret;
    /* drained, and the finish's barrier stands for the checkpoint's */
    if (every && total > start && total % every == 0 && (ret = checkpoint(w, (int64_t)total, 1)))
        return ret;
    /* the last clock's local step, after the checkpoint as for every clock */
    if (total > 0) sfb_model_apply_local(w->model, (float)sfb_train_lr(s, total - 1, rt->cpe));
    /* what this run did: a resumed run computed clocks [start, total) */
    res->start_clock = start;
    res->clocks = total - start;
    res->samples = res->clocks * w->batch;
    res->wall = sfb__now() - rt->t_start;
    if ((ret = evaluate(w, ev))) return ret;
    res->peak_rss_bytes = sfb__peak_rss_bytes();
    struct sfb_job_stats st = {.size = sizeof st};
    sfb_job_stats(w->job, &st);
    res->budget_held_s = st.budget_held_s - rt->first.budget_held_s;
    res->test_loss = ev->loss;
    res->test_accuracy = ev->accuracy;
    if (ev->n)
        sfb__eval_event(w, total, sfb__epoch_after(total, rt->cpe), res->wall, ev,
                        res->train_loss);
    sfb__summary_events(w, rt, res);
    return 0;
}

static void final_progress(struct sfb__run_totals *rt, const struct sfb_train_result *res,
                           const struct sfb_eval *ev, sfb_progress_fn progress, void *user)
{
    struct sfb_progress *pr = &rt->pr;
    pr->clock = rt->total;
    pr->epoch = sfb__epoch_after(rt->total, rt->cpe);
    pr->wall = res->wall;
    pr->train_loss = rt->loss_n ? rt->loss_sum / rt->loss_n : NAN;
    pr->samples_per_s = res->wall > 0 ? (double)res->samples / res->wall : 0;
    pr->has_eval = ev->n > 0;
    pr->test_loss = ev->loss;
    pr->test_accuracy = ev->accuracy;
    pr->done = 1;
    progress(user, pr);
}

/* Clock t, whole: checkpoint, step, metrics, progress, trials. */
static int one_clock(struct worker *w, struct sfb__run_totals *rt, uint64_t t,
                     struct sfb_job_stats *prev, sfb_progress_fn progress, void *user,
                     double interval, struct sfb_train_result *res)
{
    const struct sfb_train_settings *s = w->s;
    uint64_t every = s->checkpoint_every;
    int ret;
    for (uint32_t i = 0; i < w->debug.n_die; i++)
        if (w->debug.die_rank[i] == (int)w->first_rank && (int64_t)t == w->debug.die_clock[i]) {
            SFB_LOG_W("SFB_DEBUG_DIE_AT: rank %u kills itself at clock %llu", w->first_rank,
                      (unsigned long long)t);
            raise(SIGKILL);
        }
    if (every && t > rt->start && t % every == 0 && (ret = checkpoint(w, (int64_t)t, 0)))
        return ret;
    struct sfb__clock_metrics cm;
    memset(&cm, 0, sizeof cm);
    cm.clock = (int64_t)t;
    cm.epoch = sfb__epoch_after(t + 1, rt->cpe);
    cm.lr = sfb_train_lr(s, t, rt->cpe);
    if (t == rt->start) {
        sfb__phase_mark(SFB__PH_FIRST_CLOCK);
        sfb__setup_event(w);
    }
    struct sfb_job_clock acct = {.size = sizeof acct};
    double loss = 0;
    if ((ret = step(w, rt, t, &cm, &acct, &loss))) return ret;
    account(w, rt, t, &cm, &acct, prev, loss);
    res->wait_s += acct.wait_s;
    res->budget_wait_s += acct.budget_wait_s;
    if ((ret = report_clock(w, rt, t, &cm, progress, user, interval, res))) return ret;
    uint32_t replans = w->trials.replans;
    if (t + 1 < rt->total &&
        (ret = sfb__trials_clock(&w->trials, w->job, (int64_t)t, &w->metrics, w->rank)))
        return ret;
    if (w->trials.replans != replans) sfb__worker_engines_changed(w);
    return 0;
}

/* An elastic job lost a rank (ret: the failure that said so): the job
 * shrinks (sfb_job_shrink: the survivors renumbered, every replica the
 * most advanced one's), this worker takes its new shard, and the clocks go
 * on from *t. Else ret, the job's end. */
static int go_on(struct worker *w, struct sfb__run_totals *rt, int ret, uint64_t *t)
{
    int lost = w->s->elastic ? sfb_job_lost(w->job) : -1;
    if (lost < 0) return ret;
    int64_t next;
    uint32_t src;
    double t0 = sfb__now();
    uint32_t was = w->world;
    if ((ret = sfb_job_shrink(w->job, &next, &src))) return ret;
    if ((ret = sfb__worker_new_world(w))) return ret;
    rt->total = end_after_change(w, (uint64_t)next, rt->total,
                                 (rt->total - (uint64_t)next) * was);
    rt->pr.clocks = rt->total;
    /* whether the replica taken holds clock next − 1's local step */
    int64_t local = w->local_through;
    if (w->world > 1 && (ret = sfb_job_broadcast(w->job, src, &local, sizeof local))) return ret;
    w->skip_local = local >= next - 1 ? next : -1;
    w->local_through = local;
    double dt = sfb__now() - t0;
    sfb__metrics_event(&w->metrics, "elastic",
                       "\"lost\":%d,\"clock\":%lld,\"world\":%u,\"new_rank\":%u,"
                       "\"source\":%u,\"seconds\":%.6g",
                       lost, (long long)next, w->world, w->rank, src, dt);
    if (w->rank == 0)
        SFB_LOG_I("rank %d is lost: %u workers go on from clock %lld with rank %u's replicas "
                  "(%.2f s)", lost, w->world, (long long)next, src, dt);
    *t = (uint64_t)next;
    return 0;
}

static int run(struct worker *w, sfb_progress_fn progress, void *user, double interval,
               struct sfb_train_result *res)
{
    const struct sfb_train_settings *s = w->s;
    struct sfb__run_totals rt;
    memset(&rt, 0, sizeof rt);
    rt.cpe = sfb_sampler_clocks_per_epoch(w->sampler);
    rt.total = s->clocks ? s->clocks : (uint64_t)s->epochs * rt.cpe;
    /* a joiner: the job's end and clocks per epoch, whatever its shard's (grow) */
    if (w->joined) {
        rt.total = w->joined_run[0];
        rt.cpe = w->joined_run[1];
    }
    rt.start = (uint64_t)w->start;
    rt.t_start = rt.last_report = sfb__now();
    /* this run's traffic: a resumed run's counters start after the resume */
    rt.first.size = sizeof rt.first;
    sfb_job_stats(w->job, &rt.first);
    struct sfb_job_stats prev = rt.first;
    rt.pr.size = sizeof rt.pr;
    rt.pr.rank = w->rank;
    rt.pr.clocks = rt.total;
    int ret = 0;
    if (rt.start > rt.total)
        return sfb__error(-SFB_EUSAGE, "resumed at clock %llu, beyond the %llu clocks of this run",
                          (unsigned long long)rt.start, (unsigned long long)rt.total);
    uint64_t t = rt.start;
    struct sfb_eval ev;
    for (;;) {
        for (; t < rt.total && !ret; t += !ret)
            ret = one_clock(w, &rt, t, &prev, progress, user, interval, res);
        if (!ret) ret = finish(w, &rt, res, &ev);
        if (!ret || (ret = go_on(w, &rt, ret, &t))) break;
        rt.pr.rank = w->rank;
    }
    res->rank = w->rank;
    res->world = w->world;
    if (ret) return ret;
    if (progress) final_progress(&rt, res, &ev, progress, user);
    ret = write_model(w, (int64_t)rt.total);
    sfb__phase_mark(SFB__PH_REPORTED);
    return ret;
}

/* The first version's size of struct sfb_train_result */
#define RESULT_V1 SFB_END_OF(struct sfb_train_result, budget_held_s)

static int train_run(const struct sfb_train_settings *s, sfb_progress_fn progress, void *user,
                     double progress_interval, struct sfb_train_result *res);

int sfb_train_run(const struct sfb_train_settings *s, sfb_progress_fn progress, void *user,
                  double progress_interval, struct sfb_train_result *res)
{
    SFB_ENTER();
    SFB_ARG(res);
    SFB_ARG(s);
    int ret = SFB_CHECK_SIZE(res, "sfb_train_result", RESULT_V1);
    if (ret) return ret;
    /* filled whole here, handed out as far as the caller's size reaches */
    struct sfb_train_result all;
    memset(&all, 0, sizeof all);
    all.size = sizeof all;
    all.test_loss = all.test_accuracy = all.train_loss = NAN;
    ret = train_run(s, progress, user, progress_interval, &all);
    sfb__sized_copy(res, res->size, &all, sizeof all);
    return ret;
}

static int train_run(const struct sfb_train_settings *s, sfb_progress_fn progress, void *user,
                     double progress_interval, struct sfb_train_result *res)
{
    int ret = sfb__train_validate(s);
    if (ret) return ret;
    sfb_set_blas_threads(s->threads);
    sfb__phase_reset();
    sfb__phase_mark(SFB__PH_MAIN);
    struct worker w;
    ret = sfb__worker_open(&w, s);
    if (ret == 0) {
        res->rank = w.rank;
        res->world = w.world;
        ret = run(&w, progress, user, progress_interval, res);
        if (ret && w.job) {
            /* tell the others why, so they stop at once naming this rank */
            char why[600];
            const char *e = sfb_error_message(ret);
            if (!strncmp(e, "rank ", 5))
                snprintf(why, sizeof why, "%s", e);
            else
                snprintf(why, sizeof why, "rank %u: %s", w.rank, e);
            sfb_job_abort(w.job, why);
            sfb__error(ret, "%s", why);
        }
    }
    /* metrics last, so that the teardown event sees the transport closed */
    sfb__worker_close(&w);
    sfb__phase_mark(SFB__PH_CLOSED);
    if (ret == 0) sfb__teardown_event(&w.metrics);
    if (ret == 0)
        ret = sfb__metrics_close(&w.metrics);
    else
        sfb__metrics_close(&w.metrics);
    return ret;
}
