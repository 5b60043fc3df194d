/* Transport send path: the bounded send queue shared with other threads
 * (sfb__transport_send / _flush, declared in src/transport.h) and, in the
 * loop thread, posting queued frames to the endpoint. A frame that fits in
 * a receive buffer is one fi_tsendv (transport header ++ frame header, then
 * the payload slice); a bigger one is an announce (transport header ++ frame
 * header, tag 0) then the payload as one fi_tsend with the frame's body tag,
 * straight from the caller's buffer. -FI_EAGAIN leaves the frame at the head
 * of the queue, retried on the next progress pass. */
#ifndef SFB_SRC_TRANSPORT_TX_H
#define SFB_SRC_TRANSPORT_TX_H

struct sfb__transport;
struct op;

/* Loop thread: moves frames submitted by other threads to the pending list
 * (the async callback). */
void sfb__tp_tx_take_submitted(struct sfb__transport *t);
/* Loop thread: posts what it can of the pending sends. 1 if anything moved. */
int sfb__tp_tx_post(struct sfb__transport *t);
/* Loop thread: a send operation completed (err: 0 or a FI_E* code); the op
 * is still held by the caller, which returns it. */
void sfb__tp_tx_complete(struct sfb__transport *t, struct op *o, int err);
/* Close: drops the buffer references of sends still queued or in flight. */
void sfb__tp_tx_release(struct sfb__transport *t);

#endif
