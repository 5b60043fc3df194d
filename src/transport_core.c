/* Operation records, transport header coding and error reporting shared by
 * the transport modules (see transport_core.h). */
#include "config.h"
#include "src/transport_core.h"

#include "src/common.h"

#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *sfb__fi_strerror(int code)
{
    return fi_strerror(code);
}

void sfb__tp_report(struct sfb__transport *t, int peer, int code, const char *what,
                    const char *detail)
{
    stat_add(&t->stats.errors, 1);
    char msg[512];
    snprintf(msg, sizeof msg, "%s (peer rank %d, provider %s): %s: %s", what, peer, t->prov_name,
             fi_strerror(code < 0 ? -code : code), detail ? detail : "");
    SFB_LOG_E("transport: %s", msg);
    if (t->s.on_error) t->s.on_error(t->s.user, peer, code < 0 ? code : -code, msg);
}

struct op *sfb__tp_op_get(struct sfb__transport *t)
{
    if (t->ops_out >= t->max_ops) return NULL;
    if (!t->free_ops) {
        /* Grows in slabs until the steady state is reached; never shrinks.
         * No registration needed: operations carry no message bytes. */
        struct slab *sl = calloc(1, sizeof *sl + OPS_PER_SLAB * sizeof(struct op));
        if (!sl) return NULL;
        struct op *ops = (struct op *)(sl + 1);
        sl->next = t->op_slabs;
        t->op_slabs = sl;
        for (int i = 0; i < OPS_PER_SLAB; i++) {
            ops[i].next = t->free_ops;
            t->free_ops = &ops[i];
        }
    }
    struct op *o = t->free_ops;
    t->free_ops = o->next;
    o->kind = 0;
    o->req = NULL;
    o->rbuf = NULL;
    o->want = 0;
    o->in_use = 1;
    t->ops_out++;
    return o;
}

void sfb__tp_op_put(struct sfb__transport *t, struct op *o)
{
    o->in_use = 0;
    o->next = t->free_ops;
    t->free_ops = o;
    t->ops_out--;
}

void sfb__tp_ops_release(struct sfb__transport *t)
{
    for (struct slab *sl = t->op_slabs; sl; sl = sl->next) {
        struct op *ops = (struct op *)(sl + 1);
        for (int i = 0; i < OPS_PER_SLAB; i++)
            if (ops[i].in_use && (ops[i].kind == OP_RECV || ops[i].kind == OP_BODY))
                sfb__buf_put(ops[i].rbuf);
    }
}

void sfb__tp_ops_free(struct sfb__transport *t)
{
    while (t->op_slabs) {
        struct slab *sl = t->op_slabs;
        t->op_slabs = sl->next;
        free(sl);
    }
}

static void put32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void sfb__tp_thdr_put(uint8_t *p, uint32_t rank, uint32_t kind, uint32_t seq, uint64_t x)
{
    put32le(p, rank | kind << 24);
    put32le(p + 4, seq);
    put32le(p + 8, (uint32_t)x);
    put32le(p + 12, (uint32_t)(x >> 32));
}

void sfb__tp_thdr_get(const uint8_t *p, uint32_t *rank, uint32_t *kind, uint32_t *seq, uint64_t *x)
{
    uint32_t w0 = get32le(p);
    *rank = w0 & 0xffffffu;
    *kind = w0 >> 24;
    *seq = get32le(p + 4);
    *x = (uint64_t)get32le(p + 8) | (uint64_t)get32le(p + 12) << 32;
}

void sfb__tp_deadline(struct timespec *ts, double timeout_s)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    double s = (double)ts->tv_sec + 1e-9 * (double)ts->tv_nsec + timeout_s;
    ts->tv_sec = (time_t)s;
    ts->tv_nsec = (long)((s - (double)ts->tv_sec) * 1e9);
}
