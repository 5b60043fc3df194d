/* The registry of sync engines (sfb/sync.h), found by their --sync name,
 * and the accounting they share. */
#include "config.h"
#include "sfb/sync.h"
#include "src/base/common.h"

#include <string.h>

static const struct sfb__sync_ops *const engines[] = {&sfb__broadcast_ops, &sfb__fms_ops};

const struct sfb__sync_ops *sfb__sync_find(const char *name)
{
    for (size_t i = 0; name && i < SFB_ARRAY_LEN(engines); i++)
        if (!strcmp(engines[i]->name, name)) return engines[i];
    return NULL;
}

const struct sfb__sync_ops *sfb__sync_registry(size_t i)
{
    return i < SFB_ARRAY_LEN(engines) ? engines[i] : NULL;
}

void sfb__sync_count_applied(uint64_t *hist, struct sfb__sync_clock *acct, int64_t now_clock,
                             int64_t clock, int64_t required)
{
    int64_t st = now_clock - clock - 1;
    if (st < 0) st = 0;
    hist[st < SFB_STALENESS_BINS - 1 ? st : SFB_STALENESS_BINS - 1]++;
    if (st > acct->staleness) acct->staleness = st;
    acct->applied++;
    if (clock > required) acct->applied_early++;
}
