/* Bootstrap tests: wire header, hello validation, rank 0 rejecting bad
 * connections, single-process mode, and real multi-process env rendezvous. */
#include "src/boot/bootstrap.h"
#include "src/base/util.h"
#include "src/launch/launch_internal.h"
#include "test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void clear_env(void)
{
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv("SFB_RANK");
    unsetenv("SFB_WORLD_SIZE");
    unsetenv("SFB_RENDEZVOUS");
    unsetenv("SFB_JOB_KEY");
    unsetenv("SFB_RENDEZVOUS_HELLO_TIMEOUT");
    unsetenv("SFB_RENDEZVOUS_MAX_PENDING");
}

static void set_env(int rank, int world, int port, const char *key)
{
    char v[64];
    clear_env();
    snprintf(v, sizeof v, "%d", rank);
    setenv("SFB_RANK", v, 1);
    snprintf(v, sizeof v, "%d", world);
    setenv("SFB_WORLD_SIZE", v, 1);
    if (port) {
        snprintf(v, sizeof v, "127.0.0.1:%d", port);
        setenv("SFB_RENDEZVOUS", v, 1);
    }
    if (key) setenv("SFB_JOB_KEY", key, 1);
}

static struct sfb__bootstrap_settings quick(double t)
{
    struct sfb__bootstrap_settings s;
    sfb__bootstrap_default_settings(&s);
    s.connect_timeout_s = t;
    s.timeout_s = t;
    s.use_pmix = 0;
    return s;
}

/* Captured log lines (rank 0 runs in another thread in one test). */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[8192];
static void log_sink(void *u, enum sfb_log_level l, int rank, const char *msg)
{
    pthread_mutex_lock(&log_mu);
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof log_text - n, "%s\n", msg);
    pthread_mutex_unlock(&log_mu);
}

/* A port for a test's rank 0, held as the launcher holds it (the last
 * test's is let go): no other test's socket takes it first. */
static int reserved_port(void)
{
    static int held = -1;
    if (held >= 0) close(held);
    return sfb__launch_reserve_port("127.0.0.1", &held);
}

static int test_header_roundtrip(void)
{
    struct sfb__boot_hdr h = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, SFB__BOOT_CONTRIB, 0x0102030405060708ull,
                              7, 9, 3, 0xA0B0C0D0u};
    uint8_t b[SFB__BOOT_HDR_SIZE];
    sfb__boot_hdr_encode(&h, b);
    ASSERT_EQ(memcmp(b, "SFBR", 4), 0);
    ASSERT_EQ(b[4], SFB__BOOT_VERSION);
    ASSERT_EQ(b[6], SFB__BOOT_CONTRIB);
    ASSERT_EQ(b[8], 0x08);
    ASSERT_EQ(b[15], 0x01);
    ASSERT_EQ(b[16], 7);
    ASSERT_EQ(b[28], 0xD0);
    ASSERT_EQ(b[31], 0xA0);
    struct sfb__boot_hdr d;
    sfb__boot_hdr_decode(b, &d);
    ASSERT_EQ(d.magic, h.magic);
    ASSERT_EQ(d.type, h.type);
    ASSERT(d.key == h.key);
    ASSERT_EQ(d.rank, 7);
    ASSERT_EQ(d.world, 9);
    ASSERT_EQ(d.seq, 3);
    ASSERT_EQ(d.len, 0xA0B0C0D0u);
    return 0;
}

static int test_check_hello(void)
{
    unsigned char seen[4] = {1, 1, 0, 0};
    char why[200];
    struct sfb__boot_hdr ok = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, SFB__BOOT_HELLO, 42, 2, 4, 0, 0};
    ASSERT_EQ(sfb__boot_check_hello(&ok, 42, 1, 4, seen, why, sizeof why), 0);
    struct sfb__boot_hdr h = ok;
    h.key = 43;
    ASSERT_EQ(sfb__boot_check_hello(&h, 42, 1, 4, seen, why, sizeof why), -SFB_EJOBKEY);
    ASSERT_STR_CONTAINS(why, "job key 0x000000000000002b, expected 0x000000000000002a");
    ASSERT_EQ(sfb__boot_check_hello(&ok, 42, 0, 4, seen, why, sizeof why), -SFB_EJOBKEY);
    ASSERT_STR_CONTAINS(why, "no SFB_JOB_KEY");
    h = ok;
    h.rank = 1;
    ASSERT_EQ(sfb__boot_check_hello(&h, 42, 1, 4, seen, why, sizeof why), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(why, "duplicate rank 1");
    h.rank = 4;
    ASSERT_EQ(sfb__boot_check_hello(&h, 42, 1, 4, seen, why, sizeof why), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(why, "rank 4 out of range 1..3");
    h.rank = 0;
    ASSERT_EQ(sfb__boot_check_hello(&h, 42, 1, 4, seen, why, sizeof why), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(why, "rank 0 out of range");
    h = ok;
    h.len = 100; /* a hello announcing a payload it must not have */
    ASSERT_EQ(sfb__boot_check_hello(&h, 42, 1, 4, seen, why, sizeof why), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(why, "len 100");
    h = ok;
    h.magic ^= 1;
    ASSERT_EQ(sfb__boot_check_hello(&h, 42, 1, 4, seen, why, sizeof why), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(why, "bad magic");
    h = ok;
    h.version = SFB__BOOT_VERSION + 1;
    ASSERT_EQ(sfb__boot_check_hello(&h, 42, 1, 4, seen, why, sizeof why), -SFB_EVERSION);
    h = ok;
    h.world = 5;
    ASSERT_EQ(sfb__boot_check_hello(&h, 42, 1, 4, seen, why, sizeof why), -SFB_ECONFIG);
    ASSERT_STR_CONTAINS(why, "world size 5, expected 4");
    h = ok;
    h.type = SFB__BOOT_TABLE;
    ASSERT_EQ(sfb__boot_check_hello(&h, 42, 1, 4, seen, why, sizeof why), -SFB_EFORMAT);
    return 0;
}

static int test_parse_key(void)
{
    uint64_t k = 0;
    ASSERT_OK(sfb__bootstrap_parse_key("0x1f", &k));
    ASSERT_EQ(k, 31);
    ASSERT_OK(sfb__bootstrap_parse_key("31", &k));
    ASSERT_EQ(k, 31);
    ASSERT_OK(sfb__bootstrap_parse_key("deadbeef", &k));
    ASSERT_EQ(k, 0xdeadbeefu);
    ASSERT_OK(sfb__bootstrap_parse_key("0xffffffffffffffff", &k));
    ASSERT(k == UINT64_MAX);
    ASSERT_EQ(sfb__bootstrap_parse_key("0", &k), -SFB_EUSAGE);
    ASSERT_EQ(sfb__bootstrap_parse_key("0x", &k), -SFB_EUSAGE);
    ASSERT_EQ(sfb__bootstrap_parse_key("12g", &k), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "SFB_JOB_KEY '12g'");
    ASSERT_EQ(sfb__bootstrap_parse_key("0x10000000000000000", &k), -SFB_EUSAGE);
    ASSERT_EQ(sfb__bootstrap_parse_key("99999999999999999999", &k), -SFB_EUSAGE);
    return 0;
}

static int test_single(void)
{
    clear_env();
    struct sfb__bootstrap_settings s = quick(5);
    struct sfb__bootstrap *bs;
    ASSERT_OK(sfb__bootstrap_open(&bs, &s));
    ASSERT_EQ(sfb__bootstrap_kind(bs), SFB__BOOTSTRAP_SINGLE);
    ASSERT_EQ(sfb__bootstrap_rank(bs), 0);
    ASSERT_EQ(sfb__bootstrap_size(bs), 1);
    ASSERT(sfb__bootstrap_job_key(bs) != 0);
    char all[5] = {0};
    ASSERT_OK(sfb__bootstrap_allgather(bs, "abcd", 4, all));
    ASSERT_EQ(strcmp(all, "abcd"), 0);
    void *v;
    size_t lens[1];
    ASSERT_OK(sfb__bootstrap_allgatherv(bs, "xyz", 3, &v, lens));
    ASSERT_EQ(lens[0], 3);
    ASSERT_EQ(memcmp(v, "xyz", 3), 0);
    free(v);
    ASSERT_OK(sfb__bootstrap_barrier(bs));
    sfb__bootstrap_close(&bs);
    ASSERT(bs == NULL);
    /* The default settings (PMIx probing included) also end up single. */
    setenv("SFB_JOB_KEY", "0x2a", 1);
    ASSERT_OK(sfb__bootstrap_open(&bs, NULL));
    ASSERT_EQ(sfb__bootstrap_kind(bs), SFB__BOOTSTRAP_SINGLE);
    ASSERT_EQ(sfb__bootstrap_job_key(bs), 42);
    sfb__bootstrap_close(&bs);
    clear_env();
    return 0;
}

static int test_env_errors(void)
{
    struct sfb__bootstrap_settings s = quick(0.5);
    struct sfb__bootstrap *bs = NULL;
    set_env(0, 1, 0, NULL);
    ASSERT_OK(sfb__bootstrap_open(&bs, &s));
    ASSERT_EQ(sfb__bootstrap_kind(bs), SFB__BOOTSTRAP_ENV);
    ASSERT_EQ(sfb__bootstrap_size(bs), 1);
    ASSERT_OK(sfb__bootstrap_barrier(bs));
    sfb__bootstrap_close(&bs);

    set_env(2, 2, 0, NULL);
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "SFB_RANK='2': expected an integer in 0..1");
    ASSERT(bs == NULL);
    set_env(0, 0, 0, NULL);
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "SFB_WORLD_SIZE='0'");
    set_env(1, 2, 0, NULL);
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "SFB_RENDEZVOUS is not set");
    set_env(1, 2, 0, "zz!");
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "SFB_JOB_KEY");
    set_env(1, 2, 0, NULL);
    setenv("SFB_RENDEZVOUS", "127.0.0.1", 1);
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "expected host:port");

    set_env(0, 2, 1, NULL);
    setenv("SFB_RENDEZVOUS_HELLO_TIMEOUT", "soon", 1);
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "SFB_RENDEZVOUS_HELLO_TIMEOUT='soon': expected seconds");
    setenv("SFB_RENDEZVOUS_HELLO_TIMEOUT", "0", 1);
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "SFB_RENDEZVOUS_HELLO_TIMEOUT='0'");
    unsetenv("SFB_RENDEZVOUS_HELLO_TIMEOUT");
    setenv("SFB_RENDEZVOUS_MAX_PENDING", "0", 1);
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "SFB_RENDEZVOUS_MAX_PENDING='0': expected an integer in 1..65536");
    ASSERT(bs == NULL);

    /* A joiner whose rank 0 never shows up gives up after connect_timeout. */
    int port = reserved_port();
    ASSERT_GT(port, 0);
    set_env(1, 2, port, NULL);
    double t0 = sfb__now();
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -ETIMEDOUT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "rank 1 could not reach rank 0");
    ASSERT_LT(sfb__now() - t0, 3.0);
    clear_env();
    return 0;
}

