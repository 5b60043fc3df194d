#include "config.h"
#include "src/ssp/ssp.h"
#include "src/base/util.h"

#include <string.h>

int sfb__ssp_init(struct sfb__ssp *t, uint32_t world, int64_t staleness, int64_t start_clock)
{
    memset(t, 0, sizeof *t);
    t->world = world;
    t->staleness = staleness;
    t->o = calloc(world, sizeof *t->o);
    if (!t->o) return -ENOMEM;
    for (uint32_t i = 0; i < world; i++) t->o[i].applied = start_clock - 1;
    return 0;
}

void sfb__ssp_fini(struct sfb__ssp *t)
{
    if (t->o)
        for (uint32_t i = 0; i < t->world; i++) free(t->o[i].above);
    free(t->o);
    free(t->record);
    memset(t, 0, sizeof *t);
}

int sfb__ssp_is_applied(const struct sfb__ssp *t, uint32_t origin, int64_t clock)
{
    if (origin >= t->world) return 0;
    const struct sfb__ssp_origin *o = &t->o[origin];
    if (clock <= o->applied) return 1;
    uint64_t bit = (uint64_t)(clock - o->applied - 1);
    if (bit / 64 >= o->words) return 0;
    return (o->above[bit / 64] >> (bit % 64)) & 1;
}

/* Drops the leading run of applied clocks into `applied`. */
static void advance(struct sfb__ssp_origin *o)
{
    for (;;) {
        if (o->words == 0 || !(o->above[0] & 1)) return;
        /* count trailing ones of the first word, shift the whole bitmap */
        unsigned n = o->above[0] == UINT64_MAX ? 64 : (unsigned)__builtin_ctzll(~o->above[0]);
        o->applied += n;
        for (size_t w = 0; w < o->words; w++) {
            uint64_t next = w + 1 < o->words ? o->above[w + 1] : 0;
            o->above[w] = n == 64 ? next : (o->above[w] >> n) | (n ? next << (64 - n) : 0);
        }
    }
}

int sfb__ssp_mark(struct sfb__ssp *t, uint32_t origin, int64_t clock)
{
    if (origin >= t->world) return -EINVAL;
    struct sfb__ssp_origin *o = &t->o[origin];
    if (sfb__ssp_is_applied(t, origin, clock)) return -EALREADY;
    uint64_t bit = (uint64_t)(clock - o->applied - 1);
    size_t need = (size_t)(bit / 64 + 1);
    if (need > o->words) {
        uint64_t *p = realloc(o->above, need * sizeof *p);
        if (!p) return -ENOMEM;
        memset(p + o->words, 0, (need - o->words) * sizeof *p);
        o->above = p;
        o->words = need;
    }
    o->above[bit / 64] |= (uint64_t)1 << (bit % 64);
    advance(o);
    return 0;
}

int64_t sfb__ssp_applied(const struct sfb__ssp *t, uint32_t origin)
{
    return origin < t->world ? t->o[origin].applied : INT64_MIN;
}

int64_t sfb__ssp_min_applied(const struct sfb__ssp *t)
{
    int64_t m = INT64_MAX;
    for (uint32_t i = 0; i < t->world; i++) m = SFB_MIN(m, t->o[i].applied);
    return m;
}

int64_t sfb__ssp_required(const struct sfb__ssp *t, int64_t clock)
{
    if (t->staleness < 0) return INT64_MIN;
    return clock - t->staleness - 1;
}

int sfb__ssp_ready(const struct sfb__ssp *t, int64_t clock)
{
    return sfb__ssp_min_applied(t) >= sfb__ssp_required(t, clock);
}

int sfb__ssp_record(struct sfb__ssp *t, int64_t clock)
{
    if (clock < 0) return -EINVAL;
    size_t need = (size_t)clock + 1;
    if (need > t->record_cap) {
        size_t cap = t->record_cap ? t->record_cap : 256;
        while (cap < need) cap *= 2;
        int64_t *p = realloc(t->record, cap * sizeof *p);
        if (!p) return -ENOMEM;
        t->record = p;
        t->record_cap = cap;
    }
    for (size_t i = t->record_len; i < need; i++) t->record[i] = INT64_MIN;
    if (need > t->record_len) t->record_len = need;
    t->record[clock] = sfb__ssp_min_applied(t);
    return 0;
}
