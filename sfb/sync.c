/* The registry of sync engines (sfb/sync.h), found by their --sync name.
 * What the engines share (accounting, the wait loop) is in engine.c, so
 * they never call into the file that lists them. */
#include "config.h"
#include "sfb/sync.h"
#include "src/base/util.h"

#include <stdio.h>
#include <string.h>

static const struct sfb__sync_desc *const engines[] = {&sfb__broadcast_desc, &sfb__fms_desc};

const struct sfb__sync_desc *sfb__sync_find(const char *name)
{
    for (size_t i = 0; name && i < SFB_ARRAY_LEN(engines); i++)
        if (!strcmp(engines[i]->name, name)) return engines[i];
    return NULL;
}

const struct sfb__sync_desc *sfb__sync_registry(size_t i)
{
    return i < SFB_ARRAY_LEN(engines) ? engines[i] : NULL;
}


int sfb__sync_is_auto(const char *spec)
{
    for (const char *p = spec; p;) {
        size_t len = strcspn(p, ",");
        if (len == 4 && !strncmp(p, "auto", 4)) return 1;
        p = p[len] ? p + len + 1 : NULL;
    }
    return 0;
}

int sfb__sync_parse(const char *spec, const struct sfb__sync_desc **out, uint32_t max,
                    uint32_t *n)
{
    *n = 0;
    for (const char *p = spec ? spec : "";; (*n)++) {
        size_t len = strcspn(p, ",");
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
        const struct sfb__sync_desc *e = len < sizeof name ? sfb__sync_find(name) : NULL;
        int is_auto = !strcmp(name, "auto");
        if (!e && !is_auto)
            return sfb__error(-SFB_EUSAGE, "sync \"%s\": \"%.*s\" is not an engine (sfb, fms, "
                              "auto; one for every matrix, or one per matrix, comma "
                              "separated)", spec ? spec : "", (int)len, p);
        if (*n >= max)
            return sfb__error(-SFB_EUSAGE, "sync \"%s\" names more engines than the %u "
                              "matrices", spec, max);
        out[*n] = e;
        if (!p[len]) break;
        p += len + 1;
    }
    (*n)++;
    return 0;
}
