/* Start-up measurements for the cost model (sfb/cost.h): the link probe, a
 * ping-pong over the engines' own data path (so α and β include the wire
 * header, checksums, the progress thread and the provider, as the engines
 * will pay them), and the reconstruction's sgemm and add rates. */
#include "config.h"
#include "sfb/cost.h"
#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/comm/comm.h"

#include <sfb/sf.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_PEERS 3
#define PROBE_SMALL 64u                /* payload bytes of a small ping */
#define PROBE_LARGE (256u * 1024u)     /* and of each large frame of a stream */
#define PROBE_STREAM 16                /* large frames sent back to back (4 MiB): a
                                          sustained rate, past a shaper's burst */
#define PROBE_REPS 4                   /* timed round trips (after one warm-up) */
#define PROBE_STREAM_REPS 2            /* timed streams (after one warm-up) */
#define PROBE_BUDGET_S 0.3             /* no further peer once this much was spent */
#define PROBE_WAIT_S 20.0              /* a reply or the result not here by then: failure */
#define PROBE_SLICE_S 0.05             /* each receive, then sfb__comm_check */
#define PROBE_RESULT ((int64_t)1 << 40) /* the clock field of the result frame */
#define RESULT_LEN 20                   /* its payload: α, β (f64), links timed (u32) */

/* Sends a DATA frame to dst: buf[off, off + len) as payload, `tag` in the
 * clock field. */
static int send_data(struct sfb__comm *c, uint32_t dst, int64_t tag, struct sfb__buf *buf,
                     size_t off, size_t len)
{
    uint32_t me = sfb__comm_rank(c);
    struct sfb__wire_hdr h = {.type = SFB_WIRE_DATA, .origin = me, .sender = me, .clock = tag,
                              .payload_len = len};
    struct sfb__wire_piece p = {buf ? buf->data + off : NULL, len};
    uint8_t hdr[SFB_WIRE_HDR_SIZE];
    int ret = sfb__comm_header(c, &h, &p, len ? 1 : 0, hdr);
    if (!ret) ret = sfb__comm_send(c, dst, hdr, sizeof hdr, len ? buf : NULL, off, len, PROBE_WAIT_S);
    return ret;
}

/* The next DATA frame from `from` (any rank when from == world), waiting up
 * to PROBE_WAIT_S; other frames are dropped (none exist before the
 * engines). The caller puts f->buf. */
static int recv_data(struct sfb__comm *c, uint32_t from, struct sfb__frame *f,
                     struct sfb__wire_hdr *h, const uint8_t **payload, const char *what)
{
    double deadline = sfb__now() + PROBE_WAIT_S;
    for (;;) {
        int ret = sfb__comm_check(c);
        if (ret) return ret;
        ret = sfb__comm_recv(c, f, PROBE_SLICE_S);
        if (ret == 0) {
            sfb__wire_trusted(f->data, h, payload);
            if (h->type == SFB_WIRE_DATA && (from == sfb__comm_world(c) || f->src == from))
                return 0;
            SFB_LOG_D("link probe: dropped a %s frame from rank %u", sfb__wire_type_name(h->type),
                      f->src);
            sfb__buf_put(f->buf);
        } else if (ret != -ETIMEDOUT && ret != -EAGAIN) {
            return sfb__error(ret, "link probe: rank %u: receive failed waiting for %s: %s",
                              sfb__comm_rank(c), what, sfb_error_message(ret));
        }
        if (sfb__now() > deadline) {
            ret = sfb__comm_check(c);
            if (ret) return ret;
            return sfb__error(-ETIMEDOUT, "link probe: rank %u: no %s within %g s",
                              sfb__comm_rank(c), what, PROBE_WAIT_S);
        }
    }
}

/* Up to PROBE_PEERS peers of rank 0, one per other host first (the links a
 * multi-host job's clock waits on), then the lowest other ranks. The same
 * list on every rank. */
