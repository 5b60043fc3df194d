/* The registry of sync engines (sfb/sync.h), found by their --sync name.
 * What the engines share (accounting, the wait loop) is in engine.c, so
 * they never call into the file that lists them. */
#include "config.h"
#include "sfb/sync.h"
#include "src/base/common.h"

#include <string.h>

const struct sfb__sync_ops *sfb__sync_find(const char *name)
{
    static const struct sfb__sync_ops *const engines[] = {&sfb__broadcast_ops, &sfb__fms_ops};
    for (size_t i = 0; i < SFB_ARRAY_LEN(engines); i++)
        if (!strcmp(engines[i]->name, name)) return engines[i];
    return NULL;
}