/* ---- rank 0 facing hostile connections ------------------------------------ */

struct rank0_run {
    int open_r, gather_r;
    char open_msg[512], gather_msg[512];
};

static void *rank0_thread(void *arg)
{
    struct rank0_run *run = arg;
    struct sfb__bootstrap_settings s = quick(10);
    struct sfb__bootstrap *bs = NULL;
    run->open_r = sfb__bootstrap_open(&bs, &s);
    snprintf(run->open_msg, sizeof run->open_msg, "%s", sfb_last_error());
    if (run->open_r) return NULL;
    char all[3 * 4];
    run->gather_r = sfb__bootstrap_allgather(bs, "zero", 4, all);
    snprintf(run->gather_msg, sizeof run->gather_msg, "%s", sfb_last_error());
    sfb__bootstrap_close(&bs);
    return NULL;
}

static int raw_connect(int port)
{
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 200; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        close(fd);
        usleep(10000);
    }
    return -1;
}

static int raw_send(int port, const struct sfb__boot_hdr *h, size_t bytes)
{
    int fd = raw_connect(port);
    uint8_t b[SFB__BOOT_HDR_SIZE];
    sfb__boot_hdr_encode(h, b);
    if (fd >= 0 && send(fd, b, bytes, MSG_NOSIGNAL) != (ssize_t)bytes) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 if the peer closes fd within `t` seconds (what rank 0 does to a
 * rejected connection), 0 if it stays open. */
static int closed_within(int fd, double t)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, (int)(t * 1000)) <= 0) return 0;
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

static int test_rank0_rejects_bad_hellos(void)
{
    int port = reserved_port();
    ASSERT_GT(port, 0);
    set_env(0, 3, port, "0x1234");
    log_text[0] = 0;
    sfb_log_set(log_sink, NULL, SFB_LOG_WARN);
    struct rank0_run run = {0};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, rank0_thread, &run), 0);

    struct sfb__boot_hdr good = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, SFB__BOOT_HELLO, 0x1234, 1, 3, 0, 0};
    struct sfb__boot_hdr h = good;
    int bad[8], nbad = 0, fd1, fd2;
    h.key = 0x9999;
    bad[nbad++] = raw_send(port, &h, SFB__BOOT_HDR_SIZE);
    fd1 = raw_send(port, &good, SFB__BOOT_HDR_SIZE);
    bad[nbad++] = raw_send(port, &good, SFB__BOOT_HDR_SIZE); /* duplicate rank 1 */
    h = good;
    h.rank = 3;
    bad[nbad++] = raw_send(port, &h, SFB__BOOT_HDR_SIZE);
    h.rank = 0;
    bad[nbad++] = raw_send(port, &h, SFB__BOOT_HDR_SIZE);
    h = good;
    h.rank = 2;
    h.len = 100;
    bad[nbad++] = raw_send(port, &h, SFB__BOOT_HDR_SIZE);
    h.len = 0;
    h.magic = 0x11111111;
    bad[nbad++] = raw_send(port, &h, SFB__BOOT_HDR_SIZE);
    h = good;
    h.rank = 2;
    int trunc = raw_send(port, &h, 10);
    if (trunc >= 0) close(trunc);
    int all_closed = 1;
    for (int i = 0; i < nbad; i++) {
        all_closed &= bad[i] >= 0 && closed_within(bad[i], 5);
        if (bad[i] >= 0) close(bad[i]);
    }
    /* Rejects do not count: the real rank 2 still completes the job. Its
     * hello arrives in two pieces (a partial read on rank 0's side). */
    fd2 = raw_send(port, &h, 10);
    if (fd2 >= 0) {
        uint8_t hb[SFB__BOOT_HDR_SIZE];
        sfb__boot_hdr_encode(&h, hb);
        usleep(50000);
        ASSERT_EQ(send(fd2, hb + 10, sizeof hb - 10, MSG_NOSIGNAL), (ssize_t)sizeof hb - 10);
    }
    ASSERT(fd1 >= 0 && fd2 >= 0);
    uint8_t b[SFB__BOOT_HDR_SIZE];
    struct sfb__boot_hdr w1 = {0}, w2 = {0};
    ASSERT_EQ(recv(fd1, b, sizeof b, MSG_WAITALL), (ssize_t)sizeof b);
    sfb__boot_hdr_decode(b, &w1);
    ASSERT_EQ(recv(fd2, b, sizeof b, MSG_WAITALL), (ssize_t)sizeof b);
    sfb__boot_hdr_decode(b, &w2);

    /* Rank 1 lies about its contribution's length: rank 0 must refuse it
     * before allocating or reading, and name rank 1 and the field. */
    h = good;
    h.type = SFB__BOOT_CONTRIB;
    h.seq = 1;
    h.len = SFB__BOOTSTRAP_WIRE_BLOB + 1;
    sfb__boot_hdr_encode(&h, b);
    ASSERT_EQ(send(fd1, b, sizeof b, MSG_NOSIGNAL), (ssize_t)sizeof b);
    pthread_join(th, NULL);
    close(fd1);
    close(fd2);
    sfb_log_set(NULL, NULL, SFB_LOG_ERROR);
    clear_env();

    ASSERT(all_closed);
    ASSERT_EQ(w1.type, SFB__BOOT_WELCOME);
    ASSERT(w1.key == 0x1234);
    ASSERT_EQ(w1.world, 3);
    ASSERT_EQ(w2.type, SFB__BOOT_WELCOME);
    if (run.open_r) TEST_FAIL_AT("rank 0 open: %d %s", run.open_r, run.open_msg);
    ASSERT_EQ(run.gather_r, -SFB_EFORMAT);
    char limit[64];
    snprintf(limit, sizeof limit, "rank 1: len %u exceeds the limit", SFB__BOOTSTRAP_WIRE_BLOB + 1);
    ASSERT_STR_CONTAINS(run.gather_msg, limit);
    ASSERT_STR_CONTAINS(log_text, "job key 0x0000000000009999, expected 0x0000000000001234");
    ASSERT_STR_CONTAINS(log_text, "duplicate rank 1");
    ASSERT_STR_CONTAINS(log_text, "rank 3 out of range 1..2");
    ASSERT_STR_CONTAINS(log_text, "rank 0 out of range 1..2");
    ASSERT_STR_CONTAINS(log_text, "hello with seq 0 len 100");
    ASSERT_STR_CONTAINS(log_text, "bad magic 0x11111111");
    ASSERT_STR_CONTAINS(log_text, "closed before sending a whole hello");
    ASSERT_STR_CONTAINS(log_text, "rejected connection from 127.0.0.1:");
    return 0;
}

