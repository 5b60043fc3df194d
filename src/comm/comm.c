#include "config.h"
#include "src/transport/transport.h"
#include "src/comm/comm_impl.h"
#include "src/base/timeline.h"
#include "src/base/trace.h"
#include "src/boot/bootstrap.h"
#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/loop/loop.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void sfb__comm_default_settings(struct sfb__comm_settings *s)
{
    memset(s, 0, sizeof *s);
    s->heartbeat_s = 0.5;
    s->peer_timeout_s = 5.0;
    s->stall_timeout_s = 300.0;
    s->bootstrap_timeout_s = 60.0;
}

int sfb__comm_check_wait(struct sfb__comm *c, int64_t required, double since,
                         const struct sfb__ssp *ssp)
{
    int ret = sfb__comm_check(c);
    if (ret || !c->final_clock) return ret;
    for (uint32_t p = 0; p < c->world; p++) {
        int64_t f = atomic_load_explicit(&c->final_clock[p], memory_order_acquire);
        if (p != c->rank && f < required)
            return sfb__error(-SFB_EPEER,
                              "rank %u finished at clock %lld; rank %u waits for its clock %lld, "
                              "which it will never send (do the ranks run the same number of "
                              "clocks?)",
                              p, (long long)f, c->rank, (long long)f + 1);
    }
    if ((ret = sfb__comm_check_calls(c, required))) return ret;
    return ssp ? sfb__comm_check_stall(c, required, since, ssp) : 0;
}

/* A frame rejected by the wire checks is counted and dropped (noise, a
 * corrupted or foreign frame). One of this job from a peer with another
 * shape (model, data shape, batch) is not noise: that peer's update of its
 * clock will never arrive in a form this rank can apply, so waiting for it
 * would hang. The job fails, naming the peer and the frame. Loop thread. */
static void rejected(struct sfb__comm *c, uint32_t src, int code)
{
    if (code != -SFB_ESHAPE || src >= c->world) return;
    atomic_store_explicit(&c->fail.found_here, 1, memory_order_relaxed);
    sfb__comm_fail(c, (int)src,
         "rank %u cannot apply the updates of rank %u (do the ranks run the same model, data "
         "and batch?): %s",
         c->rank, src, sfb_error_message(code));
}

void sfb__comm_reject_update(struct sfb__comm *c, uint32_t origin, uint32_t from, int64_t clock,
                             uint32_t matrix, const char *why)
{
    char via[32] = "";
    if (from != origin) snprintf(via, sizeof via, ", relayed by rank %u", from);
    atomic_store_explicit(&c->fail.found_here, 1, memory_order_relaxed);
    sfb__comm_fail(c, (int)origin,
                   "rank %u rejects the update rank %u published at clock %lld (matrix %u%s): %s; "
                   "no replica may apply it",
                   c->rank, origin, (long long)clock, matrix, via, why);
}

/* A data frame of its origin's last clock: nothing later will come from
 * that origin (the waits fail at once instead of hanging). */
static void note_last(struct sfb__comm *c, const struct sfb__wire_hdr *h)
{
    if ((h->type == SFB_WIRE_SF || h->type == SFB_WIRE_DENSE_ROWS) &&
        (h->flags & SFB_WIRE_F_LAST) && h->origin < c->world && h->origin != c->rank)
        atomic_store_explicit(&c->final_clock[h->origin], h->clock, memory_order_release);
}

/* A valid BUNDLE's inner frames: counted into f->units, and their
 * last-clock flags noted once the whole bundle is known valid (a second
 * walk, in the rare bundle that holds a last clock). Returns 0 or the first
 * bad inner frame's code. */
static int walk_bundle(struct sfb__comm *c, struct sfb__frame *f, const struct sfb__wire_hdr *h,
                       const uint8_t *payload)
{
    struct sfb__wire_iter it;
    const uint8_t *inner, *ip;
    size_t inner_len;
    struct sfb__wire_hdr ih;
    int r, any_last = 0;
    uint32_t n = 0;
    sfb__wire_bundle_begin(&it, payload, h->payload_len, (int)f->src);
    while ((r = sfb__wire_bundle_next(&c->job, &it, &inner, &inner_len, &ih, &ip)) == 1) {
        any_last |= (ih.flags & SFB_WIRE_F_LAST) != 0;
        n++;
    }
    f->units = n ? n : 1;
    if (r < 0) return r;
    if (any_last) {
        sfb__wire_bundle_begin(&it, payload, h->payload_len, (int)f->src);
        while (sfb__wire_bundle_next_trusted(&it, &inner, &inner_len, &ih, &ip) == 1)
            note_last(c, &ih);
    }
    return 0;
}

