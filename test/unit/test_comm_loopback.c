/* The in-process loopback comm (src/comm/comm_loopback.c) itself: frames arrive
 * whole, in send order, validated by the receiving comm; the turn passes in
 * a fixed order; a job where every rank waits for frames that will never
 * come, or for a barrier a finished rank will not enter, fails with
 * -SFB_EPEER and a reason instead of hanging. */
#include "src/base/fdlimit.h"
#include "src/base/util.h"
#include "src/comm/comm_loopback.h"
#include "src/comm/comm_impl.h"
#include "src/ssp/ssp.h"
#include "src/base/bytes.h"
#include "test.h"

#include <errno.h>
#include <sys/resource.h>

#define LOG_MAX 64

struct log {
    char ev[LOG_MAX][24];
    int n;
};

static void note(struct log *l, const char *fmt, uint32_t r, int v)
{
    if (l->n < LOG_MAX) snprintf(l->ev[l->n++], sizeof l->ev[0], fmt, r, v);
}

/* A data frame (control frames stop in comm): DENSE_ROWS, one row of one
 * float holding `clock`. */
static int send_frame(struct sfb__comm *c, uint32_t dst, int64_t clock)
{
    struct sfb__buf *b;
    int ret = sfb__comm_buf_get(c, 4, &b);
    if (ret) return ret;
    float v = (float)clock;
    memcpy(b->data, &v, 4);
    struct sfb__wire_hdr h = {.type = SFB_WIRE_DENSE_ROWS,
                             .origin = c->rank,
                             .sender = c->rank,
                             .clock = clock,
                             .k = 1,
                             .d = 1,
                             .s = 0,
                             .payload_len = 4};
    struct sfb__wire_piece piece = {b->data, 4};
    uint8_t hdr[SFB_WIRE_HDR_SIZE];
    ret = sfb__comm_header(c, &h, &piece, 1, hdr);
    if (!ret) ret = sfb__comm_send(c, dst, hdr, sizeof hdr, b, 0, 4, 0);
    sfb__buf_put(b);
    return ret;
}

static int order_rank(struct sfb__comm *c, uint32_t r, void *arg)
{
    struct log *l = arg;
    if (r == 0) {
        for (int i = 0; i < 3; i++) {
            int ret = send_frame(c, 1, i);
            if (ret) return ret;
            note(l, "%u sent %d", r, i);
        }
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        struct sfb__frame f;
        int ret = sfb__comm_recv(c, &f, 1.0);
        if (ret) return ret;
        struct sfb__wire_hdr h;
        const uint8_t *payload;
        sfb__wire_trusted(f.data, &h, &payload);
        float v;
        memcpy(&v, payload, 4);
        note(l, "%u got %d", f.src, (int)h.clock * 10 + (int)v);
        sfb__buf_put(f.buf);
    }
    return 0;
}

static int test_order(void)
{
    struct sfb__comm_settings s;
    sfb__comm_default_settings(&s);
    struct sfb__wire_shape shape = {1, 1};
    s.shapes = &shape;
    s.nshapes = 1;
    s.max_s = 1;
    struct sfb__loopback *lb;
    ASSERT_OK(sfb__loopback_open(&lb, 2, &s));
    struct log l = {0};
    ASSERT_OK(sfb__loopback_run(lb, order_rank, &l, NULL));
    /* rank 0 runs first and keeps the turn until it finishes; then the
     * three frames arrive, in send order */
    static const char *want[] = {"0 sent 0", "0 sent 1", "0 sent 2",
                                 "0 got 0",  "0 got 11", "0 got 22"};
    ASSERT_EQ(l.n, 6);
    for (int i = 0; i < 6; i++)
        if (strcmp(l.ev[i], want[i]))
            TEST_FAIL_AT("event %d: \"%s\", not \"%s\"", i, l.ev[i], want[i]);
    struct sfb__loopback_stats st;
    sfb__loopback_stats(lb, 0, &st);
    ASSERT_EQ(st.sent_msgs, 3);
    ASSERT_EQ(st.sent_bytes, 3 * (SFB_WIRE_HDR_SIZE + 4));
    sfb__loopback_stats(lb, 1, &st);
    ASSERT_EQ(st.recv_msgs, 3);
    ASSERT_EQ(sfb__comm_rejected(sfb__loopback_comm(lb, 1)), 0);
    sfb__loopback_close(&lb);
    return 0;
}