/* A connection without a hello is dropped after SFB_RENDEZVOUS_HELLO_TIMEOUT,
 * or earlier, oldest first, when SFB_RENDEZVOUS_MAX_PENDING connections
 * wait; the real rank still joins. */
static int test_rank0_hello_bound_and_table(void)
{
    int port = reserved_port();
    ASSERT_GT(port, 0);
    set_env(0, 2, port, "0x4321");
    setenv("SFB_RENDEZVOUS_HELLO_TIMEOUT", "1", 1);
    setenv("SFB_RENDEZVOUS_MAX_PENDING", "2", 1);
    log_text[0] = 0;
    sfb_log_set(log_sink, NULL, SFB_LOG_WARN);
    struct rank0_run run = {0};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, rank0_thread, &run), 0);
    int a = raw_connect(port);
    usleep(400000);
    int b = raw_connect(port);
    int c = raw_connect(port); /* table full: a (0.4 s old) makes room */
    int a_dropped = a >= 0 && closed_within(a, 0.5);
    double t_b = sfb__now();
    int b_dropped = b >= 0 && closed_within(b, 3.0);
    double b_after = sfb__now() - t_b;
    struct sfb__boot_hdr good = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, SFB__BOOT_HELLO, 0x4321, 1, 2, 0, 0};
    int fd1 = raw_send(port, &good, SFB__BOOT_HDR_SIZE);
    uint8_t w[SFB__BOOT_HDR_SIZE];
    struct sfb__boot_hdr wh = {0};
    if (fd1 >= 0 && recv(fd1, w, sizeof w, MSG_WAITALL) == (ssize_t)sizeof w) sfb__boot_hdr_decode(w, &wh);
    if (fd1 >= 0) close(fd1); /* rank 0's allgather then fails: not checked */
    pthread_join(th, NULL);
    if (a >= 0) close(a);
    if (b >= 0) close(b);
    if (c >= 0) close(c);
    sfb_log_set(NULL, NULL, SFB_LOG_ERROR);
    clear_env();
    ASSERT(a_dropped);
    ASSERT(b_dropped);
    ASSERT_LT(b_after, 2.5); /* its 1 s bound, not rank 0's 10 s deadline */
    if (run.open_r) TEST_FAIL_AT("rank 0 open: %d %s", run.open_r, run.open_msg);
    ASSERT_EQ(wh.type, SFB__BOOT_WELCOME);
    ASSERT(wh.key == 0x4321);
    ASSERT_STR_CONTAINS(log_text, "dropped to make room (2 connections waiting for a hello)");
    ASSERT_STR_CONTAINS(log_text, "no complete hello within 1 s");
    return 0;
}

/* ---- a joiner facing a lying rank 0 ---------------------------------------- */

struct joiner_run {
    int r;
    char msg[512];
};

static void *joiner_thread(void *arg)
{
    struct joiner_run *run = arg;
    struct sfb__bootstrap_settings s = quick(5);
    struct sfb__bootstrap *bs = NULL;
    run->r = sfb__bootstrap_open(&bs, &s);
    if (!run->r) {
        char all[8];
        run->r = sfb__bootstrap_allgather(bs, "mine", 4, all);
    }
    snprintf(run->msg, sizeof run->msg, "%s", sfb_last_error());
    sfb__bootstrap_close(&bs);
    return NULL;
}

static int test_joiner_rejects_bad_table(void)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    ASSERT_EQ(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    ASSERT_EQ(listen(lfd, 4), 0);
    ASSERT_EQ(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
    set_env(1, 2, ntohs(a.sin_port), "0x77");
    struct joiner_run run = {0};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, joiner_thread, &run), 0);
    int fd = accept(lfd, NULL, NULL);
    uint8_t b[SFB__BOOT_HDR_SIZE];
    struct sfb__boot_hdr h;
    int ok = fd >= 0 && recv(fd, b, sizeof b, MSG_WAITALL) == (ssize_t)sizeof b;
    sfb__boot_hdr_decode(b, &h);
    int hello_ok = ok && h.type == SFB__BOOT_HELLO && h.rank == 1 && h.key == 0x77 && h.world == 2;
    struct sfb__boot_hdr w = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, SFB__BOOT_WELCOME, 0x77, 0, 2, 0, 0};
    sfb__boot_hdr_encode(&w, b);
    if (ok) ok = send(fd, b, sizeof b, MSG_NOSIGNAL) == (ssize_t)sizeof b;
    uint8_t c[SFB__BOOT_HDR_SIZE + 5];
    /* CONTRIB: no name (its length 0), then "mine" */
    if (ok) ok = recv(fd, c, sizeof c, MSG_WAITALL) == (ssize_t)sizeof c;
    sfb__boot_hdr_decode(c, &h);
    int contrib_ok = ok && h.type == SFB__BOOT_CONTRIB && h.seq == 1 && h.len == 5 && c[32] == 0 &&
                     !memcmp(c + 33, "mine", 4);
    /* A table whose entry for rank 1 claims 1000 bytes in an 8-byte body. */
    uint8_t t[SFB__BOOT_HDR_SIZE + 16] = {0};
    struct sfb__boot_hdr th_ = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, SFB__BOOT_TABLE, 0x77, 0, 2, 1, 16};
    sfb__boot_hdr_encode(&th_, t);
    t[32] = 4;
    t[36] = 0xe8;
    t[37] = 0x03;
    memcpy(t + 40, "zerorank", 8);
    if (ok) ok = send(fd, t, sizeof t, MSG_NOSIGNAL) == (ssize_t)sizeof t;
    pthread_join(th, NULL);
    if (fd >= 0) close(fd);
    close(lfd);
    clear_env();
    ASSERT(hello_ok);
    ASSERT(contrib_ok);
    ASSERT(ok);
    ASSERT_EQ(run.r, -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(run.msg, "table entry for rank 1 has len 1000");
    return 0;
}