/* The length of the UTF-8 sequence of a printable character at p[0 .. n)
 * (1 for printable ASCII; 2..4 for a well-formed, shortest sequence of a
 * code point from U+00A0 that is no surrogate), else 0: a control
 * character, a stray or missing continuation byte, an overlong form. */
static size_t printable_utf8(const uint8_t *p, size_t n)
{
    if (p[0] >= 0x20 && p[0] < 0x7f) return 1;
    size_t len = p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
    if (!len || len > n || p[0] > 0xf4) return 0;
    uint32_t cp = p[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp < 0xa0 || (cp >= 0xd800 && cp < 0xe000) || cp > 0x10ffff) return 0;
    return len;
}

/* A peer's ABORT reason is untrusted text: printable characters pass
 * (UTF-8 included: "65536 × 65537 parameters"), anything else becomes
 * '?'; at most cap - 1 bytes, never a cut sequence. */
static void printable_text(char *out, size_t cap, const uint8_t *in, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len = printable_utf8(in + i, n - i), w = len ? len : 1;
        if (o + w >= cap) break;
        if (len)
            memcpy(out + o, in + i, len);
        else
            out[o] = '?';
        o += w;
        i += w;
    }
    out[o] = '\0';
}

/* Control frames end here (1: taken, its buffer released); data frames
 * (0) go on. */
static int on_control(struct sfb__comm *c, struct sfb__frame *f, const struct sfb__wire_hdr *h,
                      const uint8_t *payload)
{
    int own = f->src < c->world && h->origin == f->src;
    switch (h->type) {
    case SFB_WIRE_HEARTBEAT:
        if (h->payload_len && own) sfb__comm_on_status(c, f->src, payload, h->payload_len);
        break;
    case SFB_WIRE_HELLO:
        break;
    case SFB_WIRE_BYE:
        /* a BYE carries the sender's last clock: nothing beyond it will come */
        if (own) {
            c->live.said_bye[f->src] = 1;
            if (h->payload_len == 8)
                atomic_store_explicit(&c->final_clock[f->src], (int64_t)sfb__get_u64(payload),
                                      memory_order_release);
        }
        break;
    case SFB_WIRE_LOST: {
        /* a survivor of an elastic job names a dead rank: this rank goes
         * on without it too (sfb_job_shrink); a rank naming itself or us
         * is not believed */
        uint32_t k = sfb__get_u32(payload);
        if (own && k < c->world && k != c->rank && k != h->origin)
            sfb__comm_fail_lost(c, (int)k, "rank %u is lost (rank %u found it dead)", k,
                                h->origin);
        break;
    }
    case SFB_WIRE_ABORT: {
        char why[801];
        printable_text(why, sizeof why, payload, (size_t)h->payload_len);
        sfb__comm_fail(c, (int)h->origin, "rank %u aborted the job: %s", h->origin, why);
        break;
    }
    default:
        return 0;
    }
    sfb__buf_put(f->buf);
    return 1;
}

/* Loop thread: every received frame passes here first. Control frames end
 * here; data frames go to the engine's hook or to the inbox. */
int sfb__comm_on_frame(void *user, struct sfb__frame *f)
{
    struct sfb__comm *c = user;
    /* Full validation here, checksum included, so nothing invalid ever
     * reaches the inbox or a relay: counted, logged, dropped. */
    struct sfb__wire_hdr h;
    const uint8_t *payload;
    int bad = sfb__wire_decode(&c->job, f->data, f->len, (int)f->src, &h, &payload);
    int drop =
        !bad && c->stall.debug_drop_sf && (h.type == SFB_WIRE_SF || h.type == SFB_WIRE_BUNDLE);
    if (!bad && !drop && h.type == SFB_WIRE_BUNDLE) bad = walk_bundle(c, f, &h, payload);
    if (bad || drop) {
        if (bad) rejected(c, f->src, bad);
        sfb__buf_put(f->buf);
        return 1;
    }
    if (h.type != SFB_WIRE_BUNDLE) note_last(c, &h);
    if (f->src < c->world) {
        c->live.last_heard[f->src] = sfb__now();
        if (h.type != SFB_WIRE_HEARTBEAT) c->live.talks[f->src] = 1;
    }
    if (on_control(c, f, &h, payload)) return 1;
    if (sfb__trace_on()) /* a data frame: who sent it, of which update */
        sfb__trace_span(SFB__TRACK_NETWORK, "recv", sfb__trace_us(), h.clock, (int32_t)h.matrix,
                        (int32_t)f->src, f->len);
    if (c->s.on_data) return c->s.on_data(c->s.user, f, &h);
    return 0;
}

