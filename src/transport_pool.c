/* Buffer pool (see transport_pool.h). Includes <rdma/fabric.h> only to
 * close a buffer's memory registration. */
#include "config.h"
#include "src/transport_pool.h"

#include "src/common.h"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CLASS 12 /* 4 KiB */

static unsigned size_class(size_t size)
{
    unsigned c = MIN_CLASS;
    while (c < SFB__POOL_NCLASS - 1 && ((size_t)1 << c) < size) c++;
    return c;
}

void sfb__pool_init(struct sfb__pool *p, int (*reg)(void *ctx, struct sfb__buf *b), void *reg_ctx)
{
    memset(p->free, 0, sizeof p->free);
    pthread_mutex_init(&p->mu, NULL);
    atomic_store(&p->live, 0);
    p->reg = reg;
    p->reg_ctx = reg_ctx;
}

static void buf_free(struct sfb__buf *b)
{
    if (b->mr) fi_close(&((struct fid_mr *)b->mr)->fid);
    atomic_fetch_sub(&b->pool->live, 1);
    free(b);
}

int sfb__pool_get(struct sfb__pool *p, size_t size, struct sfb__buf **out)
{
    unsigned c = size_class(size);
    if (((size_t)1 << c) < size) return sfb__error(-ENOMEM, "transport: buffer of %zu bytes", size);
    pthread_mutex_lock(&p->mu);
    struct sfb__buf *b = p->free[c];
    if (b) p->free[c] = b->next;
    pthread_mutex_unlock(&p->mu);
    if (!b) {
        size_t cap = (size_t)1 << c;
        b = malloc(sizeof *b + 64 + cap);
        if (!b) return sfb__error(-ENOMEM, "transport: out of memory for a %zu-byte buffer", cap);
        memset(b, 0, sizeof *b);
        b->data = (uint8_t *)(((uintptr_t)(b + 1) + 63) & ~(uintptr_t)63);
        b->cap = cap;
        b->cls = c;
        b->pool = p;
        atomic_fetch_add(&p->live, 1);
        if (p->reg) {
            int rc = p->reg(p->reg_ctx, b);
            if (rc) {
                free(b);
                atomic_fetch_sub(&p->live, 1);
                return sfb__error(rc, "transport: fi_mr_reg of %zu bytes: %s", cap,
                                  fi_strerror(-rc));
            }
        }
    }
    atomic_store(&b->refs, 1);
    b->next = NULL;
    b->len = 0;
    b->off = 0;
    *out = b;
    return 0;
}

void sfb__buf_ref(struct sfb__buf *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void sfb__buf_put(struct sfb__buf *b)
{
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
    struct sfb__pool *p = b->pool;
    pthread_mutex_lock(&p->mu);
    b->next = p->free[b->cls];
    p->free[b->cls] = b;
    pthread_mutex_unlock(&p->mu);
}

long sfb__pool_destroy(struct sfb__pool *p)
{
    for (int c = 0; c < SFB__POOL_NCLASS; c++)
        while (p->free[c]) {
            struct sfb__buf *b = p->free[c];
            p->free[c] = b->next;
            buf_free(b);
        }
    pthread_mutex_destroy(&p->mu);
    return atomic_load(&p->live);
}
