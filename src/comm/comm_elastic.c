/* What an elastic job's comm keeps for its survivors (docs/design.md,
 * "Elastic jobs"): every rank's reserved rendezvous address, so that the
 * survivors of a death can meet again at the lowest survivor's without
 * the launcher, and the LOST frames that tell every survivor which rank
 * died. */
#include "config.h"
#include "src/comm/comm_impl.h"
#include "src/base/bytes.h"
#include "src/boot/bootstrap.h"
#include "src/transport/transport.h"

#include <string.h>
#include <unistd.h>

int sfb__comm_elastic_open(struct sfb__comm *c)
{
    char mine[SFB__COMM_ADDR_LEN] = {0};
    int ret = sfb__bootstrap_reserve(c->bs, &c->elastic.fd, mine, sizeof mine);
    if (ret) return ret;
    c->elastic.addrs = calloc(c->world, SFB__COMM_ADDR_LEN);
    if (!c->elastic.addrs) return sfb__error(-ENOMEM, "out of memory");
    ret = sfb__bootstrap_allgather(c->bs, mine, sizeof mine, c->elastic.addrs);
    for (uint32_t r = 0; !ret && r < c->world; r++)
        if (!memchr(c->elastic.addrs + (size_t)r * SFB__COMM_ADDR_LEN, 0, SFB__COMM_ADDR_LEN))
            ret = sfb__error(-SFB_EFORMAT, "rank %u sent a malformed rendezvous address", r);
    return ret;
}

void sfb__comm_elastic_close(struct sfb__comm *c)
{
    if (c->elastic.addrs && c->elastic.fd >= 0) close(c->elastic.fd);
    free(c->elastic.addrs);
    c->elastic.addrs = NULL;
    c->elastic.fd = -1;
}

const char *sfb__comm_elastic_addr(const struct sfb__comm *c, uint32_t r)
{
    return c->elastic.addrs && r < c->world ? c->elastic.addrs + (size_t)r * SFB__COMM_ADDR_LEN
                                            : NULL;
}

int sfb__comm_take_reservation(struct sfb__comm *c)
{
    int fd = c->elastic.addrs ? c->elastic.fd : -1;
    c->elastic.fd = -1;
    return fd;
}

void sfb__comm_tell_lost(struct sfb__comm *c, uint32_t lost)
{
    if (!c || !c->t) return;
    uint8_t k[4];
    sfb__put_u32(k, lost);
    for (uint32_t p = 0; p < c->world; p++)
        if (p != c->rank && p != lost) sfb__comm_send_control(c, p, SFB_WIRE_LOST, k, 4, 0.2);
    /* Delivered before this endpoint closes: a peer that has not failed yet
     * then takes the LOST before any error a send to this closed endpoint
     * would give (which would name this rank). Sends queued for the dead
     * rank never complete: the flush is bounded short. */
    sfb__transport_flush(c->t, 0.25);
}
