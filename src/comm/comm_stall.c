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
 * u64 microseconds since it was published, u64 flags (bit 0: answer me;
 * bit 1: in a call, below).
 *
 * Calls: a rank in a collective call of the job's API (allgather, barrier,
 * broadcast, agree, replan: the bootstrap channel, where it blocks) for
 * CALL_TELL_S tells every peer so, from the heartbeat's tick (most calls end
 * sooner and send nothing), in a status with bit 1 and 16 more bytes: i64 the
 * clock through which the job had sent what its peers may wait for of it
 * (its updates; an FMS owner's sums, sfb__sync_ops.served), u32 the collective's number (the
 * bootstrap's count, the same on every rank), u32 the call (1 allgather,
 * 2 barrier, 3 broadcast, 4 agree, 5 replan). A peer waiting for a later
 * clock of that rank's, not having entered that collective itself, waits for
 * a rank that waits for it: its wait fails at once naming both, where both
 * would otherwise wait until the bootstrap timeout (sfb__comm_check_calls). */
#include "config.h"
#include "src/comm/comm_impl.h"
#include "src/boot/bootstrap.h"
#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/ssp/ssp.h"

#include <stdio.h>
#include <string.h>

#define STATUS_LEN 24
#define STATUS_ASK 1u
#define STATUS_CALL 2u
#define CALL_LEN (STATUS_LEN + 16)
/* then, where the caller named its call (sfb_job_name_calls): the name's
 * length and bytes (at most 31) */
#define LABEL_LEN 32
/* A call is told to the peers once it has lasted this long (at the next
 * heartbeat): most end sooner, and send nothing. */
#define CALL_TELL_S 0.25

/* The calls a status may name, by number (0: none). */
static const char *const calls[] = {NULL, "allgather", "barrier", "broadcast", "agree", "replan"};

/* A status to dst; `call` (call_len bytes: CALL_LEN - STATUS_LEN, and
 * a name) with STATUS_CALL. */
static int send_status(struct sfb__comm *c, uint32_t dst, uint64_t flags, const uint8_t *call,
                       size_t call_len)
{
    uint8_t p[CALL_LEN + LABEL_LEN];
    int64_t pub = atomic_load_explicit(&c->stall.published, memory_order_acquire);
    int64_t at = atomic_load_explicit(&c->stall.published_us, memory_order_relaxed);
    int64_t age = pub >= 0 ? (int64_t)(sfb__comm_clock(c) * 1e6) - at : 0;
    sfb__put_u64(p, (uint64_t)pub);
    sfb__put_u64(p + 8, (uint64_t)(age > 0 ? age : 0));
    sfb__put_u64(p + 16, flags);
    if (call) memcpy(p + STATUS_LEN, call, call_len);
    return sfb__comm_send_control(c, dst, SFB_WIRE_HEARTBEAT, p,
                                  STATUS_LEN + (call ? call_len : 0), 0.0);
}

void sfb__comm_enter_call(struct sfb__comm *c, const char *what, const char *label,
                          int64_t published)
{
    if (c->bs) sfb__bootstrap_label(c->bs, label ? label : what);
    uint32_t code = 0;
    for (uint32_t i = 1; i < SFB_ARRAY_LEN(calls); i++)
        if (what && !strcmp(what, calls[i])) code = i;
    if (!code || !c->t || !c->bs) return;
    atomic_store_explicit(&c->stall.my_pub, published, memory_order_relaxed);
    atomic_store_explicit(&c->stall.my_seq, sfb__bootstrap_seq(c->bs) + 1, memory_order_relaxed);
    atomic_store_explicit(&c->stall.my_what, code, memory_order_relaxed);
    uint8_t name[LABEL_LEN] = {0};
    size_t n = label ? SFB_MIN(strlen(label), (size_t)LABEL_LEN - 1) : 0;
    name[0] = (uint8_t)n;
    memcpy(name + 1, label ? label : "", n);
    for (int w = 0; w < LABEL_LEN / 8; w++)
        atomic_store_explicit(&c->stall.my_label[w], sfb__get_u64(name + 8 * w),
                              memory_order_relaxed);
    int64_t now_us = (int64_t)(sfb__now() * 1e6);
    atomic_store_explicit(&c->stall.my_since_us, now_us ? now_us : 1, memory_order_release);
}

void sfb__comm_leave_call(struct sfb__comm *c)
{
    if (c->bs) sfb__bootstrap_label(c->bs, NULL);
    atomic_store_explicit(&c->stall.my_since_us, 0, memory_order_release);
}

void sfb__comm_tell_call(struct sfb__comm *c, double now)
{
    int64_t since = atomic_load_explicit(&c->stall.my_since_us, memory_order_acquire);
    if (!since || since == c->stall.my_told_since || now - (double)since * 1e-6 < CALL_TELL_S)
        return;
    uint8_t call[CALL_LEN - STATUS_LEN + LABEL_LEN];
    sfb__put_u64(call, (uint64_t)atomic_load_explicit(&c->stall.my_pub, memory_order_relaxed));
    sfb__put_u32(call + 8, atomic_load_explicit(&c->stall.my_seq, memory_order_relaxed));
    sfb__put_u32(call + 12, atomic_load_explicit(&c->stall.my_what, memory_order_relaxed));
    uint8_t *name = call + CALL_LEN - STATUS_LEN;
    for (int w = 0; w < LABEL_LEN / 8; w++)
        sfb__put_u64(name + 8 * w,
                     atomic_load_explicit(&c->stall.my_label[w], memory_order_relaxed));
    size_t len = CALL_LEN - STATUS_LEN + (name[0] ? 1u + name[0] : 0u);
    /* the same call all along (a new one has another start) */
    if (atomic_load_explicit(&c->stall.my_since_us, memory_order_acquire) != since) return;
    c->stall.my_told_since = since;
    /* advice: a peer that misses it waits until the bootstrap timeout */
    for (uint32_t p = 0; p < c->world; p++)
        if (p != c->rank) (void)send_status(c, p, STATUS_CALL, call, len);
}

/* Peer p's name of its call (out[LABEL_LEN]; "" none), its bytes that are
 * not printable ASCII as '?': a peer's bytes go into a message. */
static void peer_label(const struct sfb__comm *c, uint32_t p, char *out)
{
    uint8_t w[LABEL_LEN];
    for (int i = 0; i < LABEL_LEN / 8; i++)
        sfb__put_u64(w + 8 * i, atomic_load_explicit(&c->stall.call_label[4 * p + (uint32_t)i],
                                                     memory_order_relaxed));
    size_t n = SFB_MIN((size_t)w[0], (size_t)LABEL_LEN - 1);
    for (size_t i = 0; i < n; i++)
        out[i] = w[1 + i] >= 0x20 && w[1 + i] < 0x7f ? (char)w[1 + i] : '?';
    out[n] = '\0';
}

int sfb__comm_check_calls(struct sfb__comm *c, int64_t required)
{
    if (!c->stall.call_seq || !c->bs) return 0;
    uint32_t mine = sfb__bootstrap_seq(c->bs);
    for (uint32_t p = 0; p < c->world; p++) {
        uint32_t seq = atomic_load_explicit(&c->stall.call_seq[p], memory_order_acquire);
        if (p == c->rank || seq <= mine) continue; /* none, or one this rank entered too */
        int64_t pub = atomic_load_explicit(&c->stall.call_pub[p], memory_order_relaxed);
        uint32_t what = atomic_load_explicit(&c->stall.call_what[p], memory_order_relaxed);
        if (pub >= required) continue; /* what this wait needs of it is out */
        char sent[64] = "having sent its part of no clock yet", name[LABEL_LEN];
        peer_label(c, p, name);
        if (pub >= 0)
            snprintf(sent, sizeof sent, "having sent its part through clock %lld", (long long)pub);
        return sfb__error(-SFB_EPEER, "rank %u is in %s (the job's collective %u) %s; rank %u "
                          "waits for clock %lld, which needs rank %u's: the ranks made different "
                          "calls (every rank of a job makes the job's collective calls in the "
                          "same order)", p, name[0] ? name : calls[what], seq, sent, c->rank,
                          (long long)required, p);
    }
    return 0;
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
    if ((flags & STATUS_CALL) && len >= CALL_LEN && c->stall.call_seq) {
        int64_t at = (int64_t)sfb__get_u64(payload + STATUS_LEN);
        uint32_t seq = sfb__get_u32(payload + STATUS_LEN + 8);
        uint32_t what = sfb__get_u32(payload + STATUS_LEN + 12);
        if (at >= -1 && what > 0 && what < SFB_ARRAY_LEN(calls) &&
            seq > atomic_load_explicit(&c->stall.call_seq[src], memory_order_relaxed)) {
            atomic_store_explicit(&c->stall.call_pub[src], at, memory_order_relaxed);
            atomic_store_explicit(&c->stall.call_what[src], what, memory_order_relaxed);
            /* its name, where whole (else none) */
            uint8_t name[LABEL_LEN] = {0};
            size_t n = len > CALL_LEN ? payload[CALL_LEN] : 0;
            if (n < LABEL_LEN && len >= CALL_LEN + 1 + n) memcpy(name, payload + CALL_LEN, 1 + n);
            for (int w = 0; w < LABEL_LEN / 8; w++)
                atomic_store_explicit(&c->stall.call_label[4 * src + (uint32_t)w],
                                      sfb__get_u64(name + 8 * w), memory_order_relaxed);
            atomic_store_explicit(&c->stall.call_seq[src], seq, memory_order_release);
        }
    }
    if (flags & STATUS_ASK) {
        sfb__comm_awake(c, sfb__now()); /* an age that leaves out a stop of its own */
        send_status(c, src, 0, NULL, 0);
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
        if (ask) send_status(c, o, STATUS_ASK, NULL, 0);
    }
    return 0;
}