/* A frame of another shape is rejected by the receiving comm, as over the
 * fabric, and fails the job naming the sender. */
static int bad_shape_rank(struct sfb__comm *c, uint32_t r, void *arg)
{
    (void)arg;
    if (r == 0) return send_frame(c, 1, 0);
    struct sfb__frame f;
    for (;;) {
        int ret = sfb__comm_check(c);
        if (ret) return ret;
        if (sfb__comm_recv(c, &f, 1.0) == 0) {
            sfb__buf_put(f.buf);
            return -EPROTO; /* must not arrive */
        }
    }
}

static int test_rejects_bad_shape(void)
{
    struct sfb__comm_settings s;
    sfb__comm_default_settings(&s);
    struct sfb__wire_shape shape = {1, 2}; /* the frames are 1 × 1 */
    s.shapes = &shape;
    s.nshapes = 1;
    s.max_s = 1;
    struct sfb__loopback *lb;
    ASSERT_OK(sfb__loopback_open(&lb, 2, &s));
    int rets[2];
    ASSERT_EQ(sfb__loopback_run(lb, bad_shape_rank, NULL, rets), -SFB_EPEER);
    ASSERT_EQ(rets[0], 0);
    ASSERT_EQ(rets[1], -SFB_EPEER);
    ASSERT_EQ(sfb__comm_rejected(sfb__loopback_comm(lb, 1)), 1);
    ASSERT_STR_CONTAINS(sfb__loopback_comm(lb, 1)->fail.reason,
                        "cannot apply the updates of rank 0");
    sfb__loopback_close(&lb);
    return 0;
}

/* Both ranks wait for a frame nobody sends, as an engine does: receive with
 * a timeout, check the comm, again. */
static int starve_rank(struct sfb__comm *c, uint32_t r, void *arg)
{
    (void)r;
    (void)arg;
    for (;;) {
        int ret = sfb__comm_check(c);
        if (ret) return ret;
        struct sfb__frame f;
        ret = sfb__comm_recv(c, &f, 0.05);
        if (ret != -ETIMEDOUT) return ret ? ret : -EPROTO;
    }
}

static int test_deadlock_fails(void)
{
    struct sfb__loopback *lb;
    ASSERT_OK(sfb__loopback_open(&lb, 3, NULL));
    int rets[3];
    ASSERT_EQ(sfb__loopback_run(lb, starve_rank, NULL, rets), -SFB_EPEER);
    for (int r = 0; r < 3; r++)
        ASSERT_EQ(rets[r], -SFB_EPEER);
    for (uint32_t r = 0; r < 3; r++)
        ASSERT_STR_CONTAINS(sfb__loopback_comm(lb, r)->fail.reason, "deadlock");
    sfb__loopback_close(&lb);
    return 0;
}

static int barrier_rank(struct sfb__comm *c, uint32_t r, void *arg)
{
    int *passed = arg;
    int ret = sfb__comm_barrier(c); /* everyone */
    if (ret) return ret;
    passed[r]++;
    if (r == 2) return 0; /* rank 2 leaves: the second barrier cannot end */
    return sfb__comm_barrier(c);
}

/* A frame still in an inbox when the loopback closes: close drops the
 * receiver's reference to it, and the sender's buffer keeps exactly the
 * references its owner holds (the send's own was dropped at delivery). */
struct held_buf {
    struct sfb__buf *b;
};

