/* The comm's data path as an ops table: the libfabric implementation and
 * the dispatch the engines call (src/comm/comm.h). The loopback's table is
 * in src/comm/comm_loopback.c. */
#include "config.h"
#include "src/transport/transport.h"
#include "src/base/trace.h"
#include "src/base/util.h"
#include "src/boot/bootstrap.h"
#include "src/comm/comm_impl.h"
#include "src/loop/loop.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int fab_buf_get(struct sfb__comm *c, size_t size, struct sfb__buf **out)
{
    return sfb__transport_buf_get(c->t, size, out);
}

static int fab_send(struct sfb__comm *c, uint32_t dst, const void *hdr, size_t hdr_len,
                    struct sfb__buf *buf, size_t off, size_t len, double timeout_s)
{
    return sfb__transport_send(c->t, dst, hdr, hdr_len, buf, off, len, timeout_s);
}

static int fab_recv(struct sfb__comm *c, struct sfb__frame *out, double timeout_s, uint32_t units)
{
    return sfb__transport_recv_units(c->t, out, timeout_s, units);
}

static int fab_call(struct sfb__comm *c, void (*fn)(void *), void *arg)
{
    return sfb__loop_call(c->loop, fn, arg);
}

static int fab_post(struct sfb__comm *c, void (*fn)(void *), void (*drop)(void *), void *arg)
{
    return sfb__loop_post(c->loop, fn, drop, arg);
}

static int fab_barrier(struct sfb__comm *c)
{
    return sfb__bootstrap_barrier(c->bs);
}

static int fab_trim(struct sfb__comm *c)
{
    return sfb__transport_trim(c->t);
}

const struct sfb__comm_ops sfb__comm_fabric_ops = {
    .buf_get = fab_buf_get,
    .send = fab_send,
    .recv = fab_recv,
    .call = fab_call,
    .post = fab_post,
    .barrier = fab_barrier,
    .trim = fab_trim,
};

static int no_peers(void)
{
    return sfb__error(-ENOTCONN, "comm: a job of one worker has no peers to exchange frames with");
}

int sfb__comm_buf_get(struct sfb__comm *c, size_t size, struct sfb__buf **out)
{
    return c->ops ? c->ops->buf_get(c, size, out) : sfb__comm_buf_plain(size, out);
}

int sfb__comm_buf_plain(size_t size, struct sfb__buf **out)
{
    enum { HEAD = (sizeof(struct sfb__buf) + 63) / 64 * 64 };
    void *p = NULL;
    if (size > SIZE_MAX - HEAD || posix_memalign(&p, 64, HEAD + (size ? size : 1)))
        return sfb__error(-ENOMEM, "comm: buffer of %zu bytes", size);
    struct sfb__buf *b = p;
    memset(b, 0, sizeof *b);
    b->data = (uint8_t *)p + HEAD;
    b->cap = size;
    atomic_init(&b->refs, 1);
    *out = b;
    return 0;
}

int sfb__comm_trim(struct sfb__comm *c)
{
    return c->ops && c->ops->trim ? c->ops->trim(c) : 0;
}

int sfb__comm_send(struct sfb__comm *c, uint32_t dst, const void *hdr, size_t hdr_len,
                   struct sfb__buf *buf, size_t off, size_t len, double timeout_s)
{
    if (!c->ops) return no_peers();
    double t0 = sfb__trace_on() ? sfb__trace_us() : 0;
    int ret = c->ops->send(c, dst, hdr, hdr_len, buf, off, len, timeout_s);
    if (!ret && c->budget.paced) sfb__pace_charge(&c->budget.pace, hdr_len + len, sfb__now());
    /* a data frame handed to the transport (it leaves in the background) */
    if (!ret) sfb__trace_span(SFB__TRACK_NETWORK, "send", t0, -1, -1, (int32_t)dst, hdr_len + len);
    return ret;
}

int sfb__comm_recv(struct sfb__comm *c, struct sfb__frame *out, double timeout_s)
{
    return sfb__comm_recv_units(c, out, timeout_s, 0);
}

int sfb__comm_recv_units(struct sfb__comm *c, struct sfb__frame *out, double timeout_s,
                         uint32_t units)
{
    return c->ops ? c->ops->recv(c, out, timeout_s, units) : no_peers();
}

int sfb__comm_call(struct sfb__comm *c, void (*fn)(void *), void *arg)
{
    if (c->ops) return c->ops->call(c, fn, arg);
    fn(arg);
    return 0;
}

int sfb__comm_post(struct sfb__comm *c, void (*fn)(void *), void (*drop)(void *), void *arg)
{
    if (c->ops) return c->ops->post(c, fn, drop, arg);
    fn(arg);
    return 0;
}

int sfb__comm_barrier(struct sfb__comm *c)
{
    return c->ops ? c->ops->barrier(c) : 0;
}
