/* One worker's training loop. With world == 1 every update is the worker's
 * own and is applied immediately (read-my-writes); the distributed sync
 * engines plug in at `apply_updates`. */
#include "config.h"
#include "sfb/model.h"
#include "sfb/train.h"
#include "src/common.h"
#include "src/metrics.h"

#include <math.h>
#include <string.h>

void sfb_train_default_settings(struct sfb_train_settings *s)
{
    memset(s, 0, sizeof *s);
    s->model = "mlr";
    s->data = "fashion-mnist";
    sfb_libsvm_default_settings(&s->libsvm);
    s->batch = 32;
    s->epochs = 10;
    s->lr = 1.0;
    s->lr_schedule = SFB_LR_INVSQRT;
    s->lr_decay = 0.5;
    s->seed = 1;
    s->threads = 1;
    s->eval_every = 1;
    s->world = 1;
}

double sfb_train_lr(const struct sfb_train_settings *s, uint64_t clock, uint64_t cpe)
{
    /* Default period: 1 % of an epoch, so the step decays like 1/sqrt(t)
     * early on whatever the batch size. */
    double period = (double)(s->lr_period ? s->lr_period : SFB_MAX(cpe / 100, (uint64_t)1));
    switch (s->lr_schedule) {
    case SFB_LR_INVSQRT:
        return s->lr / sqrt(1.0 + (double)clock / period);
    case SFB_LR_STEP:
        return s->lr * pow(s->lr_decay, floor((double)clock / period));
    case SFB_LR_CONSTANT:
    default:
        return s->lr;
    }
}

struct worker {
    const struct sfb_train_settings *s;
    struct sfb_dataset train, test;
    struct sfb_model *model;
    struct sfb_sampler *sampler;
    struct sfb_reconstruct *recon;
    struct sfb_sf sf[SFB_MODEL_MAX_MATRICES];
    uint64_t *idx;
    struct sfb__metrics metrics;
};

static int validate(const struct sfb_train_settings *s)
{
    if (!s->model || !sfb_model_find(s->model))
        return sfb__error(-EINVAL, "unknown model \"%s\" (known: %s)", s->model ? s->model : "",
                          sfb_model_names());
    if (!s->data) return sfb__error(-EINVAL, "no data given");
    if (s->batch == 0) return sfb__error(-EINVAL, "batch size must be at least 1");
    if (s->world == 0 || s->rank >= s->world)
        return sfb__error(-EINVAL, "rank %u is outside a world of %u", s->rank, s->world);
    if (!(s->lr > 0) || !isfinite(s->lr))
        return sfb__error(-EINVAL, "learning rate must be a positive number, not %g", s->lr);
    if (!(s->lambda >= 0) || !isfinite(s->lambda))
        return sfb__error(-EINVAL, "lambda must be >= 0, not %g", s->lambda);
    if (s->epochs == 0 && s->clocks == 0)
        return sfb__error(-EINVAL, "nothing to do: epochs and clocks are both 0");
    return 0;
}

static int evaluate(struct worker *w, struct sfb_eval *ev)
{
    ev->loss = ev->accuracy = NAN;
    ev->n = 0;
    if (w->test.n == 0) return 0;
    return sfb_model_evaluate(w->model, &w->test, ev);
}

static void worker_close(struct worker *w)
{
    for (int i = 0; i < SFB_MODEL_MAX_MATRICES; i++) sfb_sf_free(&w->sf[i]);
    free(w->idx);
    sfb_reconstruct_close(&w->recon);
    sfb_sampler_close(&w->sampler);
    sfb_model_close(&w->model);
    sfb_dataset_free(&w->train);
    sfb_dataset_free(&w->test);
}

static int worker_open(struct worker *w, const struct sfb_train_settings *s)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    int ret = sfb_data_load(s->data, s->test_data, &s->libsvm, &w->train, &w->test);
    if (ret) return ret;
    SFB_LOG_I("data %s: %llu samples, %u features, %u classes%s; test set %llu samples",
              s->data, (unsigned long long)w->train.n, w->train.d, w->train.k,
              w->train.sparse ? " (sparse)" : "", (unsigned long long)w->test.n);

    struct sfb_model_settings ms;
    sfb_model_default_settings(&ms);
    ms.kind = s->model;
    ms.d = w->train.d;
    ms.k = w->train.k;
    ms.lambda = s->lambda;
    ms.seed = s->seed;
    if ((ret = sfb_model_open(&w->model, &ms))) return ret;
    if ((ret = sfb_sampler_open(&w->sampler, w->train.n, s->rank, s->world, s->batch, s->seed)))
        return ret;
    if (sfb_sampler_clocks_per_epoch(w->sampler) == 0)
        return sfb__error(-EINVAL,
                          "%s has %llu samples, fewer than one clock needs (%u workers x batch %u)",
                          s->data, (unsigned long long)w->train.n, s->world, s->batch);
    if ((ret = sfb_reconstruct_open(&w->recon))) return ret;
    w->idx = malloc(sizeof *w->idx * s->batch);
    if (!w->idx) return sfb__error(-ENOMEM, "out of memory");
    return sfb__metrics_open(&w->metrics, s->metrics_out, s->rank);
}

/* Applies this clock's updates. Single worker: its own SFs, at once. */
static int apply_updates(struct worker *w)
{
    uint32_t n = sfb_model_n_matrices(w->model);
    for (uint32_t m = 0; m < n; m++) {
        const struct sfb_sf *one = &w->sf[m];
        int ret = sfb_reconstruct_apply(w->recon, sfb_model_matrix(w->model, m), &one, 1);
        if (ret) return ret;
    }
    return 0;
}

