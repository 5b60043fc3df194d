/* Multi-process transport test. Every rank sends every other rank DATA
 * frames of sizes 0 B … 16 MiB with pseudo-random content (a function of
 * sender, receiver and index); receivers verify content and count: nothing
 * lost, nothing duplicated. With --bad, rank 1 first sends rank 0 corrupted
 * frames (flipped payload byte, wrong job key, wrong version, lying length),
 * which must be rejected, counted, and never delivered. With --linger, rank
 * 0 waits past the silence timeout before its finish while the others wait
 * in theirs, having said BYE: they must go on hearing it (heartbeats) until
 * its own BYE, and none may call it silent.
 *
 *   exchange [--provider shm|tcp] [--bad] [--linger] [--launch P]
 *
 * --launch P starts P copies of itself through the local launcher (the env
 * rendezvous path); without it the process joins whatever job started it
 * (mpirun → PMIx). Prints "N passed, N failed" per rank; exit 0 on success. */
#include "src/transport/transport.h"
#include "src/boot/bootstrap.h"
#include "src/comm/comm.h"
#include "src/base/util.h"
#include "src/launch/launch_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const size_t sizes[] = {0, 1, 7, 4096, 65536, 65537, 1 << 20, (1 << 20) + 3, 16 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static uint8_t byte_at(uint32_t src, uint32_t dst, uint32_t idx, size_t i)
{
    uint64_t x = ((uint64_t)src << 40) ^ ((uint64_t)dst << 20) ^ idx ^ (i * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (uint8_t)x;
}

static int send_data(struct sfb__comm *c, uint32_t dst, uint32_t idx, size_t n)
{
    struct sfb__buf *b = NULL;
    int ret = sfb__transport_buf_get(sfb__comm_transport(c), n ? n : 1, &b);
    if (ret) return ret;
    for (size_t i = 0; i < n; i++) b->data[i] = byte_at(sfb__comm_rank(c), dst, idx, i);
    struct sfb__wire_hdr h = {.type = SFB_WIRE_DATA, .origin = sfb__comm_rank(c), .sender = sfb__comm_rank(c),
                             .clock = idx, .payload_len = n};
    struct sfb__wire_piece p = {b->data, n};
    uint8_t hdr[SFB_WIRE_HDR_SIZE];
    ret = sfb__comm_header(c, &h, &p, 1, hdr);
    if (!ret) ret = sfb__transport_send(sfb__comm_transport(c), dst, hdr, sizeof hdr, b, 0, n, 30.0);
    sfb__buf_put(b);
    return ret;
}

/* Sends one raw (possibly corrupted) frame. */
static int send_raw(struct sfb__comm *c, uint32_t dst, const uint8_t *frame, size_t len)
{
    struct sfb__buf *b = NULL;
    int ret = sfb__transport_buf_get(sfb__comm_transport(c), len, &b);
    if (ret) return ret;
    memcpy(b->data, frame, len);
    ret = sfb__transport_send(sfb__comm_transport(c), dst, NULL, 0, b, 0, len, 30.0);
    sfb__buf_put(b);
    return ret;
}

static int send_bad(struct sfb__comm *c)
{
    uint8_t f[SFB_WIRE_HDR_SIZE + 32];
    uint8_t pl[32];
    for (int i = 0; i < 32; i++) pl[i] = (uint8_t)i;
    struct sfb__wire_piece p = {pl, 32};
    struct sfb__wire_hdr h = {.type = SFB_WIRE_DATA, .origin = sfb__comm_rank(c), .sender = sfb__comm_rank(c),
                             .clock = 999, .payload_len = 32};
    int ret = 0;
    /* flipped payload byte */
    ret |= sfb__comm_header(c, &h, &p, 1, f);
    memcpy(f + SFB_WIRE_HDR_SIZE, pl, 32);
    f[SFB_WIRE_HDR_SIZE + 5] ^= 0x40;
    ret |= send_raw(c, 0, f, sizeof f);
    /* wrong job key (a well-formed frame of another job) */
    struct sfb__wire_hdr o = h;
    o.job_key = sfb__comm_job_key(c) ^ 1;
    ret |= sfb__wire_encode(&o, &p, 1, f);
    ret |= send_raw(c, 0, f, sizeof f);
    /* wrong version: patch the version field (bytes 4..5) */
    ret |= sfb__comm_header(c, &h, &p, 1, f);
    f[4] = 99;
    ret |= send_raw(c, 0, f, sizeof f);
    /* lying length: header says 32 payload bytes, 20 arrive */
    ret |= sfb__comm_header(c, &h, &p, 1, f);
    ret |= send_raw(c, 0, f, SFB_WIRE_HDR_SIZE + 20);
    return ret;
}

/* Longer than the silence timeout of a watched peer (comm_live.c,
 * sfb__comm_silence_timeout: the peer timeout times the ranks per CPU when
 * above 1; every rank of a --launch or mpirun job is on this host). */
static double linger_s(const struct sfb__comm_settings *cs, uint32_t P)
{
    cpu_set_t allowed;
    int cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
    double per_cpu = (double)P / (cpus > 0 ? cpus : 1);
    return cs->peer_timeout_s * (per_cpu > 1 ? per_cpu : 1) + 3.0;
}

static int run(const char *provider, int bad, int linger)
{
    struct sfb__comm_settings cs;
    sfb__comm_default_settings(&cs);
    cs.provider = provider;
    struct sfb__comm *c;
    int ret = sfb__comm_open(&c, &cs);
    if (ret) {
        fprintf(stderr, "exchange: comm open: %s\n", sfb_last_error());
        return 1;
    }
    uint32_t me = sfb__comm_rank(c), P = sfb__comm_world(c);
    int fails = 0, checks = 0;
    if (P < 2) {
        fprintf(stderr, "exchange: needs at least 2 ranks\n");
        sfb__comm_close(&c);
        return 1;
    }
    if (bad && me == 1 && send_bad(c)) {
        fprintf(stderr, "exchange: rank 1 could not send the bad frames\n");
        fails++;
    }
    for (uint32_t i = 0; i < NSIZES; i++)
        for (uint32_t d = 0; d < P; d++)
            if (d != me && send_data(c, d, i, sizes[i])) {
                fprintf(stderr, "exchange: rank %u: send to %u failed: %s\n", me, d,
                            sfb_last_error());
                fails++;
            }
    uint8_t *seen = calloc((size_t)P * NSIZES, 1);
    size_t expect = (size_t)(P - 1) * NSIZES, got = 0;
    double deadline = sfb__now() + 60;
    while (got < expect && sfb__now() < deadline) {
        struct sfb__frame f;
        if (sfb__transport_recv(sfb__comm_transport(c), &f, 0.1) != 0) {
            if (sfb__comm_check(c)) break;
            continue;
        }
        struct sfb__wire_hdr h;
        const uint8_t *pl;
        checks++;
        if (sfb__wire_decode(sfb__comm_wire_job(c), f.data, f.len, (int)f.src, &h, &pl) != 0 ||
            h.type != SFB_WIRE_DATA) {
            fprintf(stderr, "FAIL rank %u: an invalid frame from %u was delivered\n", me, f.src);
            fails++;
        } else if (h.origin >= P || h.origin == me || h.clock < 0 || h.clock >= (int64_t)NSIZES) {
            fprintf(stderr, "FAIL rank %u: unexpected frame origin %u index %lld\n", me,
                    h.origin, (long long)h.clock);
            fails++;
        } else if (seen[h.origin * NSIZES + (size_t)h.clock]++) {
            fprintf(stderr, "FAIL rank %u: duplicate frame %u/%lld\n", me, h.origin,
                    (long long)h.clock);
            fails++;
        } else {
            size_t n = sizes[h.clock], bad_at = SIZE_MAX;
            if (h.payload_len != n) bad_at = 0;
            for (size_t i = 0; i < n && bad_at == SIZE_MAX; i++)
                if (pl[i] != byte_at(h.origin, me, (uint32_t)h.clock, i)) bad_at = i;
            if (bad_at != SIZE_MAX) {
                fprintf(stderr, "FAIL rank %u: frame %u/%lld (%zu B) wrong at byte %zu\n", me,
                        h.origin, (long long)h.clock, n, bad_at);
                fails++;
            }
            got++;
        }
        sfb__buf_put(f.buf);
    }
    if (got != expect) {
        fprintf(stderr, "FAIL rank %u: received %zu of %zu frames\n", me, got, expect);
        fails++;
    }
    checks++;
    if (bad && me == 0) {
        /* the four corrupted frames: each rejected for its own reason */
        const struct {
            enum sfb__wire_reason r;
            const char *what;
        } want[] = {{SFB_WIRE_R_CHECKSUM, "flipped payload byte"},
                    {SFB_WIRE_R_JOBKEY, "wrong job key"},
                    {SFB_WIRE_R_VERSION, "wrong version"},
                    {SFB_WIRE_R_TRUNC, "lying length"}};
        for (size_t i = 0; i < 4; i++) {
            checks++;
            uint64_t n = sfb__comm_rejected_for(c, want[i].r);
            if (n != 1) {
                fprintf(stderr, "FAIL rank 0: %s: rejected %llu times, want 1\n", want[i].what,
                        (unsigned long long)n);
                fails++;
            }
        }
    }
    free(seen);
    if (linger && me == 0) sfb__sleep(linger_s(&cs, P));
    if ((ret = sfb__comm_finish(c, -1))) {
        fprintf(stderr, "FAIL rank %u: finish: %s\n", me, sfb_last_error());
        fails++;
    }
    sfb__comm_close(&c);
    printf("rank %u of %u (%s): %d passed, %d failed\n", me, P, provider ? provider : "auto",
           checks - fails, fails);
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *provider = NULL;
    int bad = 0, linger = 0, launch = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--provider") && i + 1 < argc) provider = argv[++i];
        else if (!strcmp(argv[i], "--bad")) bad = 1;
        else if (!strcmp(argv[i], "--linger")) linger = 1;
        else if (!strcmp(argv[i], "--launch") && i + 1 < argc) launch = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: exchange [--provider NAME] [--bad] [--linger] [--launch P]\n");
            return 2;
        }
    }
    if (launch) {
        char self[4096];
        if (sfb__launch_self_path(self, sizeof self)) return 1;
        char *args[8];
        int n = 0;
        args[n++] = self;
        if (provider) {
            args[n++] = "--provider";
            args[n++] = (char *)provider;
        }
        if (bad) args[n++] = "--bad";
        if (linger) args[n++] = "--linger";
        args[n] = NULL;
        struct sfb__launch_settings ls;
        sfb__launch_default_settings(&ls);
        ls.timeout_s = 100;
        int r = sfb__launch_local(launch, args, &ls);
        if (r) fprintf(stderr, "exchange: %s\n", sfb_last_error());
        printf("%d passed, %d failed\n", r ? 0 : 1, r ? 1 : 0);
        return r ? 1 : 0;
    }
    return run(provider, bad, linger);
}