/* ---- real processes --------------------------------------------------------- */

/* Forks n children running fn(rank); waits at most `limit` seconds, then
 * kills and reaps whatever is left. Returns the number of ranks that did not
 * exit 0 (a child's exit code is the failing line of fn). */
static int run_ranks(int n, int (*fn)(int rank, void *), void *arg, double limit)
{
    pid_t pids[16];
    pid_t parent = getpid();
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(99);
            alarm((unsigned)limit + 5);
            _exit(fn(r, arg));
        }
    }
    int failed = 0, left = n;
    double end = sfb__now() + limit;
    while (left > 0) {
        for (int r = 0; r < n; r++) {
            int st;
            if (pids[r] <= 0 || waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "  rank %d: %s %d\n", r, WIFEXITED(st) ? "exit (line)" : "signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                failed++;
            }
            pids[r] = 0;
            left--;
        }
        if (left && sfb__now() > end) {
            for (int r = 0; r < n; r++)
                if (pids[r] > 0) {
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], NULL, 0);
                    fprintf(stderr, "  rank %d: killed after %.0f s\n", r, limit);
                    failed++;
                }
            break;
        }
        usleep(5000);
    }
    return failed;
}

#define CHILD_CHECK(c)                                                          \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "  rank %d line %d: %s: %s\n", rank, __LINE__, #c, \
                    sfb_last_error());                                         \
            return __LINE__ % 200 + 1;                                         \
        }                                                                      \
    } while (0)

struct world_arg {
    int port, n;
    int key_pipe[2];
};

static int gather_rank(int rank, void *p)
{
    struct world_arg *w = p;
    set_env(rank, w->n, w->port, NULL); /* no key: rank 0 makes one */
    if (rank == 0) usleep(300000);      /* joiners must retry */
    struct sfb__bootstrap_settings s = quick(15);
    struct sfb__bootstrap *bs;
    CHILD_CHECK(sfb__bootstrap_open(&bs, &s) == 0);
    CHILD_CHECK(sfb__bootstrap_rank(bs) == rank && sfb__bootstrap_size(bs) == w->n);
    for (int round = 0; round < 2; round++) {
        uint32_t mine[4] = {(uint32_t)rank, (uint32_t)round, 0xabc0u + (uint32_t)rank, 7};
        uint32_t all[4 * 16];
        CHILD_CHECK(sfb__bootstrap_allgather(bs, mine, sizeof mine, all) == 0);
        for (int r = 0; r < w->n; r++)
            CHILD_CHECK(all[4 * r] == (uint32_t)r && all[4 * r + 1] == (uint32_t)round &&
                        all[4 * r + 2] == 0xabc0u + (uint32_t)r && all[4 * r + 3] == 7);
    }
    char blob[16];
    memset(blob, 'a' + rank, sizeof blob);
    void *v;
    size_t lens[16];
    CHILD_CHECK(sfb__bootstrap_allgatherv(bs, blob, (size_t)rank * 3, &v, lens) == 0);
    const char *q = v;
    for (int r = 0; r < w->n; r++) {
        CHILD_CHECK(lens[r] == (size_t)r * 3);
        for (size_t i = 0; i < lens[r]; i++) CHILD_CHECK(*q++ == 'a' + r);
    }
    free(v);
    /* Unequal lengths through the equal-length call fail on every rank. */
    char big[16 * 16];
    int r = sfb__bootstrap_allgather(bs, blob, rank == 2 ? 5 : 4, big);
    CHILD_CHECK(r == -SFB_ESHAPE);
    CHILD_CHECK(strstr(sfb_last_error(), "rank 2 contributed 5 bytes, rank 0 4"));
    /* Ranks in different calls of the same shape (the same 4 bytes): named
     * on every rank, not paired; the channel stays in step. */
    sfb__bootstrap_label(bs, rank == 3 ? "barrier" : "allgather");
    CHILD_CHECK(sfb__bootstrap_allgather(bs, blob, 4, big) == -SFB_ECONFIG);
    CHILD_CHECK(strstr(sfb_last_error(), "rank 3 is in barrier where rank 0 is in allgather"));
    sfb__bootstrap_label(bs, rank == 1 ? NULL : "agree");
    CHILD_CHECK(sfb__bootstrap_allgather(bs, blob, 4, big) == -SFB_ECONFIG);
    CHILD_CHECK(strstr(sfb_last_error(), "rank 1 is in another of the job's calls"));
    sfb__bootstrap_label(bs, "allgather"); /* the same call: gathered */
    CHILD_CHECK(sfb__bootstrap_allgatherv(bs, blob, (size_t)rank, &v, lens) == 0);
    q = v;
    for (int k = 0; k < w->n; k++) {
        CHILD_CHECK(lens[k] == (size_t)k);
        for (size_t i = 0; i < lens[k]; i++) CHILD_CHECK(*q++ == 'a' + k);
    }
    free(v);
    CHILD_CHECK(sfb__bootstrap_barrier(bs) == 0); /* a named barrier */
    sfb__bootstrap_label(bs, NULL);
    sfb__bootstrap_close(&bs);

    /* A fresh job on the same port: open, barrier twice, close. */
    set_env(rank, w->n, w->port, "777");
    CHILD_CHECK(sfb__bootstrap_open(&bs, &s) == 0);
    CHILD_CHECK(sfb__bootstrap_job_key(bs) == 777);
    CHILD_CHECK(sfb__bootstrap_barrier(bs) == 0);
    CHILD_CHECK(sfb__bootstrap_barrier(bs) == 0);
    uint64_t key = sfb__bootstrap_job_key(bs);
    CHILD_CHECK(write(w->key_pipe[1], &key, sizeof key) == (ssize_t)sizeof key);
    sfb__bootstrap_close(&bs);
    return 0;
}

static int test_four_processes(void)
{
    struct world_arg w = {reserved_port(), 4, {-1, -1}};
    ASSERT_GT(w.port, 0);
    ASSERT_EQ(pipe(w.key_pipe), 0);
    ASSERT_EQ(run_ranks(4, gather_rank, &w, 25), 0);
    close(w.key_pipe[1]);
    uint64_t keys[4];
    ASSERT_EQ(read(w.key_pipe[0], keys, sizeof keys), (ssize_t)sizeof keys);
    for (int i = 0; i < 4; i++) ASSERT(keys[i] == 777);
    close(w.key_pipe[0]);
    return 0;
}

/* Rank 0 starts late (1.15 s, between two of the joiners' retries as they
 * were spaced before: 10 ms doubling to 0.5 s, tries at 0.63, 1.13, 1.63 s):
 * the joiners are in within a retry interval (50 ms) of its listening, not
 * half a second later. Rank 0's clock when it began to listen travels in the
 * first allgather (CLOCK_MONOTONIC is one clock for the processes of a host). */
