/* Overlay relaying for the SFB engine (sfb/broadcast.c).
 *
 * Every SF frame travels down its origin's broadcast tree of the topology
 * (include/sfb/topo.h): the origin sends it to its children, each relay
 * forwards it to its own children. Forwarding happens in the communication
 * (loop) thread, from comm's on_data hook, so a relay forwards while its
 * compute thread computes or waits on SSP. Inner frames are forwarded
 * byte-for-byte: a queued frame is a slice (buffer reference, offset,
 * length) of the received buffer; nothing is re-encoded or re-checksummed.
 *
 * Per out-link coalescing: each out-link has one pending queue and at most
 * one send in flight (tracked with the transport's send-completion hook;
 * under a bandwidth budget, messages are capped and two may be in flight,
 * so a receiver slow to complete one does not idle the link).
 * When the link is free, everything sendable on it leaves as one message: a
 * lone frame bare, two or more copied into one pooled buffer behind a fresh
 * BUNDLE header (the transport takes one header and one buffer slice; the
 * copy is the simplest correct gather, and only the outer header is
 * computed).
 *
 * Flush modes: eager (a queued frame is sendable at once) or clock (a frame
 * of clock c that is h hops from its origin is sendable at this node's
 * clock boundary c + h: the origin sends at c, every hop adds one clock; see
 * sfb__relay_ready / sfb__relay_boundary; what a boundary releases leaves
 * at once, one message per link). The `full` topology is the
 * one-hop star: every origin sends to every peer, nobody relays.
 *
 * Threads: open/close/publish/boundary/ready/stats from the compute thread;
 * everything else runs in the loop thread. */
#ifndef SFB_SFB_RELAY_H
#define SFB_SFB_RELAY_H

#include <stdint.h>
#include <stddef.h>

struct sfb__comm;
struct sfb__buf;
struct sfb__relay;

struct sfb__relay_stats {
    uint64_t data_msgs;  /* data messages put on the wire (bare frames + bundles) */
    uint64_t data_bytes; /* their bytes: frames plus bundle headers */
    uint64_t bundles;    /* messages carrying two or more frames */
    uint64_t forwarded;  /* others' frames queued for forwarding */
    uint64_t refused;    /* frames not forwarded (bad, duplicate, wrong parent) */
    uint64_t queued_bytes; /* frames waiting on the out-links now (their bytes per link) */
};

struct sfb__relay_settings {
    const char *topology; /* NULL: full */
    uint32_t degree;
    int flush_clock;
    /* frames per origin and clock: one per matrix this engine carries,
     * under wire ids `ids` (NULL: 0 .. nmat − 1; any distinct values, a
     * table as long as the largest is made); frames of other ids are not
     * relayed */
    uint32_t nmat;
    const uint32_t *ids;
    int64_t start_clock; /* the first clock of the run (> 0 when resumed):
                            every origin's frames of earlier clocks count as seen */
    /* managed communication: the order of frames waiting on a link (fifo:
     * arrival; otherwise earliest clock first, then highest part priority),
     * and the largest message formed (0: everything sendable at once) */
    int priority;
    size_t msg_cap;
};

/* Builds the topology on the comm's world and installs the comm hooks.
 * Under the comm's bandwidth budget (sfb__comm_budget_wait) a link sends
 * only while the budget has room; the links take turns. Returns 0 or a
 * negative code. */
int sfb__relay_open(struct sfb__relay **out, struct sfb__comm *c,
                    const struct sfb__relay_settings *s);
/* Removes the hooks, drops every queued frame. NULL is a no-op. */
void sfb__relay_close(struct sfb__relay **r);

/* Queues this rank's own frame buf[0..len) (header included) of `clock` to
 * its children (takes its own reference) and, when eager, sends it; posted
 * to the loop thread, so it may return before (later relay and comm calls
 * run after it);
 * `priority`: its part's (sfb/parts.h), 0 for a whole update. */
int sfb__relay_publish(struct sfb__relay *r, struct sfb__buf *buf, size_t len, int64_t clock,
                       float priority);

/* Clock mode: 1 when every frame this rank forwards at boundary t (those of
 * clock t − hops, if ≤ last: the last clock published) has arrived (all
 * parts of each update). Always 1 when eager. */
int sfb__relay_ready(struct sfb__relay *r, int64_t t, int64_t last);
/* Clock mode: boundary t — everything due ≤ t leaves (one message per
 * link). INT64_MAX: eager from now on (end of the run). */
int sfb__relay_boundary(struct sfb__relay *r, int64_t t);
/* Largest hop count from any origin to this rank (clock mode needs that many
 * extra boundaries at the end). */
uint32_t sfb__relay_max_hops(const struct sfb__relay *r);
double sfb__relay_mean_hops(const struct sfb__relay *r);
uint32_t sfb__relay_diameter(const struct sfb__relay *r);
int sfb__relay_flush_clock(const struct sfb__relay *r);

void sfb__relay_stats(const struct sfb__relay *r, struct sfb__relay_stats *st);

#endif
