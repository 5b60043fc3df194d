/* What the transport hands the layers above, without the transport
 * itself: its pooled, reference-counted buffers, a received frame, and how
 * its loop thread waits (src/transport/transport.h has the rest). The comm
 * context's interface (src/comm/comm.h) is built on these alone. */
#ifndef SFB_SRC_TRANSPORT_FRAME_H
#define SFB_SRC_TRANSPORT_FRAME_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct sfb__transport;
struct sfb__region;

/* A pooled, reference-counted buffer (registered with the provider when it
 * requires FI_MR_LOCAL). `data` and `cap` are public; the rest is private. */
struct sfb__buf {
    uint8_t *data;
    size_t cap;
    /* private */
    _Atomic int refs;
    unsigned cls;
    void *mr;   /* struct fid_mr * or NULL */
    void *desc; /* fi_mr_desc or NULL */
    struct sfb__transport *t;
    struct sfb__region *region; /* big buffers: the huge-page region holding data */
    struct sfb__buf *next;
    size_t len; /* bytes of a received frame */
    uint32_t src;
    uint32_t idx;
    uint32_t off; /* where a received frame starts in data */
};

/* A received frame handed to the compute thread (or to on_frame). The frame
 * is data[0..len) and lives in buf; the receiver owns one reference and
 * returns it with sfb__buf_put(buf). */
struct sfb__frame {
    struct sfb__buf *buf;
    const uint8_t *data;
    size_t len;
    uint32_t src; /* rank of the sending peer (from the fabric tag) */
    /* Updates it carries, for a receiver's wake-up threshold
     * (sfb__transport_recv_units): the on_frame hook sets it (a bundle's
     * inner frames); 1 otherwise. */
    uint32_t units;
};

/* How the loop thread waits for completions (sfb run --progress). */
enum sfb__progress {
    SFB__PROGRESS_AUTO = 0, /* block when this host has more ranks than cores, else spin */
    SFB__PROGRESS_SPIN,     /* poll on after activity (spin_s; longer while in flight) */
    SFB__PROGRESS_BLOCK,    /* never spin: sleep on the CQ's fd or the doorbell */
};

/* Adds / drops a reference; the last put returns the buffer to its pool.
 * Any thread. */
void sfb__buf_ref(struct sfb__buf *b);
void sfb__buf_put(struct sfb__buf *b);
/* Whether a reference besides the caller's is held (the caller holds one). */
int sfb__buf_shared(struct sfb__buf *b);

#endif