static int late_rank0_rank(int rank, void *p)
{
    struct world_arg *w = p;
    set_env(rank, w->n, w->port, "0x5157");
    if (rank == 0) usleep(1150000);
    double t_open = sfb__now();
    struct sfb__bootstrap_settings s = quick(15);
    struct sfb__bootstrap *bs;
    CHILD_CHECK(sfb__bootstrap_open(&bs, &s) == 0);
    double joined = sfb__now(), all[16];
    CHILD_CHECK(sfb__bootstrap_allgather(bs, &t_open, sizeof t_open, all) == 0);
    double late = joined - all[0];
    if (rank != 0 && !(late < 0.3))
        fprintf(stderr, "  rank %d joined %.3f s after rank 0 began to listen\n", rank, late);
    CHILD_CHECK(rank == 0 || late < 0.3);
    sfb__bootstrap_close(&bs);
    return 0;
}

static int test_late_rank0(void)
{
    struct world_arg w = {reserved_port(), 3, {-1, -1}};
    ASSERT_GT(w.port, 0);
    ASSERT_EQ(run_ranks(3, late_rank0_rank, &w, 20), 0);
    return 0;
}

/* torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), no
 * SFB_*: rank 0 listens on MASTER_PORT + 1 (torchrun's agent holds
 * MASTER_PORT: here a socket of the test's own), the ranks gather. */
static int torchrun_rank(int rank, void *p)
{
    struct world_arg *w = p;
    char v[32];
    clear_env();
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", w->n);
    setenv("WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", w->port - 1);
    setenv("MASTER_PORT", v, 1);
    struct sfb__bootstrap_settings s = quick(15);
    struct sfb__bootstrap *bs;
    CHILD_CHECK(sfb__bootstrap_open(&bs, &s) == 0);
    CHILD_CHECK(sfb__bootstrap_kind(bs) == SFB__BOOTSTRAP_ENV);
    CHILD_CHECK(sfb__bootstrap_rank(bs) == rank && sfb__bootstrap_size(bs) == w->n);
    int all[16];
    CHILD_CHECK(sfb__bootstrap_allgather(bs, &rank, sizeof rank, all) == 0);
    for (int r = 0; r < w->n; r++) CHILD_CHECK(all[r] == r);
    sfb__bootstrap_close(&bs);
    return 0;
}

static int test_torchrun_env(void)
{
    /* a pair of ports: MASTER_PORT (held, as torchrun's store holds it) and
     * the rendezvous one above it, free */
    int held = -1, port = 0;
    for (int tries = 0; tries < 50 && held < 0; tries++) {
        int p = reserved_port();
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(p - 1)),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (p > 1024 && fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            listen(fd, 4) == 0) {
            held = fd;
            port = p;
        } else if (fd >= 0) {
            close(fd);
        }
    }
    ASSERT(held >= 0);
    struct world_arg w = {port, 3, {-1, -1}};
    ASSERT_EQ(run_ranks(3, torchrun_rank, &w, 20), 0);
    close(held);

    /* SFB_RANK wins over RANK; RANK without MASTER_ADDR is an error naming
     * both; a bad MASTER_PORT is named; WORLD_SIZE 1 needs no address */
    struct sfb__bootstrap_settings s = quick(0.5);
    struct sfb__bootstrap *bs = NULL;
    set_env(0, 1, 0, NULL);
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    ASSERT_OK(sfb__bootstrap_open(&bs, &s));
    ASSERT_EQ(sfb__bootstrap_size(bs), 1);
    sfb__bootstrap_close(&bs);
    unsetenv("SFB_RANK");
    unsetenv("SFB_WORLD_SIZE");
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "RANK and WORLD_SIZE are set (torchrun's) but not "
                                          "MASTER_ADDR and MASTER_PORT, nor SFB_RENDEZVOUS");
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "65535", 1);
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "MASTER_PORT='65535': expected an integer in 1..65534");
    setenv("RANK", "2", 1);
    ASSERT_EQ(sfb__bootstrap_open(&bs, &s), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "RANK='2': expected an integer in 0..1");
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    ASSERT_OK(sfb__bootstrap_open(&bs, &s));
    ASSERT_EQ(sfb__bootstrap_kind(bs), SFB__BOOTSTRAP_ENV);
    ASSERT_EQ(sfb__bootstrap_size(bs), 1);
    sfb__bootstrap_close(&bs);
    clear_env();
    ASSERT(bs == NULL);
    return 0;
}

static int wrong_key_rank(int rank, void *p)
{
    struct world_arg *w = p;
    set_env(rank, 2, w->port, rank == 0 ? "0xaaaa" : "0xbbbb");
    struct sfb__bootstrap_settings s = quick(1.5);
    struct sfb__bootstrap *bs = NULL;
    int r = sfb__bootstrap_open(&bs, &s);
    if (rank == 0) {
        CHILD_CHECK(r == -ETIMEDOUT);
        CHILD_CHECK(strstr(sfb_last_error(), "1 of 2 ranks joined; missing 1"));
    } else {
        CHILD_CHECK(r == -SFB_EPEER);
        CHILD_CHECK(strstr(sfb_last_error(), "before welcoming rank 1: it rejected the hello"));
    }
    CHILD_CHECK(bs == NULL);
    return 0;
}

static int test_wrong_key_processes(void)
{
    struct world_arg w = {reserved_port(), 2, {-1, -1}};
    ASSERT_GT(w.port, 0);
    double t0 = sfb__now();
    ASSERT_EQ(run_ranks(2, wrong_key_rank, &w, 10), 0);
    ASSERT_LT(sfb__now() - t0, 6.0);
    return 0;
}

/* A joiner that dies mid-job makes rank 0's next collective fail naming it. */
static int dead_peer_rank(int rank, void *p)
{
    struct world_arg *w = p;
    set_env(rank, 3, w->port, "5");
    struct sfb__bootstrap_settings s = quick(5);
    struct sfb__bootstrap *bs = NULL;
    CHILD_CHECK(sfb__bootstrap_open(&bs, &s) == 0);
    if (rank == 2) _exit(0); /* vanish without a word */
    int r = sfb__bootstrap_barrier(bs);
    CHILD_CHECK(r != 0);
    if (rank == 0) CHILD_CHECK(strstr(sfb_last_error(), "rank 2 closed the connection"));
    CHILD_CHECK(sfb__bootstrap_barrier(bs) == -SFB_EPEER); /* stays failed */
    sfb__bootstrap_close(&bs);
    return 0;
}

static int test_dead_peer(void)
{
    struct world_arg w = {reserved_port(), 3, {-1, -1}};
    ASSERT_GT(w.port, 0);
    ASSERT_EQ(run_ranks(3, dead_peer_rank, &w, 15), 0);
    return 0;
}

/* A job suspended mid-allgather (Ctrl-Z, Slurm): both ranks SIGSTOPped for
 * 2.5 s while rank 0 waits with a 1 s deadline and rank 1 has not yet
 * contributed; continued, rank 1 contributes 0.3 s later and rank 0 takes
 * it: the time it was stopped does not count against its deadline.
 * (Before: -ETIMEDOUT at once on waking.) */
static void *stop_both(void *p)
{
    struct world_arg *w = p;
    pid_t pids[2];
    if (read(w->key_pipe[0], pids, sizeof pids) != (ssize_t)sizeof pids) return NULL;
    usleep(200000); /* rank 0 is waiting in its allgather */
    kill(pids[0], SIGSTOP);
    kill(pids[1], SIGSTOP);
    usleep(2500000);
    kill(pids[0], SIGCONT);
    kill(pids[1], SIGCONT);
    return NULL;
}

