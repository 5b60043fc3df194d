/* Transport receive path, loop thread unless noted.
 *
 * rx_depth wildcard receives (tag 0, pooled buffers of chunk_size) take
 * every whole frame and every big-frame announce. An announce gives the
 * frame's total length; the receiver then takes a pooled buffer of that size,
 * copies the (small) frame header into it and posts a receive for the body
 * with the frame's own tag directly behind it, so the payload is copied once,
 * by the provider, into the buffer the frame is delivered in. A body that
 * arrives before its receive is posted waits in the provider's unexpected
 * queue (shm: the sender's CMA descriptor; rxm: the rendezvous request).
 * Complete frames go to settings.on_frame or the inbox that
 * sfb__transport_recv (src/transport.h, any thread) drains. */
#ifndef SFB_SRC_TRANSPORT_RX_H
#define SFB_SRC_TRANSPORT_RX_H

#include <stddef.h>

struct sfb__transport;
struct op;

/* Posts one wildcard receive; 0 or a negative code (then retried later). */
int sfb__tp_rx_post_wildcard(struct sfb__transport *t);
/* Reposts consumed wildcard receives and posts waiting body receives.
 * 1 if anything was posted. */
int sfb__tp_rx_post(struct sfb__transport *t);
/* A receive operation completed with `len` bytes (err: 0 or a FI_E* code);
 * the caller returns the op afterwards. */
void sfb__tp_rx_complete(struct sfb__transport *t, struct op *o, size_t len, int err);
/* Close: drops the buffers of waiting announces and undelivered frames. */
void sfb__tp_rx_release(struct sfb__transport *t);

#endif
