/* The comm facade's read side and its collectives: what the engines (sfb/)
 * and the job API (src/job/job.c) may know of a comm context. They never
 * see its fields (src/comm/comm_impl.h) nor the bootstrap handle. */
#include "config.h"
#include "src/transport/transport.h"
#include "src/boot/agree.h"
#include "src/boot/bootstrap.h"
#include "src/comm/comm_impl.h"
#include "src/loop/loop.h"

#include <string.h>

uint32_t sfb__comm_rank(const struct sfb__comm *c)
{
    return c->rank;
}

uint32_t sfb__comm_world(const struct sfb__comm *c)
{
    return c->world;
}

uint32_t sfb__comm_max_s(const struct sfb__comm *c)
{
    return c->job.max_s;
}

size_t sfb__comm_copy_max(const struct sfb__comm *c)
{
    return c->t ? sfb__transport_copy_max(c->t) : 0;
}

uint32_t sfb__comm_local_ranks(const struct sfb__comm *c)
{
    return c->local_ranks ? c->local_ranks : 1;
}

uint64_t sfb__comm_job_key(const struct sfb__comm *c)
{
    return c->job_key;
}

struct sfb__transport *sfb__comm_transport(const struct sfb__comm *c)
{
    return c->t;
}

uint32_t sfb__comm_host(const struct sfb__comm *c, uint32_t r)
{
    return c->host_of && r < c->world ? c->host_of[r] : 0;
}

const struct sfb__wire_job *sfb__comm_wire_job(const struct sfb__comm *c)
{
    return &c->job;
}

void sfb__comm_traffic(const struct sfb__comm *c, struct sfb__comm_traffic *out)
{
    memset(out, 0, sizeof *out);
    if (!c->t) return;
    const struct sfb__transport_stats *st = sfb__transport_stats(c->t);
    out->bytes_sent = atomic_load(&st->bytes_sent);
    out->bytes_recv = atomic_load(&st->bytes_recv);
    out->frames_sent = atomic_load(&st->frames_sent);
    out->frames_recv = atomic_load(&st->frames_recv);
}

int sfb__comm_allgather(struct sfb__comm *c, const void *mine, size_t len, void *all)
{
    return sfb__bootstrap_allgather(c->bs, mine, len, all);
}

int sfb__comm_allgatherv(struct sfb__comm *c, const void *mine, size_t len, void **all,
                         size_t *lens)
{
    return sfb__bootstrap_allgatherv(c->bs, mine, len, all, lens);
}

int sfb__comm_broadcast(struct sfb__comm *c, uint32_t root, void *data, size_t len)
{
    return sfb__bootstrap_broadcast(c->bs, root, data, len);
}

int sfb__comm_agree(struct sfb__comm *c, const char *text)
{
    return sfb__agree(c->bs, c->world, text);
}

uint64_t sfb__comm_rejected_for(const struct sfb__comm *c, enum sfb__wire_reason reason)
{
    return reason < SFB_WIRE_NREASONS ? atomic_load(&c->wstats.rejected[reason]) : 0;
}
