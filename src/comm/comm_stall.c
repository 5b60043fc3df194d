/* Stalls: a wait that cannot end although every peer is alive. Liveness
 * (comm_live.c) fails a job whose peer is dead or silent; a peer that
 * heart-beats while its updates never arrive (a transport that stopped
 * moving data, a relay that lost a frame) would leave the SSP wait waiting
 * forever. Telling that from a slow peer (computing, evaluating, itself
 * waiting) takes the peer's word: once a wait has lasted a quarter of
 * stall_timeout_s, the waiting rank asks each peer whose updates it lacks
 * what it has published (a HEARTBEAT with the "answer me" flag in its
 * payload; docs/wire.md), and every quarter again. A peer that answers
 * "clock c, published x seconds ago", with c beyond what this rank has
 * applied from it and x past the timeout, has an update in flight for that
 * long: the job fails, naming both ranks and the clock. A peer still
 * computing answers with an older clock, which this rank has: no failure,
 * however long the wait. Only SF frames mark a clock published (the FMS
 * engine's exchanges go through servers, whose clocks mean something else).
 *
 * Status payload (little-endian): i64 newest published clock (-1: none),
 * u64 microseconds since it was published, u64 flags (bit 0: answer me). */
#include "config.h"
#include "src/comm/comm_impl.h"
#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/ssp/ssp.h"

#include <stdio.h>

#define STATUS_LEN 24
#define STATUS_ASK 1u

static int send_status(struct sfb__comm *c, uint32_t dst, uint64_t flags)
{
    uint8_t p[STATUS_LEN];
    int64_t pub = atomic_load_explicit(&c->stall.published, memory_order_acquire);
    int64_t at = atomic_load_explicit(&c->stall.published_us, memory_order_relaxed);
    int64_t age = pub >= 0 ? (int64_t)(sfb__comm_clock(c) * 1e6) - at : 0;
    sfb__put_u64(p, (uint64_t)pub);
    sfb__put_u64(p + 8, (uint64_t)(age > 0 ? age : 0));
    sfb__put_u64(p + 16, flags);
    return sfb__comm_send_control(c, dst, SFB_WIRE_HEARTBEAT, p, sizeof p, 0.0);
}

/* Loop thread: a peer's status. Untrusted: a short payload or absurd values
 * are ignored (a clock below -1, an age over a year). */
void sfb__comm_on_status(struct sfb__comm *c, uint32_t src, const uint8_t *payload, size_t len)
{
    if (len < STATUS_LEN || !c->stall.peer_pub) return;
    int64_t pub = (int64_t)sfb__get_u64(payload);
    uint64_t age = sfb__get_u64(payload + 8), flags = sfb__get_u64(payload + 16);
    if (pub >= -1 && age < 365ull * 86400 * 1000000) {
        atomic_store_explicit(&c->stall.peer_pub_us[src],
                              (int64_t)(sfb__comm_clock(c) * 1e6) - (int64_t)age,
                              memory_order_relaxed);
        atomic_store_explicit(&c->stall.peer_pub[src], pub, memory_order_release);
    }
    if (flags & STATUS_ASK) {
        sfb__comm_awake(c, sfb__now()); /* an age that leaves out a stop of its own */
        send_status(c, src, 0);
    }
}

void sfb__comm_stall_arrived(struct sfb__comm *c, uint32_t origin, int64_t through)
{
    if (!c || !c->stall.arrived || origin >= c->world) return;
    if (through > atomic_load_explicit(&c->stall.arrived[origin], memory_order_relaxed))
        atomic_store_explicit(&c->stall.arrived[origin], through, memory_order_relaxed);
}

int sfb__comm_check_stall(struct sfb__comm *c, int64_t required, double since,
                          const struct sfb__ssp *ssp)
{
    double T = c->s.stall_timeout_s, now = sfb__now();
    if (!(T > 0) || !c->stall.peer_pub) return 0;
    /* A check seconds late: the job stopped and continued. Ask nothing and
     * blame no one until the loop thread has seen the stop too (its clock,
     * sfb__comm_clock, then leaves it out) and the peers have answered
     * afresh (theirs leave out their own). */
    if (sfb__gap(&c->stall.last_look, now, 2.0) > 0) {
        c->stall.hold_until = now + SFB_MAX(1.0, 4 * c->s.heartbeat_s);
        c->stall.next_probe = c->stall.hold_until;
    }
    if (now - since < T / 4 || now < c->stall.hold_until) return 0;
    int ask = now >= c->stall.next_probe;
    if (ask) c->stall.next_probe = now + T / 4;
    for (uint32_t o = 0; o < c->world; o++) {
        /* applied, or here and held (an ordered engine's complete updates) */
        int64_t have = SFB_MAX(sfb__ssp_applied(ssp, o),
                               atomic_load_explicit(&c->stall.arrived[o], memory_order_relaxed));
        if (o == c->rank || have >= required) continue;
        int64_t pub = atomic_load_explicit(&c->stall.peer_pub[o], memory_order_acquire);
        double age = sfb__comm_clock(c) - 1e-6 * (double)atomic_load_explicit(
                                                &c->stall.peer_pub_us[o], memory_order_relaxed);
        if (pub > have && age > T) {
            char got[64];
            if (have < 0) snprintf(got, sizeof got, "none of its updates");
            else snprintf(got, sizeof got, "its updates through clock %lld", (long long)have);
            atomic_store_explicit(&c->fail.found_here, 1, memory_order_relaxed);
            sfb__comm_fail(c, (int)o,
                           "stalled: rank %u published clock %lld %.1f s ago; rank %u, waiting "
                           "%.1f s for clock %lld, has %s: lost in transit (the transport or a "
                           "relay), every rank alive (--stall-timeout %g s)",
                           o, (long long)pub, age, c->rank, now - since, (long long)required, got,
                           T);
            return sfb__comm_check(c);
        }
        if (ask) send_status(c, o, STATUS_ASK);
    }
    return 0;
}