static uint32_t pick_peers(struct sfb__comm *c, uint32_t out[PROBE_PEERS])
{
    uint32_t P = sfb__comm_world(c), n = 0, h0 = sfb__comm_host(c, 0);
    for (uint32_t r = 1; r < P && n < PROBE_PEERS; r++)
        if (sfb__comm_host(c, r) == r && r != h0) out[n++] = r; /* first rank of another host */
    for (uint32_t r = 1; r < P && n < PROBE_PEERS; r++) {
        uint32_t k = 0;
        while (k < n && out[k] != r) k++;
        if (k == n) out[n++] = r;
    }
    return n;
}

/* Rank 0: sends `n` frames of `size` bytes to p back to back, then takes
 * their n echoes; returns the time (the last echo's arrival). */
static int stream_round(struct sfb__comm *c, uint32_t p, struct sfb__buf *buf, int64_t *seq,
                        size_t size, int n, double *t)
{
    char what[64];
    snprintf(what, sizeof what, "echo from rank %u", p);
    int64_t first = *seq;
    double t0 = sfb__now();
    for (int i = 0; i < n; i++) {
        int ret = send_data(c, p, (*seq)++, buf, 0, size);
        if (ret)
            return sfb__error(ret, "link probe: rank 0: send to rank %u failed: %s", p,
                              sfb_error_message(ret));
    }
    for (int got = 0; got < n;) {
        struct sfb__frame f;
        struct sfb__wire_hdr h;
        const uint8_t *pl;
        int ret = recv_data(c, p, &f, &h, &pl, what);
        if (ret) return ret;
        sfb__buf_put(f.buf);
        if (h.clock < first) continue; /* a late echo of an earlier round */
        if (h.payload_len != size)
            return sfb__error(-EPROTO, "link probe: rank %u echoed %llu bytes, not %zu", p,
                              (unsigned long long)h.payload_len, size);
        got++;
    }
    *t = sfb__now() - t0;
    return 0;
}

/* Rank 0: the smallest small-frame round trip with peer p (rtt[0]) and the
 * shortest stream of PROBE_STREAM large frames there and back (rtt[1]). */
static int ping_peer(struct sfb__comm *c, uint32_t p, struct sfb__buf *buf, int64_t *seq,
                     double rtt[2])
{
    rtt[0] = rtt[1] = 1e30;
    for (int rep = 0; rep <= PROBE_REPS; rep++) { /* rep 0: warm-up (connection set-up) */
        double t = 0; /* set when stream_round returns 0 (the zero for gcc -O3) */
        int ret = stream_round(c, p, buf, seq, PROBE_SMALL, 1, &t);
        if (ret) return ret;
        if (rep > 0 && t < rtt[0]) rtt[0] = t;
    }
    for (int rep = 0; rep <= PROBE_STREAM_REPS; rep++) { /* rep 0: one frame, warm-up */
        double t = 0;
        int ret = stream_round(c, p, buf, seq, PROBE_LARGE, rep ? PROBE_STREAM : 1, &t);
        if (ret) return ret;
        if (rep > 0 && t < rtt[1]) rtt[1] = t;
    }
    return 0;
}

