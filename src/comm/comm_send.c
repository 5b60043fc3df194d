/* What every frame this rank sends carries (the job key, the last-clock
 * flag, and for its own SF frames the stall check's record of its newest
 * published clock: comm_stall.c reads it), and the control frames
 * (heartbeats, BYE, ABORT) it sends itself. Below liveness, stalls and the
 * frame handlers, which all send control frames. */
#include "config.h"
#include "src/transport/transport.h"
#include "src/comm/comm_impl.h"
#include "src/base/util.h"

#include <string.h>

static void note_published(struct sfb__comm *c, int64_t clock)
{
    if (clock <= atomic_load_explicit(&c->stall.published, memory_order_relaxed)) return;
    atomic_store_explicit(&c->stall.published_us, (int64_t)(sfb__comm_clock(c) * 1e6),
                          memory_order_relaxed);
    atomic_store_explicit(&c->stall.published, clock, memory_order_release);
}

static void stamp(struct sfb__comm *c, struct sfb__wire_hdr *h)
{
    h->job_key = c->job_key;
    if ((h->type == SFB_WIRE_SF || h->type == SFB_WIRE_DENSE_ROWS) && h->origin == c->rank) {
        if (h->clock == c->last_clock) h->flags |= SFB_WIRE_F_LAST;
        if (h->type == SFB_WIRE_SF) note_published(c, h->clock);
    }
}

int sfb__comm_header(struct sfb__comm *c, struct sfb__wire_hdr *h,
                     const struct sfb__wire_piece *pieces, size_t npieces,
                     uint8_t hdr[SFB_WIRE_HDR_SIZE])
{
    stamp(c, h);
    return sfb__wire_encode(h, pieces, npieces, hdr);
}

int sfb__comm_header_begin(struct sfb__comm *c, struct sfb__wire_hdr *h,
                           struct sfb__wire_hash *s)
{
    stamp(c, h);
    return sfb__wire_hash_begin(s, h);
}

int sfb__comm_send_control(struct sfb__comm *c, uint32_t dst, enum sfb__wire_type type,
                           const void *payload, size_t len, double timeout_s)
{
    if (!c->t) return 0;
    struct sfb__wire_hdr h = {.type = (uint8_t)type, .origin = c->rank, .sender = c->rank,
                             .payload_len = len};
    struct sfb__wire_piece piece = {payload, len};
    uint8_t hdr[SFB_WIRE_HDR_SIZE];
    int ret = sfb__comm_header(c, &h, &piece, len ? 1 : 0, hdr);
    if (ret) return ret;
    if (!len) return sfb__transport_send(c->t, dst, hdr, sizeof hdr, NULL, 0, 0, timeout_s);
    struct sfb__buf *b;
    if ((ret = sfb__transport_buf_get(c->t, len, &b))) return ret;
    memcpy(b->data, payload, len);
    ret = sfb__transport_send(c->t, dst, hdr, sizeof hdr, b, 0, len, timeout_s);
    sfb__buf_put(b);
    return ret;
}