int sfb__comm_deliver(struct sfb__comm *c, struct sfb__frame *f)
{
    return sfb__comm_on_frame(c, f);
}

void sfb__comm_sent_hook(void *user, uint32_t dst, const struct sfb__buf *buf, int failed)
{
    struct sfb__comm *c = user;
    if (dst < c->world) c->live.last_sent[dst] = sfb__now();
    if (c->s.on_sent) c->s.on_sent(c->s.user, dst, buf, failed);
}

int sfb__comm_copy_shapes(struct sfb__comm *c, const struct sfb__wire_shape *shapes, uint32_t n)
{
    struct sfb__wire_shape *v = NULL;
    if (n && !(v = malloc(n * sizeof *v))) return sfb__error(-ENOMEM, "comm: out of memory");
    if (n) memcpy(v, shapes, n * sizeof *v);
    free(c->shapes);
    c->shapes = v;
    c->job.shapes = v;
    c->job.nshapes = n;
    return 0;
}

struct set_shapes {
    struct sfb__comm *c;
    struct sfb__wire_shape *shapes; /* malloc'd: swapped in, the old one comes back */
    uint32_t n, max_s;
};

/* Swaps the table in (the loop thread is the one that reads it), so the
 * allocation and the free stay in the compute thread. */
static void set_shapes_in_loop(void *arg)
{
    struct set_shapes *a = arg;
    struct sfb__wire_shape *old = a->c->shapes;
    a->c->shapes = a->shapes;
    a->c->job.shapes = a->shapes;
    a->c->job.nshapes = a->n;
    a->c->job.max_s = a->max_s;
    a->shapes = old;
}

int sfb__comm_set_shapes(struct sfb__comm *c, const struct sfb__wire_shape *shapes, uint32_t n,
                         uint32_t max_s)
{
    struct set_shapes a = {c, NULL, n, max_s};
    if (n && !(a.shapes = malloc(n * sizeof *a.shapes)))
        return sfb__error(-ENOMEM, "comm: out of memory for %u matrices' shapes", n);
    if (n) memcpy(a.shapes, shapes, n * sizeof *a.shapes);
    if (!c->loop) {
        set_shapes_in_loop(&a);
        free(a.shapes);
        return 0;
    }
    int ret = sfb__loop_call(c->loop, set_shapes_in_loop, &a);
    free(a.shapes); /* the old table, or the new one if the call failed */
    if (!ret) ret = sfb__comm_explain(c, sfb__bootstrap_barrier(c->bs));
    if (!ret) ret = sfb__comm_check(c);
    return ret;
}

struct set_hooks {
    struct sfb__comm *c;
    struct sfb__comm_hooks h;
};

static void set_hooks_in_loop(void *arg)
{
    struct set_hooks *a = arg;
    a->c->s.on_data = a->h.on_data;
    a->c->s.on_sent = a->h.on_sent;
    a->c->s.on_pass = a->h.on_pass;
    a->c->s.user = a->h.user;
}

void sfb__comm_pass_hook(void *user)
{
    struct sfb__comm *c = user;
    if (c->s.on_pass) c->s.on_pass(c->s.user);
}

int sfb__comm_set_hooks(struct sfb__comm *c, const struct sfb__comm_hooks *h)
{
    struct set_hooks a = {c, {0}};
    if (h) a.h = *h;
    if (!c->loop) {
        set_hooks_in_loop(&a);
        return 0;
    }
    return sfb__loop_call(c->loop, set_hooks_in_loop, &a);
}

uint64_t sfb__comm_rejected(const struct sfb__comm *c)
{
    uint64_t n = 0;
    for (int i = 0; i < SFB_WIRE_NREASONS; i++) n += atomic_load(&c->wstats.rejected[i]);
    return n;
}

