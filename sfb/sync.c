/* The registry of sync engines (sfb/sync.h), found by their --sync name.
 * What the engines share (accounting, the wait loop) is in engine.c, so
 * they never call into the file that lists them. */
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