static int unread_rank(struct sfb__comm *c, uint32_t r, void *arg)
{
    struct held_buf *hb = arg;
    if (r != 0) return 0; /* rank 1 never reads */
    int ret = sfb__comm_buf_get(c, 4, &hb->b);
    if (ret) return ret;
    memset(hb->b->data, 0, 4);
    sfb__buf_ref(hb->b); /* the test's own, looked at after close */
    struct sfb__wire_hdr h = {.type = SFB_WIRE_DATA, .origin = 0, .sender = 0, .payload_len = 4};
    struct sfb__wire_piece piece = {hb->b->data, 4};
    uint8_t hdr[SFB_WIRE_HDR_SIZE];
    ret = sfb__comm_header(c, &h, &piece, 1, hdr);
    if (!ret) ret = sfb__comm_send(c, 1, hdr, sizeof hdr, hb->b, 0, 4, 0);
    return ret;
}

static int test_unread_at_close(void)
{
    struct sfb__loopback *lb;
    ASSERT_OK(sfb__loopback_open(&lb, 2, NULL));
    struct held_buf hb = {0};
    ASSERT_OK(sfb__loopback_run(lb, unread_rank, &hb, NULL));
    struct sfb__loopback_stats st;
    sfb__loopback_stats(lb, 1, &st);
    ASSERT_EQ(st.recv_msgs, 1); /* delivered, waiting in rank 1's inbox */
    sfb__loopback_close(&lb);
    int refs = atomic_load(&hb.b->refs);
    ASSERT_EQ(refs, 2); /* the owner's and the test's */
    sfb__buf_put(hb.b);
    sfb__buf_put(hb.b);
    return 0;
}

static int test_barrier(void)
{
    struct sfb__loopback *lb;
    ASSERT_OK(sfb__loopback_open(&lb, 3, NULL));
    int rets[3], passed[3] = {0};
    ASSERT_EQ(sfb__loopback_run(lb, barrier_rank, passed, rets), -SFB_EPEER);
    for (int r = 0; r < 3; r++)
        ASSERT_EQ(passed[r], 1);
    ASSERT_EQ(rets[0], -SFB_EPEER);
    ASSERT_EQ(rets[1], -SFB_EPEER);
    ASSERT_EQ(rets[2], 0);
    ASSERT_STR_CONTAINS(sfb__loopback_comm(lb, 0)->fail.reason, "barrier");
    sfb__loopback_close(&lb);
    return 0;
}

/* The descriptor limit (src/base/fdlimit.c) rises towards what the world
 * needs, never past the hard limit, and never falls; a hard limit below
 * the need is said once, in a warning naming the limit, P and ulimit -n. */
static char fd_log[1024];
static void fd_log_sink(void *user, enum sfb_log_level lvl, int rank, const char *msg)
{
    if (lvl == SFB_LOG_WARN) snprintf(fd_log + strlen(fd_log), sizeof fd_log - strlen(fd_log), "%s\n", msg);
}

static int test_fd_limit(void)
{
    struct rlimit was;
    ASSERT_OK(getrlimit(RLIMIT_NOFILE, &was));
    if (was.rlim_max != RLIM_INFINITY && was.rlim_max < 700) return 0; /* nothing to check */
    sfb_log_set(fd_log_sink, NULL, SFB_LOG_WARN);
    struct rlimit low = {64, was.rlim_max};
    ASSERT_OK(setrlimit(RLIMIT_NOFILE, &low));
    ASSERT_EQ(sfb__fd_limit_want(100), 4 * 100 + 256);
    ASSERT_EQ(sfb__fd_limit_raise(100, 1), 4 * 100 + 256);
    struct rlimit now;
    ASSERT_OK(getrlimit(RLIMIT_NOFILE, &now));
    ASSERT_EQ(now.rlim_cur, 656);
    ASSERT_EQ(now.rlim_max, was.rlim_max);
    ASSERT_EQ(sfb__fd_limit_raise(2, 1), 656); /* enough already */
    ASSERT_EQ(fd_log[0], '\0');                 /* and nothing to say */
    low.rlim_cur = low.rlim_max = 300; /* a hard limit below the need (valgrind refuses it) */
    if (setrlimit(RLIMIT_NOFILE, &low) == 0) {
        ASSERT_EQ(sfb__fd_limit_raise(1000, 1), 300);
        ASSERT_STR_CONTAINS(fd_log, "open files: the limit is 300 (hard limit 300), below the "
                                    "4256 that a rank of a job of 1000 ranks plans for");
        ASSERT_STR_CONTAINS(fd_log, "`ulimit -n` to 4256");
        fd_log[0] = '\0';
        ASSERT_EQ(sfb__fd_limit_raise(1000, 1), 300); /* said once */
        ASSERT_EQ(fd_log[0], '\0');
    }
    sfb_log_set(sfb_log_stderr, NULL, SFB_LOG_WARN);
    return 0; /* the hard limit stays lowered: this process ends here */
}