void sfb__comm_abort(struct sfb__comm *c, const char *reason)
{
    if (!c || !c->t) return;
    size_t len = strlen(reason);
    /* Queue space for every peer's ABORT within 1 s in all: a queue full of
     * this rank's data drains as the sends ahead of it complete (0.2 s a
     * peer once lost the ABORT under load, and the peer named this rank's
     * exit instead of its reason); a peer that never takes anything costs
     * no more than the budget. */
    double end = sfb__now() + 1.0;
    /* A job that failed because a peer died: each survivor is told which
     * (LOST, ahead of the ABORT on the same link) and names that rank, as
     * it would have on finding the death itself; otherwise the first to
     * find it would be named by whoever it told first (a race among the
     * survivors). An elastic job's survivors tell it themselves, to go on. */
    int lost = c->s.elastic ? -1 : sfb__comm_lost(c);
    uint8_t k[4];
    sfb__put_u32(k, (uint32_t)lost);
    for (uint32_t p = 0; p < c->world; p++) {
        if (p == c->rank) continue;
        if (lost >= 0 && p != (uint32_t)lost)
            sfb__comm_send_control(c, p, SFB_WIRE_LOST, k, sizeof k,
                                   SFB_MAX(0.05, end - sfb__now()));
        sfb__comm_send_control(c, p, SFB_WIRE_ABORT, reason, len,
                               SFB_MAX(0.05, end - sfb__now()));
    }
    sfb__transport_flush(c->t, 1.0);
}

/* Loop thread (it owns talks and last_sent): the peers a BYE goes to. */
struct bye_to {
    struct sfb__comm *c;
    uint8_t *to;
    int flagged;
};
static void bye_to_in_loop(void *arg)
{
    struct bye_to *a = arg;
    struct sfb__comm *c = a->c;
    uint32_t w[2];
    unsigned nw = sfb__comm_watched(c, w);
    for (uint32_t p = 0; p < c->world; p++)
        a->to[p] = !a->flagged || c->live.talks[p] || c->live.last_sent[p] > 0 || p == w[0] ||
                   (nw > 1 && p == w[1]);
}

int sfb__comm_finish(struct sfb__comm *c, int64_t last)
{
    if (!c->t) return 0;
    int ret = sfb__transport_flush(c->t, c->s.bootstrap_timeout_s);
    if (ret) return sfb__error(ret, "could not deliver the last frames: %s", sfb_strerror(ret));
    sfb__phase_mark(SFB__PH_FLUSHED);
    uint8_t final[8];
    sfb__put_u64(final, (uint64_t)last);
    /* the peers that said BYE heard heartbeats until now (they watch this
     * rank from the barrier); the BYE below releases them */
    atomic_store_explicit(&c->live.bye_sent, 1, memory_order_release);
    /* The flagged frames of the last clock told every peer already (relays
     * forward them): the BYE only releases the peers that watch this rank
     * (ring neighbours) or heartbeat it (those it talked with). */
    uint8_t *to = calloc(c->world, 1);
    struct bye_to a = {c, to, last >= 0 && last == c->last_clock};
    int all = !to || sfb__loop_call(c->loop, bye_to_in_loop, &a) != 0;
    for (uint32_t p = 0; p < c->world; p++)
        if (p != c->rank && (all || to[p]))
            sfb__comm_send_control(c, p, SFB_WIRE_BYE, final, sizeof final, 1.0);
    free(to);
    sfb__transport_flush(c->t, 2.0);
    sfb__phase_mark(SFB__PH_BYE);
    ret = sfb__comm_explain(c, sfb__bootstrap_barrier(c->bs));
    sfb__phase_mark(SFB__PH_FINAL);
    return ret ? ret : sfb__comm_check(c);
}

void sfb__comm_set_last_clock(struct sfb__comm *c, int64_t last)
{
    c->last_clock = last;
}

void sfb__comm_close(struct sfb__comm **pc)
{
    struct sfb__comm *c = *pc;
    if (!c) return;
    sfb__comm_watch_stop(c);
    sfb__loop_timer_close(&c->live.hb);
    sfb__loop_io_close(&c->live.deaths);
    sfb__comm_budget_close(c);
    sfb__transport_close(&c->t);
    sfb__loop_close(&c->loop);
    sfb__bootstrap_close(&c->bs);
    sfb__comm_elastic_close(c);
    free(c->live.last_heard);
    free(c->live.said_bye);
    free(c->live.last_sent);
    free(c->live.talks);
    free(c->final_clock);
    free(c->stall.peer_pub);
    free(c->stall.peer_pub_us);
    free(c->stall.arrived);
    free(c->stall.call_seq);
    free(c->stall.call_what);
    free(c->stall.call_pub);
    free(c->stall.call_label);
    sfb__comm_close_pidfds(c);
    free(c->live.peer_pid);
    free(c->host_of);
    free(c->live.gone_since);
    free(c->shapes);
    free(c);
    *pc = NULL;
}
