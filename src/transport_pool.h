/* Pooled, reference-counted frame buffers for the transport (power-of-two
 * size classes from 4 KiB, one free list per class, never shrinks until
 * destroyed). A buffer is registered with the provider once, when it is
 * created, if the pool was given a registration hook (FI_MR_LOCAL providers),
 * so the steady state does neither malloc nor fi_mr_reg.
 *
 * struct sfb__buf itself and sfb__buf_ref / sfb__buf_put are declared in
 * src/transport.h (callers hold buffers); this header is for the transport's
 * own modules. */
#ifndef SFB_SRC_TRANSPORT_POOL_H
#define SFB_SRC_TRANSPORT_POOL_H

#include "src/transport.h"

#include <pthread.h>
#include <stdatomic.h>

#define SFB__POOL_NCLASS 48

struct sfb__pool {
    pthread_mutex_t mu;
    struct sfb__buf *free[SFB__POOL_NCLASS];
    _Atomic long live; /* buffers created and not yet freed */
    /* Registers b->data[0..cap) and sets b->mr / b->desc; 0 or -FI_E*.
     * NULL: buffers are not registered. */
    int (*reg)(void *ctx, struct sfb__buf *b);
    void *reg_ctx;
};

void sfb__pool_init(struct sfb__pool *p, int (*reg)(void *ctx, struct sfb__buf *b), void *reg_ctx);

/* A buffer of at least `size` bytes with one reference; 0, -ENOMEM or the
 * registration error. Any thread. */
int sfb__pool_get(struct sfb__pool *p, size_t size, struct sfb__buf **out);

/* Frees every pooled buffer (closing its registration). Returns the number
 * of buffers still held elsewhere. */
long sfb__pool_destroy(struct sfb__pool *p);

#endif