static int stopped_rank(int rank, void *p)
{
    struct world_arg *w = p;
    set_env(rank, 2, w->port, "0x570b");
    struct sfb__bootstrap_settings s = quick(rank == 0 ? 1.0 : 10.0);
    struct sfb__bootstrap *bs = NULL;
    CHILD_CHECK(sfb__bootstrap_open(&bs, &s) == 0);
    CHILD_CHECK(sfb__bootstrap_barrier(bs) == 0);
    double t0 = sfb__now();
    if (rank == 1) { /* both pids in one write (PIPE_BUF: atomic) */
        pid_t pids[2] = {0, getpid()};
        uint32_t z = 0, got[2];
        CHILD_CHECK(sfb__bootstrap_allgather(bs, &z, sizeof z, got) == 0); /* rank 0's pid */
        pids[0] = (pid_t)got[0];
        CHILD_CHECK(write(w->key_pipe[1], pids, sizeof pids) == (ssize_t)sizeof pids);
        t0 = sfb__now();
        while (sfb__now() < t0 + 3.0) usleep(10000); /* stopped 0.2 s in, for 2.5 s */
    } else {
        uint32_t me = (uint32_t)getpid(), got[2];
        CHILD_CHECK(sfb__bootstrap_allgather(bs, &me, sizeof me, got) == 0);
    }
    uint32_t mine = 0x100u + (uint32_t)rank, all[2] = {0, 0};
    int r = sfb__bootstrap_allgather(bs, &mine, sizeof mine, all);
    if (r) fprintf(stderr, "  rank %d: %s\n", rank, sfb_last_error());
    CHILD_CHECK(r == 0);
    CHILD_CHECK(all[0] == 0x100u && all[1] == 0x101u);
    sfb__bootstrap_close(&bs);
    return 0;
}

static int test_stopped_in_allgather(void)
{
    struct world_arg w = {reserved_port(), 2, {-1, -1}};
    ASSERT_GT(w.port, 0);
    ASSERT_EQ(pipe(w.key_pipe), 0);
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, stop_both, &w), 0);
    int r = run_ranks(2, stopped_rank, &w, 20);
    close(w.key_pipe[1]); /* a stopper still reading (a rank failed early) gets EOF */
    pthread_join(t, NULL);
    close(w.key_pipe[0]);
    ASSERT_EQ(r, 0);
    return 0;
}

/* ---- a stalled rank 0 keeps its deadline ----------------------------------- */

/* Forks a child that runs fn(arg) and _exits with its result; it dies with
 * the test (PDEATHSIG) and by alarm after `limit` seconds. */
static pid_t spawn(int (*fn)(void *), void *arg, unsigned limit)
{
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(99);
        alarm(limit);
        _exit(fn(arg));
    }
    return pid;
}

/* Waits for pid until `end` (monotonic), calling idle() between looks;
 * kills it at `end`. Returns its wait status, -1 if it had to be killed.
 * *when gets the time it was seen to exit. */
static int reap_by(pid_t pid, double end, void (*idle)(void *), void *u, double *when)
{
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            *when = sfb__now();
            return st;
        }
        if (sfb__now() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            *when = sfb__now();
            return -1;
        }
        if (idle) idle(u);
        usleep(2000);
    }
}

struct stall_arg {
    int port, errfd;      /* errfd: rank 0's stderr (a pipe the test fills) */
    int done[2];          /* rank 0 -> test: when its open returned */
    double rdv_s, call_s; /* rank 0's rendezvous deadline and step timeout */
    const char *want;     /* in the deadline error */
};

static void fd2_sink(void *u, enum sfb_log_level l, int rank, const char *msg)
{
    char line[2100];
    int n = snprintf(line, sizeof line, "[%d] %s\n", rank, msg);
    if (n > 0 && write(2, line, (size_t)SFB_MIN(n, (int)sizeof line - 1)) < 0) {}
}

/* Rank 0 of a world of 2 whose rank 1 never comes: 0 if it failed with the
 * deadline error naming `want`. Nothing else goes to its stderr. */
static int stalled_rank0(void *p)
{
    struct stall_arg *a = p;
    if (a->errfd >= 0) {
        dup2(a->errfd, 2);
        fcntl(2, F_SETFL, fcntl(2, F_GETFL) & ~O_NONBLOCK);
    }
    set_env(0, 2, a->port, "0x51");
    setenv("SFB_RENDEZVOUS_HELLO_TIMEOUT", "0.3", 1);
    sfb_log_set(fd2_sink, NULL, SFB_LOG_WARN);
    struct sfb__bootstrap_settings s = quick(a->call_s);
    s.connect_timeout_s = a->rdv_s;
    struct sfb__bootstrap *bs = NULL;
    int r = sfb__bootstrap_open(&bs, &s);
    double end = sfb__now(); /* not its exit: valgrind's leak check takes a while */
    if (write(a->done[1], &end, sizeof end) != (ssize_t)sizeof end) return 5;
    if (r != -ETIMEDOUT) return 2;
    if (!strstr(sfb_last_error(), a->want)) return 3;
    return bs == NULL ? 0 : 4;
}

struct drain {
    int fd;
    char *buf;
    size_t len, cap;
};

static void drain_fd(void *u)
{
    struct drain *d = u;
    ssize_t n;
    while (d->len + 1 < d->cap && (n = read(d->fd, d->buf + d->len, d->cap - 1 - d->len)) > 0)
        d->len += (size_t)n;
    d->buf[d->len] = 0;
}

/* Rank 0 stalls writing a log line (its stderr is a pipe nobody reads, as
 * when a launcher's output pipe backs up) while a silent connection's hello
 * bound runs out; the stall ends 1.2 s in, before its 2 s deadline. It must
 * still give up at that deadline. (Before: the next poll() got a negative
 * timeout, meaning forever, and rank 0 waited as long as nothing arrived.) */
static int test_rank0_stalled_by_log(void)
{
    int ep[2];
    ASSERT_EQ(pipe2(ep, O_NONBLOCK | O_CLOEXEC), 0);
    char fill[4096];
    memset(fill, 'x', sizeof fill);
    size_t filled = 0;
    ssize_t n;
    while ((n = write(ep[1], fill, sizeof fill)) > 0) filled += (size_t)n;
    ASSERT(n < 0 && errno == EAGAIN);
    struct stall_arg a = {reserved_port(), ep[1], {-1, -1}, 2.0, 0.3,
                          "rank 0 waited 2 s: 1 of 2 ranks joined; missing 1"};
    ASSERT_GT(a.port, 0);
    ASSERT_EQ(pipe(a.done), 0);
    double t0 = sfb__now();
    pid_t pid = spawn(stalled_rank0, &a, 20);
    ASSERT_GT(pid, 0);
    close(ep[1]);
    int silent = raw_connect(a.port);
    struct sfb__boot_hdr h = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, SFB__BOOT_HELLO, 0x99, 1, 2, 0, 0};
    int wrong = raw_send(a.port, &h, SFB__BOOT_HDR_SIZE); /* rejected: rank 0 logs */
    while (sfb__now() < t0 + 1.2) usleep(10000);
    struct drain d = {ep[0], malloc(filled + 65536), 0, filled + 65536};
    ASSERT(d.buf);
    double t_exit;
    int st = reap_by(pid, t0 + 10.0, drain_fd, &d, &t_exit);
    drain_fd(&d);
    double t_end = 0;
    close(a.done[1]);
    ssize_t got_end = read(a.done[0], &t_end, sizeof t_end);
    close(a.done[0]);
    if (silent >= 0) close(silent);
    if (wrong >= 0) close(wrong);
    close(ep[0]);
    int rejected = strstr(d.buf + SFB_MIN(filled, d.len), "rejected connection from 127.0.0.1") != NULL;
    int dropped = strstr(d.buf + SFB_MIN(filled, d.len), "no complete hello within 0.3 s") != NULL;
    free(d.buf);
    ASSERT(silent >= 0 && wrong >= 0);
    if (st == -1) TEST_FAIL_AT("rank 0 still waiting %.1f s after its 2 s deadline", t_exit - t0 - 2.0);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
    ASSERT_EQ(got_end, (ssize_t)sizeof t_end);
    ASSERT_LT(t_end - t0, 2.75); /* the 2 s deadline, plus start-up and slack */
    ASSERT(rejected);
    ASSERT(dropped);
    return 0;
}