int sfb_train_run(const struct sfb_train_settings *s, sfb_progress_fn progress, void *user,
                  double progress_interval, struct sfb_train_result *res)
{
    memset(res, 0, sizeof *res);
    res->test_loss = res->test_accuracy = res->train_loss = NAN;
    int ret = validate(s);
    if (ret) return ret;
    sfb_set_blas_threads(s->threads);
    struct worker w;
    ret = worker_open(&w, s);
    if (ret) goto out;

    uint64_t cpe = sfb_sampler_clocks_per_epoch(w.sampler);
    uint64_t total = s->clocks ? s->clocks : (uint64_t)s->epochs * cpe;
    /* The step is per global minibatch: each worker's SFs carry 1/world of it,
     * so P workers with batch S follow one worker with batch P·S exactly. */
    double t_start = sfb__now(), last_report = t_start;
    double loss_sum = 0, epoch_loss = 0;
    uint64_t loss_n = 0, epoch_n = 0;
    struct sfb_progress pr;
    memset(&pr, 0, sizeof pr);
    pr.rank = s->rank;
    pr.clocks = total;

    for (uint64_t t = 0; t < total; t++) {
        uint32_t epoch = (uint32_t)(t / cpe) + 1;
        double eta = sfb_train_lr(s, t, cpe);
        struct sfb__clock_metrics cm;
        memset(&cm, 0, sizeof cm);
        cm.clock = (int64_t)t;
        cm.epoch = epoch;
        cm.lr = eta;

        double t0 = sfb__now();
        if ((ret = sfb_sampler_batch(w.sampler, t, w.idx))) goto out;
        double loss = 0;
        ret = sfb_model_factors(w.model, &w.train, w.idx, s->batch, (float)(eta / s->world),
                                w.sf, &loss);
        if (ret) goto out;
        for (uint32_t m = 0; m < sfb_model_n_matrices(w.model); m++) {
            w.sf[m].origin = s->rank;
            w.sf[m].clock = (int64_t)t;
        }
        double t1 = sfb__now();
        if ((ret = apply_updates(&w))) goto out;
        sfb_model_apply_local(w.model, (float)eta);
        double t2 = sfb__now();

        if (!isfinite(loss)) {
            ret = sfb__error(-ERANGE,
                             "training diverged at clock %llu (loss is %g): lower --lr "
                             "(now %g)",
                             (unsigned long long)t, loss, s->lr);
            goto out;
        }
        cm.compute_s = t1 - t0;
        cm.apply_s = t2 - t1;
        cm.wall = t2 - t_start;
        cm.objective = loss / s->batch;
        cm.samples_per_s = (double)(t + 1) * s->batch / (t2 - t_start);
        sfb__metrics_clock(&w.metrics, &cm);
        loss_sum += loss;
        loss_n += s->batch;
        epoch_loss += loss;
        epoch_n += s->batch;

        int epoch_end = (t + 1) % cpe == 0 || t + 1 == total;
        int do_eval = epoch_end && (t + 1 == total || (s->eval_every &&
                                                       epoch % s->eval_every == 0));
        pr.has_eval = 0;
        if (do_eval) {
            struct sfb_eval ev;
            if ((ret = evaluate(&w, &ev))) goto out;
            pr.has_eval = ev.n > 0;
            pr.test_loss = ev.loss;
            pr.test_accuracy = ev.accuracy;
            res->test_loss = ev.loss;
            res->test_accuracy = ev.accuracy;
            if (ev.n)
                sfb__metrics_event(&w.metrics, "eval",
                                   "\"clock\":%llu,\"epoch\":%u,\"wall\":%.6g,\"test_loss\":%.6g,"
                                   "\"test_accuracy\":%.6g,\"train_loss\":%.6g",
                                   (unsigned long long)(t + 1), epoch, sfb__now() - t_start,
                                   ev.loss, ev.accuracy, epoch_n ? epoch_loss / epoch_n : NAN);
        }
        if (epoch_end) {
            res->train_loss = epoch_n ? epoch_loss / epoch_n : NAN;
            epoch_loss = 0;
            epoch_n = 0;
        }
        double now = sfb__now();
        if (progress && (pr.has_eval || now - last_report >= progress_interval || t + 1 == total)) {
            pr.clock = t + 1;
            pr.epoch = epoch;
            pr.wall = now - t_start;
            pr.train_loss = loss_n ? loss_sum / loss_n : NAN;
            pr.samples_per_s = cm.samples_per_s;
            pr.done = t + 1 == total;
            progress(user, &pr);
            last_report = now;
            loss_sum = 0;
            loss_n = 0;
        }
    }
    res->clocks = total;
    res->samples = total * s->batch;
    res->wall = sfb__now() - t_start;
    sfb__metrics_event(&w.metrics, "summary",
                       "\"clocks\":%llu,\"samples\":%llu,\"wall\":%.6g,\"samples_per_s\":%.6g,"
                       "\"test_accuracy\":%.6g",
                       (unsigned long long)res->clocks, (unsigned long long)res->samples,
                       res->wall, res->wall > 0 ? (double)res->samples / res->wall : 0.0,
                       isfinite(res->test_accuracy) ? res->test_accuracy : -1.0);
    if (s->model_out && s->rank == 0) {
        if ((ret = sfb_model_save(w.model, s->model_out, (int64_t)total))) goto out;
    }
out:
    if (ret == 0)
        ret = sfb__metrics_close(&w.metrics);
    else
        sfb__metrics_close(&w.metrics);
    worker_close(&w);
    return ret;
}