/* Stalls (comm_stall.c): a peer's status payload is taken only when whole
 * and sane; the check fails a wait only for a clock the peer published
 * longer ago than the timeout and this rank has not applied, and names
 * both ranks and the clock. */
static void status(uint8_t p[24], int64_t pub, uint64_t age_us)
{
    sfb__put_u64(p, (uint64_t)pub);
    sfb__put_u64(p + 8, age_us);
    sfb__put_u64(p + 16, 0);
}

static int test_stall(void)
{
    struct sfb__loopback *lb;
    ASSERT_OK(sfb__loopback_open(&lb, 3, NULL));
    struct sfb__comm *c = sfb__loopback_comm(lb, 0);
    c->s.stall_timeout_s = 2;
    struct sfb__ssp ssp;
    ASSERT_OK(sfb__ssp_init(&ssp, 3, 0, 0));
    ASSERT_OK(sfb__ssp_mark(&ssp, 0, 0));
    ASSERT_OK(sfb__ssp_mark(&ssp, 1, 0)); /* rank 1 through clock 0, rank 2 nothing */
    ASSERT_OK(sfb__ssp_mark(&ssp, 2, 0));
    ASSERT_OK(sfb__ssp_mark(&ssp, 2, 1));
    uint8_t p[24];
    status(p, 1, 3000000); /* rank 1: clock 1, 3 s ago */
    sfb__comm_on_status(c, 1, p, 23); /* short: ignored */
    ASSERT_EQ(atomic_load(&c->stall.peer_pub[1]), -1);
    status(p, -2, 0); /* a clock below -1: ignored */
    sfb__comm_on_status(c, 1, p, 24);
    ASSERT_EQ(atomic_load(&c->stall.peer_pub[1]), -1);
    status(p, 1, 400ull * 86400 * 1000000); /* an age over a year: ignored */
    sfb__comm_on_status(c, 1, p, 24);
    ASSERT_EQ(atomic_load(&c->stall.peer_pub[1]), -1);
    double now = sfb__now();
    /* rank 1 published clock 1 only 1 s ago: slow, not lost */
    status(p, 1, 1000000);
    sfb__comm_on_status(c, 1, p, 24);
    ASSERT_EQ(atomic_load(&c->stall.peer_pub[1]), 1);
    ASSERT_OK(sfb__comm_check_stall(c, 1, now - 10, &ssp));
    /* rank 2 published clock 1, 3 s ago, and it has arrived */
    status(p, 1, 3000000);
    sfb__comm_on_status(c, 2, p, 24);
    ASSERT_OK(sfb__comm_check_stall(c, 1, now - 10, &ssp));
    /* a wait younger than a quarter of the timeout checks nothing */
    status(p, 1, 3000000);
    sfb__comm_on_status(c, 1, p, 24);
    ASSERT_OK(sfb__comm_check_stall(c, 1, now - 0.1, &ssp));
    /* rank 1's clock 1, published 3 s ago, not here: lost */
    ASSERT_EQ(sfb__comm_check_stall(c, 1, now - 10, &ssp), -SFB_EPEER);
    ASSERT_STR_CONTAINS(c->fail.reason, "stalled: rank 1 published clock 1 3.");
    ASSERT_STR_CONTAINS(c->fail.reason, " s ago; rank 0, waiting ");
    ASSERT_STR_CONTAINS(c->fail.reason, "for clock 1, has its updates through clock 0");
    sfb__ssp_fini(&ssp);
    sfb__loopback_close(&lb);
    return 0;
}