/* Rank 0 SIGSTOPped past its 1 s deadline (with a silent connection whose
 * hello bound runs out meanwhile) and SIGCONTed: it gives up at once. */
static int test_rank0_stopped_past_deadline(void)
{
    struct stall_arg a = {reserved_port(), -1, {-1, -1}, 1.0, 1.0,
                          "rank 0 waited 1 s: 1 of 2 ranks joined; missing 1"};
    ASSERT_GT(a.port, 0);
    ASSERT_EQ(pipe(a.done), 0);
    double t0 = sfb__now();
    pid_t pid = spawn(stalled_rank0, &a, 20);
    ASSERT_GT(pid, 0);
    int silent = raw_connect(a.port);
    usleep(100000);
    kill(pid, SIGSTOP);
    while (sfb__now() < t0 + 2.5) usleep(10000);
    double t_cont = sfb__now();
    kill(pid, SIGCONT);
    double t_exit;
    int st = reap_by(pid, t_cont + 5.0, NULL, NULL, &t_exit);
    if (silent >= 0) close(silent);
    double t_end = 0;
    close(a.done[1]);
    ssize_t got_end = read(a.done[0], &t_end, sizeof t_end);
    close(a.done[0]);
    ASSERT(silent >= 0);
    if (st == -1) TEST_FAIL_AT("rank 0 still waiting 5 s after SIGCONT");
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
    ASSERT_EQ(got_end, (ssize_t)sizeof t_end);
    ASSERT_LT(t_end - t_cont, 0.5); /* at once */
    return 0;
}

/* Rank 0 short of file descriptors (RLIMIT_NOFILE leaves room for 4
 * connections) while 12 silent connections queue before the real rank 1:
 * each failed accept gives up the oldest silent connection, and rank 1 joins
 * at once rather than after their 5 s hello bound. */
static int fd_starved_rank0(void *p)
{
    struct stall_arg *a = p;
    set_env(0, 2, a->port, "0x5e");
    setenv("SFB_RENDEZVOUS_HELLO_TIMEOUT", "5", 1);
    for (int fd = 3; fd < 1024; fd++) close(fd); /* nothing inherited is needed */
    struct rlimit rl = {3 + 5, 3 + 5};            /* stdio, listener and 4 more */
    if (setrlimit(RLIMIT_NOFILE, &rl)) return 2;
    struct sfb__bootstrap_settings s = quick(10);
    struct sfb__bootstrap *bs = NULL;
    if (sfb__bootstrap_open(&bs, &s)) return 3;
    sfb__bootstrap_close(&bs);
    return 0;
}

static int try_rlimit(void *p)
{
    struct rlimit rl = {3 + 5, 3 + 5};
    return setrlimit(RLIMIT_NOFILE, &rl) ? 1 : 0;
}

static int test_rank0_out_of_fds(void)
{
    /* valgrind refuses to change RLIMIT_NOFILE: nothing to test there. */
    double t_probe;
    int pst = reap_by(spawn(try_rlimit, NULL, 10), sfb__now() + 10, NULL, NULL, &t_probe);
    if (pst == -1 || !WIFEXITED(pst) || WEXITSTATUS(pst) != 0) {
        fprintf(stderr, "  setrlimit(RLIMIT_NOFILE) refused (valgrind?): not run\n");
        return 0;
    }
    struct stall_arg a = {reserved_port(), -1, {-1, -1}, 10, 10, ""};
    ASSERT_GT(a.port, 0);
    pid_t pid = spawn(fd_starved_rank0, &a, 20);
    ASSERT_GT(pid, 0);
    int silent[12];
    for (int i = 0; i < 12; i++) silent[i] = raw_connect(a.port);
    struct sfb__boot_hdr h = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, SFB__BOOT_HELLO, 0x5e, 1, 2, 0, 0};
    double t0 = sfb__now();
    int fd = raw_send(a.port, &h, SFB__BOOT_HDR_SIZE);
    uint8_t w[SFB__BOOT_HDR_SIZE];
    struct sfb__boot_hdr wh = {0};
    struct pollfd pw = {fd, POLLIN, 0};
    if (fd >= 0 && poll(&pw, 1, 4000) == 1 && recv(fd, w, sizeof w, MSG_WAITALL) == (ssize_t)sizeof w)
        sfb__boot_hdr_decode(w, &wh);
    double dt = sfb__now() - t0;
    if (fd >= 0) close(fd);
    double t_exit;
    int st = reap_by(pid, sfb__now() + 10, NULL, NULL, &t_exit);
    int all_ok = 1;
    for (int i = 0; i < 12; i++) {
        all_ok &= silent[i] >= 0;
        if (silent[i] >= 0) close(silent[i]);
    }
    ASSERT(all_ok);
    ASSERT_EQ(wh.type, SFB__BOOT_WELCOME);
    ASSERT_LT(dt, 2.0); /* not the silent connections' 5 s hello bound */
    ASSERT(st != -1 && WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
    return 0;
}

/* Rank 0 of a world of 40 whose soft limit on open files (16: stdio, the
 * listener and 12 more) cannot hold a connection per rank: the bootstrap
 * raises it towards 4 * 40 + 256 before the rendezvous (src/base/fdlimit.c),
 * and every rank is welcomed. */
#define LOW_SOFT_WORLD 40
static int low_soft_rank0(void *p)
{
    struct stall_arg *a = p;
    set_env(0, LOW_SOFT_WORLD, a->port, "0x50f7");
    for (int fd = 3; fd < 1024; fd++) close(fd); /* nothing inherited is needed */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return 2;
    rl.rlim_cur = 16;
    if (setrlimit(RLIMIT_NOFILE, &rl)) return 2;
    struct sfb__bootstrap_settings s = quick(10);
    struct sfb__bootstrap *bs = NULL;
    if (sfb__bootstrap_open(&bs, &s)) return 3;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur < 4 * LOW_SOFT_WORLD + 256) return 4;
    sfb__bootstrap_close(&bs);
    return 0;
}

static int test_rank0_low_soft_fd_limit(void)
{
    struct rlimit was;
    ASSERT_OK(getrlimit(RLIMIT_NOFILE, &was));
    double t_probe;
    int pst = reap_by(spawn(try_rlimit, NULL, 10), sfb__now() + 10, NULL, NULL, &t_probe);
    if ((was.rlim_max != RLIM_INFINITY && was.rlim_max < 4 * LOW_SOFT_WORLD + 256) || pst == -1 ||
        !WIFEXITED(pst) || WEXITSTATUS(pst) != 0) {
        fprintf(stderr, "  hard limit on open files too low, or setrlimit refused (valgrind?): not run\n");
        return 0;
    }
    struct stall_arg a = {reserved_port(), -1, {-1, -1}, 10, 10, ""};
    ASSERT_GT(a.port, 0);
    pid_t pid = spawn(low_soft_rank0, &a, 20);
    ASSERT_GT(pid, 0);
    int fd[LOW_SOFT_WORLD], welcomed = 0;
    for (int r = 1; r < LOW_SOFT_WORLD; r++) {
        struct sfb__boot_hdr h = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, SFB__BOOT_HELLO, 0x50f7,
                                  (uint32_t)r, LOW_SOFT_WORLD, 0, 0};
        fd[r] = raw_send(a.port, &h, SFB__BOOT_HDR_SIZE);
    }
    for (int r = 1; r < LOW_SOFT_WORLD; r++) {
        uint8_t w[SFB__BOOT_HDR_SIZE];
        struct sfb__boot_hdr wh = {0};
        struct pollfd pw = {fd[r], POLLIN, 0};
        if (fd[r] >= 0 && poll(&pw, 1, 8000) == 1 &&
            recv(fd[r], w, sizeof w, MSG_WAITALL) == (ssize_t)sizeof w)
            sfb__boot_hdr_decode(w, &wh);
        welcomed += wh.type == SFB__BOOT_WELCOME;
    }
    for (int r = 1; r < LOW_SOFT_WORLD; r++)
        if (fd[r] >= 0) close(fd[r]);
    double t_exit;
    int st = reap_by(pid, sfb__now() + 10, NULL, NULL, &t_exit);
    ASSERT_EQ(welcomed, LOW_SOFT_WORLD - 1);
    ASSERT(st != -1 && WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
    return 0;
}