/* Rank 0: measures, fits and tells every rank. */
static int probe_lead(struct sfb__comm *c, double *alpha, double *beta, uint32_t *timed)
{
    struct sfb__buf *buf = NULL;
    int ret = sfb__comm_buf_get(c, PROBE_LARGE, &buf);
    if (ret) return sfb__error(ret, "link probe: no %u-byte buffer", PROBE_LARGE);
    memset(buf->data, 0, PROBE_LARGE);
    uint32_t peers[PROBE_PEERS], n = pick_peers(c, peers);
    double t0 = sfb__now();
    int64_t seq = 0;
    *alpha = *beta = 0;
    *timed = 0;
    for (uint32_t i = 0; i < n && !ret; i++) {
        if (i > 0 && sfb__now() - t0 > PROBE_BUDGET_S) break;
        double rtt[2];
        if ((ret = ping_peer(c, peers[i], buf, &seq, rtt))) break;
        /* the stream: n frames out while their echoes come back, so
         * the last echo lands about (n + 1) frames' time after the first
         * send, plus one small round trip */
        const double bytes = (double)(PROBE_STREAM + 1) * (PROBE_LARGE + SFB_WIRE_HDR_SIZE);
        double a = rtt[0] / 2, b = (rtt[1] - rtt[0]) / bytes;
        if (!(b > 0)) b = rtt[1] / bytes; /* noise: no fit */
        SFB_LOG_D("link probe: rank %u: rtt %.1f us small, %.1f us for %d x %u B: alpha %.2f us, "
                  "%.3f Gbit/s", peers[i], rtt[0] * 1e6, rtt[1] * 1e6, PROBE_STREAM, PROBE_LARGE,
                  a * 1e6, 8 / (b * 1e9));
        /* the slowest link probed: a clock waits for its slowest peer */
        if (a > *alpha) *alpha = a;
        if (b > *beta) *beta = b;
        ++*timed;
    }
    if (!ret) {
        uint8_t *r = buf->data;
        sfb__put_f64(r, *alpha);
        sfb__put_f64(r + 8, *beta);
        sfb__put_u32(r + 16, *timed);
        for (uint32_t p = 1; p < sfb__comm_world(c) && !ret; p++)
            if ((ret = send_data(c, p, PROBE_RESULT, buf, 0, RESULT_LEN)))
                ret = sfb__error(ret, "link probe: rank 0: sending the result to rank %u "
                                 "failed: %s", p, sfb_error_message(ret));
    }
    sfb__buf_put(buf);
    return ret;
}

/* Other ranks: echo rank 0's pings until its result comes. */
static int probe_follow(struct sfb__comm *c, double *alpha, double *beta, uint32_t *timed)
{
    for (;;) {
        struct sfb__frame f;
        struct sfb__wire_hdr h;
        const uint8_t *pl;
        int ret = recv_data(c, 0, &f, &h, &pl, "ping or result from rank 0");
        if (ret) return ret;
        if (h.clock == PROBE_RESULT) {
            if (h.payload_len == RESULT_LEN) {
                *alpha = sfb__get_f64(pl);
                *beta = sfb__get_f64(pl + 8);
                *timed = sfb__get_u32(pl + 16);
            }
            sfb__buf_put(f.buf);
            if (h.payload_len != RESULT_LEN)
                return sfb__error(-EPROTO, "link probe: rank %u: a %llu-byte result from rank 0",
                                  sfb__comm_rank(c), (unsigned long long)h.payload_len);
            return 0;
        }
        /* echo the payload back, sent from the received buffer itself */
        ret = send_data(c, 0, h.clock, f.buf, (size_t)(pl - f.buf->data), h.payload_len);
        sfb__buf_put(f.buf);
        if (ret)
            return sfb__error(ret, "link probe: rank %u: echo to rank 0 failed: %s",
                              sfb__comm_rank(c), sfb_error_message(ret));
    }
}

int sfb__link_probe(struct sfb__comm *c, struct sfb__link *out)
{
    SFB_ENTER();
    SFB_ARG(c);
    SFB_ARG(out);
    memset(out, 0, sizeof *out);
    if (sfb__comm_world(c) < 2) return 0;
    double alpha = 0, beta = 0;
    uint32_t timed = 0;
    /* every rank here first: one still building its model or importing
     * would take the CPU the echoes need and read as a slower link (seen
     * once in ten sfb.torch starts on 2 cores: 2.5 x slower), and rank 0's
     * wait for a late peer would spend the budget on one link */
    int ret = sfb__comm_barrier(c);
    if (ret)
        return sfb__error(ret, "link probe: rank %u: opening barrier: %s", sfb__comm_rank(c),
                          sfb_error_message(ret));
    ret = sfb__comm_rank(c) == 0 ? probe_lead(c, &alpha, &beta, &timed)
                                 : probe_follow(c, &alpha, &beta, &timed);
    /* nobody leaves before every rank is done: a rank still probing must
     * not see an engine's frame in its inbox */
    if (!ret && (ret = sfb__comm_barrier(c)))
        ret = sfb__error(ret, "link probe: rank %u: closing barrier: %s", sfb__comm_rank(c),
                         sfb_error_message(ret));
    if (ret) return ret;
    if (!(alpha >= 0) || !(beta > 0))
        return sfb__error(-EPROTO, "link probe: rank %u: fitted alpha %g s, beta %g s/byte",
                          sfb__comm_rank(c), alpha, beta);
    *out = (struct sfb__link){
        .alpha_s = alpha, .beta_s_per_byte = beta, .measured = 1, .peers = timed};
    return 0;
}