/* An ABORT frame from rank 0 carrying `reason` (len bytes), delivered to
 * rank 1's comm as the transport would; rank 1's failure reason after. */
static const char *deliver_abort(struct sfb__loopback *lb, const void *reason, size_t len)
{
    struct sfb__comm *c0 = sfb__loopback_comm(lb, 0), *c1 = sfb__loopback_comm(lb, 1);
    struct sfb__buf *b;
    if (sfb__comm_buf_get(c1, SFB_WIRE_HDR_SIZE + len, &b)) return NULL;
    struct sfb__wire_hdr h = {.type = SFB_WIRE_ABORT, .origin = 0, .sender = 0,
                             .payload_len = len};
    struct sfb__wire_piece piece = {reason, len};
    memcpy(b->data + SFB_WIRE_HDR_SIZE, reason, len);
    if (sfb__comm_header(c0, &h, &piece, 1, b->data)) return NULL;
    struct sfb__frame f = {.buf = b, .data = b->data, .len = SFB_WIRE_HDR_SIZE + len, .src = 0};
    sfb__comm_deliver(c1, &f); /* a control frame: taken, buffer released */
    return c1->fail.reason;
}

/* A peer's abort reason keeps its UTF-8 ("×" was "??"); control
 * characters, stray bytes, overlong forms and surrogates become '?'; a long
 * reason is cut before a sequence, never inside one. */
static int test_abort_reason_text(void)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"65536 \xc3\x97 65537 parameters", "65536 \xc3\x97 65537 parameters"},
        {"\xe2\x82\xac \xf0\x9f\x98\x80 \xce\xbb", "\xe2\x82\xac \xf0\x9f\x98\x80 \xce\xbb"},
        {"a\nb\x1b[31mc\x7f", "a?b?[31mc?"},
        {"\xc2\x85|\xc3|\xc0\xaf|\xed\xa0\x80|\xf8\x88\x80\x80\x80|\xe2\x82",
         "??|?|??|???|?????|??"},
    };
    for (size_t i = 0; i < SFB_ARRAY_LEN(cases); i++) {
        struct sfb__loopback *lb;
        ASSERT_OK(sfb__loopback_open(&lb, 2, NULL));
        const char *why = deliver_abort(lb, cases[i].in, strlen(cases[i].in));
        char want[128];
        snprintf(want, sizeof want, "rank 0 aborted the job: %s", cases[i].want);
        ASSERT_STR_CONTAINS(why, want);
        ASSERT_EQ(strlen(why), strlen(want));
        sfb__loopback_close(&lb);
    }
    /* 1000 characters "é" (2000 bytes): cut at 800 bytes, a whole number of
     * characters */
    char longer[2000];
    for (int i = 0; i < 1000; i++) memcpy(longer + 2 * i, "\xc3\xa9", 2);
    struct sfb__loopback *lb;
    ASSERT_OK(sfb__loopback_open(&lb, 2, NULL));
    const char *why = deliver_abort(lb, longer, sizeof longer);
    ASSERT(why != NULL);
    const char *text = strstr(why, ": ") + 2;
    ASSERT_EQ(strlen(text), 800);
    ASSERT_EQ(memcmp(text, longer, 800), 0);
    sfb__loopback_close(&lb);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        {"order", test_order},
        {"rejects_bad_shape", test_rejects_bad_shape},
        {"deadlock_fails", test_deadlock_fails},
        {"barrier", test_barrier},
        {"unread_at_close", test_unread_at_close},
        {"stall", test_stall},
        {"fd_limit", test_fd_limit},
        {"abort_reason_text", test_abort_reason_text},
    };
    return test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
}