/* ---- a flood of idle and junk connections ----------------------------------- */

#define FLOOD_HOLD 400 /* connections the flooder keeps open at once */

struct flood_arg {
    int port;
    int go[2];    /* flooder -> joiners: one byte each when the flood is on */
    int times[2]; /* joiners -> test: rank, start and end of their join */
};

struct join_time {
    int rank;
    double start, end;
};

/* Opens connection number i of the flood, of one of four kinds: idle; HTTP
 * junk; the first 20 bytes of a hello, then silence; a whole hello with the
 * wrong key. -1 once rank 0 no longer listens. */
static int flood_open(int port, unsigned long i)
{
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    struct sfb__boot_hdr h = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, SFB__BOOT_HELLO, 0xbad, 1, 4, 0, 0};
    uint8_t b[SFB__BOOT_HDR_SIZE];
    sfb__boot_hdr_encode(&h, b);
    static const char http[] = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: scan\r\n\r\n";
    if (i % 4 == 1) (void)!send(fd, http, sizeof http - 1, MSG_NOSIGNAL);
    if (i % 4 == 2) (void)!send(fd, b, 20, MSG_NOSIGNAL);
    if (i % 4 == 3) (void)!send(fd, b, sizeof b, MSG_NOSIGNAL);
    return fd;
}

/* The flooder: holds FLOOD_HOLD connections, replacing each one rank 0
 * closes, until rank 0 stops listening. Returns 0 if it made hundreds. */
static int flooder(struct flood_arg *f)
{
    static struct pollfd p[FLOOD_HOLD];
    unsigned long made = 0;
    int first = raw_connect(f->port); /* waits for rank 0 to listen */
    if (first < 0) return 2;
    close(first);
    for (int i = 0; i < FLOOD_HOLD; i++) {
        p[i] = (struct pollfd){flood_open(f->port, made++), POLLIN, 0};
        if (p[i].fd < 0) return 3;
    }
    if (write(f->go[1], "ggg", 3) != 3) return 4;
    int listening = 1;
    double end = sfb__now() + 20;
    while (listening && sfb__now() < end) {
        if (poll(p, FLOOD_HOLD, 100) < 0 && errno != EINTR) return 5;
        for (int i = 0; i < FLOOD_HOLD && listening; i++) {
            if (!p[i].revents) continue;
            char junk[256];
            if (recv(p[i].fd, junk, sizeof junk, MSG_DONTWAIT) > 0) continue;
            close(p[i].fd);
            p[i].fd = flood_open(f->port, made++);
            listening = p[i].fd >= 0;
        }
    }
    for (int i = 0; i < FLOOD_HOLD; i++)
        if (p[i].fd >= 0) close(p[i].fd);
    fprintf(stderr, "  flooder: %lu connections\n", made);
    return listening ? 6 : made >= FLOOD_HOLD + 100 ? 0 : 7;
}

/* Role 0 is rank 0, role 1 the flooder, roles 2..4 ranks 1..3 (started
 * once the flood is on). */
static int flood_role(int role, void *p)
{
    struct flood_arg *f = p;
    if (role == 1) return flooder(f);
    int rank = role == 0 ? 0 : role - 1;
    if (rank > 0) {
        char g;
        CHILD_CHECK(read(f->go[0], &g, 1) == 1);
    }
    struct join_time t;
    memset(&t, 0, sizeof t); /* written whole, padding too */
    t.rank = rank;
    t.start = sfb__now();
    set_env(rank, 4, f->port, "0xf100d");
    struct sfb__bootstrap_settings s = quick(20);
    struct sfb__bootstrap *bs = NULL;
    CHILD_CHECK(sfb__bootstrap_open(&bs, &s) == 0);
    int mine = 100 + rank, all[4];
    CHILD_CHECK(sfb__bootstrap_allgather(bs, &mine, sizeof mine, all) == 0);
    for (int r = 0; r < 4; r++) CHILD_CHECK(all[r] == 100 + r);
    t.end = sfb__now();
    CHILD_CHECK(sfb__bootstrap_barrier(bs) == 0);
    sfb__bootstrap_close(&bs);
    CHILD_CHECK(write(f->times[1], &t, sizeof t) == (ssize_t)sizeof t);
    return 0;
}

/* Hundreds of idle and junk connections to rank 0 before and while the real
 * ranks join: the 4 ranks form the job (open + an allgather) within 5 s of
 * the last one starting. (Before: 64 idle connections held rank 0's table
 * for 10 s each while it stopped accepting, so the real ranks, queued
 * behind the rest, waited for minutes.) */
static int test_flood(void)
{
    struct flood_arg f = {reserved_port(), {-1, -1}, {-1, -1}};
    ASSERT_GT(f.port, 0);
    ASSERT_EQ(pipe(f.go), 0);
    ASSERT_EQ(pipe(f.times), 0);
    int failed = run_ranks(5, flood_role, &f, 30);
    close(f.go[0]);
    close(f.go[1]);
    close(f.times[1]);
    struct join_time t[4];
    ssize_t got = read(f.times[0], t, sizeof t);
    close(f.times[0]);
    ASSERT_EQ(failed, 0);
    ASSERT_EQ(got, (ssize_t)sizeof t);
    double last_start = 0, last_end = 0;
    for (int i = 0; i < 4; i++) {
        last_start = SFB_MAX(last_start, t[i].start);
        last_end = SFB_MAX(last_end, t[i].end);
    }
    fprintf(stderr, "  job formed %.2f s after the last rank started\n", last_end - last_start);
    ASSERT_LT(last_end - last_start, 5.0);
    return 0;
}

static const struct test_case tests[] = {
    {"header_roundtrip", test_header_roundtrip},
    {"check_hello", test_check_hello},
    {"parse_key", test_parse_key},
    {"single", test_single},
    {"env_errors", test_env_errors},
    {"rank0_rejects_bad_hellos", test_rank0_rejects_bad_hellos},
    {"rank0_hello_bound_and_table", test_rank0_hello_bound_and_table},
    {"joiner_rejects_bad_table", test_joiner_rejects_bad_table},
    {"four_processes", test_four_processes},
    {"late_rank0", test_late_rank0},
    {"torchrun_env", test_torchrun_env},
    {"wrong_key_processes", test_wrong_key_processes},
    {"dead_peer", test_dead_peer},
    {"rank0_stalled_by_log", test_rank0_stalled_by_log},
    {"rank0_stopped_past_deadline", test_rank0_stopped_past_deadline},
    {"stopped_in_allgather", test_stopped_in_allgather},
    {"rank0_out_of_fds", test_rank0_out_of_fds},
    {"rank0_low_soft_fd_limit", test_rank0_low_soft_fd_limit},
    {"flood", test_flood},
};

int main(int argc, char **argv)
{
    alarm(100); /* children die with us (PDEATHSIG) */
    return test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
}
