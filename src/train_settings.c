/* Training settings: defaults, the step-size schedules, and the checks a
 * run's settings pass before anything starts (src/train.c runs the loop). */
#include "config.h"
#include "sfb/model.h"
#include "sfb/sync.h"
#include "sfb/train.h"
#include "src/common.h"
#include "src/train_settings.h"

#include <errno.h>
#include <math.h>
#include <string.h>

void sfb_train_default_settings(struct sfb_train_settings *s)
{
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->model = "mlr";
    s->data = "fashion-mnist";
    sfb_libsvm_default_settings(&s->libsvm);
    s->batch = 0;
    s->epochs = 10;
    s->lr = 0; /* the model's default */
    s->lr_schedule = SFB_LR_INVSQRT;
    s->lr_decay = 0.5;
    s->lambda = -1;
    s->seed = 1;
    s->threads = 1;
    s->eval_every = 1;
    s->sync = "sfb";
    s->staleness = 0;
    s->apply_early = -1;
    s->peer_timeout = 5.0;
    s->topology = "full";
    s->debug_slow_rank = -1;
    s->debug_slow_factor = 1.0;
}

double sfb_train_lr0(const struct sfb_train_settings *s)
{
    SFB_ARG_OR(s, NAN);
    if (s->lr > 0) return s->lr;
    return s->model && !strcmp(s->model, "dml") ? 0.01 : 1.0;
}

double sfb_train_lr(const struct sfb_train_settings *s, uint64_t clock, uint64_t cpe)
{
    SFB_ARG_OR(s, NAN);
    double lr = sfb_train_lr0(s);
    /* Default period: 1 % of an epoch, so the step decays like 1/sqrt(t)
     * early on whatever the batch size. */
    double period = (double)(s->lr_period ? s->lr_period : SFB_MAX(cpe / 100, (uint64_t)1));
    switch (s->lr_schedule) {
    case SFB_LR_INVSQRT:
        return lr / sqrt(1.0 + (double)clock / period);
    case SFB_LR_STEP:
        return lr * pow(s->lr_decay, floor((double)clock / period));
    case SFB_LR_CONSTANT:
    default:
        return lr;
    }
}

int sfb__train_validate(const struct sfb_train_settings *s)
{
    if (!s->model || !sfb_model_find(s->model))
        return sfb__error(-EINVAL, "unknown model \"%s\" (known: %s)", s->model ? s->model : "",
                          sfb_model_names());
    if (!s->data) return sfb__error(-EINVAL, "no data given");
    if (!(s->lr >= 0) || !isfinite(s->lr))
        return sfb__error(-EINVAL, "learning rate must be a positive number, not %g", s->lr);
    if (!isfinite(s->lambda)) return sfb__error(-EINVAL, "lambda must be a number >= 0");
    if (s->epochs == 0 && s->clocks == 0)
        return sfb__error(-EINVAL, "nothing to do: epochs and clocks are both 0");
    if (s->staleness < -1) return sfb__error(-EINVAL, "staleness must be >= -1");
    if (!sfb__sync_find(s->sync ? s->sync : ""))
        return sfb__error(-EINVAL, "unknown synchronization \"%s\"", s->sync ? s->sync : "");
    /* A checkpoint drains mid-run; a clock-flushing relay would leave clock
     * mode for good after its drain (sfb/broadcast.c). */
    if ((s->checkpoint_every || s->resume_dir) && s->flush_clock)
        return sfb__error(-SFB_EUSAGE, "--checkpoint-every and --resume need --flush eager "
                          "(a checkpoint drains the relays mid-run)");
    return 0;
}