/* Each rate is the best of several timed passes (after an untimed one that
 * faults the pages in and warms the kernels): at least RATE_MIN_REPS, more
 * while RATE_BUDGET_S lasts, at most RATE_MAX_REPS. One timed pass (as
 * before) read the machine's worst moment as often as its speed: on a
 * 2-core host whose other ranks were still busy, the add rate of one
 * attach came out 1/5 of the next one's, and sync="auto" planned from it. */
#define RATE_MIN_REPS 3
#define RATE_MAX_REPS 16
#define RATE_BUDGET_S 0.02
/* The add rate's arrays: at most this many floats each (32 MiB, past any
 * cache: the rate of memory, which a larger matrix's pass runs at too). A
 * fresh page costs ~15 us on a VM: 67 MB arrays took 0.4 s of the attach. */
#define ADD_RATE_MAX_N ((uint64_t)8 << 20)

double sfb__gemm_rate(uint64_t rows, uint64_t cols, uint32_t s)
{
    if (!rows || !cols || !s || rows > UINT32_MAX || cols > UINT32_MAX ||
        cols > SIZE_MAX / sizeof(float) / rows)
        return 0;
    struct sfb_sf sf = {0};
    struct sfb_matrix a = {.rows = (uint32_t)rows, .cols = (uint32_t)cols};
    struct sfb_reconstruct *r = NULL;
    double best = 0;
    if (sfb_sf_reserve(&sf, (uint32_t)rows, (uint32_t)cols, s, 0, 0) ||
        !(a.data = calloc(rows * cols, sizeof *a.data)) || sfb_reconstruct_open(&r))
        goto out;
    for (uint64_t i = 0; i < rows * s; i++) sf.b[i] = 1e-3f;
    for (uint64_t i = 0; i < cols * s; i++) sf.c[i] = 1e-3f;
    sf.scale = 1e-3f;
    const struct sfb_sf *one = &sf;
    if (sfb_reconstruct_apply(r, &a, &one, 1)) goto out; /* warm-up */
    double start = sfb__now(), t_min = 1e30;
    for (int rep = 0; rep < RATE_MAX_REPS &&
                      (rep < RATE_MIN_REPS || sfb__now() - start < RATE_BUDGET_S);
         rep++) {
        double t0 = sfb__now();
        if (sfb_reconstruct_apply(r, &a, &one, 1)) goto out;
        double t = sfb__now() - t0;
        if (t < t_min) t_min = t;
    }
    best = 2.0 * (double)rows * (double)cols * s / (t_min > 1e-9 ? t_min : 1e-9);
out:
    sfb_reconstruct_close(&r);
    free(a.data);
    sfb_sf_free(&sf);
    return best;
}

double sfb__add_rate(uint64_t n)
{
    if (!n || n > SIZE_MAX / sizeof(float)) return 0;
    n = SFB_MIN(n, ADD_RATE_MAX_N);
    float *a = calloc(n, sizeof *a), *b = malloc(n * sizeof *b);
    double best = 0;
    if (a && b) {
        for (uint64_t i = 0; i < n; i++) b[i] = 1e-3f;
        for (uint64_t i = 0; i < n; i++) a[i] += b[i]; /* faults a's pages in */
        double start = sfb__now(), t_min = 1e30;
        for (int rep = 0; rep < RATE_MAX_REPS &&
                          (rep < RATE_MIN_REPS || sfb__now() - start < RATE_BUDGET_S);
             rep++) {
            double t0 = sfb__now();
            for (uint64_t i = 0; i < n; i++) a[i] += b[i];
            double t = sfb__now() - t0;
            if (t < t_min) t_min = t;
        }
        volatile float sink = a[n - 1]; /* the sums are used */
        (void)sink;
        best = (double)n / (t_min > 1e-9 ? t_min : 1e-9);
    }
    free(a);
    free(b);
    return best;
}
