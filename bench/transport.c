/* Transport benchmark between two processes, like libfabric's fi_pingpong:
 * the parent is rank 0 (client), a forked child is rank 1 (server); they
 * swap endpoint names over a socketpair. Each process runs the real stack:
 * a loop thread (src/loop/loop.h) and the main thread as the compute thread
 * calling sfb__transport_send / sfb__transport_recv.
 *
 *   bench_transport [--smoke] [--sizes a,b,...] [--iters n] [--mode pingpong|stream|both|duplex]
 *                   [--netns NS0,NS1] [--bind CPU0,CPU1] [provider ...]   (default: shm tcp)
 *
 * One line per result (warm-up excluded):  name  size  iters  us/op  GB/s
 *   transport/pingpong/<prov>: rank 0 sends a frame of `size` bytes, rank 1
 *     echoes it; us/op is half a round trip (the latency), GB/s is
 *     size / half round trip (the convention of fi_pingpong's MB/sec).
 *   transport/stream/<prov>: rank 0 sends `iters` frames back-to-back, rank 1
 *     acks the last one; us/op per frame, GB/s = size * iters / time.
 *   transport/duplex/<prov> (only with --mode duplex): both ranks send
 *     `iters` frames to each other at once; us/op and GB/s per direction
 *     (full duplex: as stream's).
 * GB are 1e9 bytes. --smoke runs a few iterations of small sizes (a test).
 * --netns NS0,NS1 puts rank 0 into network namespace NS0 and rank 1 into NS1
 * (names as `ip netns` knows them; needs root) before either opens its
 * transport: a ping-pong across the links of scripts/netns-cluster, whose
 * --calibrate option runs this with FI_TCP_IFACE=eth0. --bind CPU0,CPU1 pins
 * rank 0 (all its threads) to CPU0 and rank 1 to CPU1, as latency
 * benchmarks are run (bench/transport_vs_fi.sh pins fi_pingpong alike):
 * left to the scheduler, a forked rank can share its parent's CPU for tens
 * of milliseconds, and a 2000-round-trip run measures that placement.
 * Environment: SFB_BENCH_CHUNK=n / SFB_BENCH_RXDEPTH=n override the
 * transport's chunk_size / rx_depth;
 * SFB_BENCH_STATS=1 prints the transport counters after each size. */
#include "src/base/util.h"
#include "src/loop/loop.h"
#include "src/transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SIZES 32
#define TIMEOUT_S 20.0

struct opts {
    int smoke, iters, modes; /* modes: bit 0 ping-pong, bit 1 stream */
    size_t sizes[MAX_SIZES];
    int nsizes;
    const char *netns[2]; /* per rank, or NULL */
    int cpu[2];           /* per rank, or -1 */
};

/* Moves the calling process into the named network namespace. */
static int enter_netns(const char *name)
{
    char path[256];
    if (snprintf(path, sizeof path, "/var/run/netns/%s", name) >= (int)sizeof path)
        return sfb__error(-ENAMETOOLONG, "bench: netns name too long");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sfb__error(-errno, "bench: cannot open %s: %s", path, strerror(errno));
    int rc = setns(fd, CLONE_NEWNET) ? -errno : 0;
    close(fd);
    if (rc) return sfb__error(rc, "bench: setns(%s): %s", name, strerror(-rc));
    return 0;
}

static int iters_for(const struct opts *o, size_t size)
{
    if (o->iters > 0) return o->iters;
    if (o->smoke) return 5;
    /* ~256 MiB each way per measurement, 200..2000 round trips: long
     * enough that one-time costs (first touch of pooled buffers, rxm's
     * connection setup in fi_pingpong) and scheduler placement are noise. */
    return (int)SFB_MAX(200, SFB_MIN(2000, ((size_t)256 << 20) / size));
}

/* A tenth of the run, and at least 64 MiB or 5000 frames (whichever is
 * fewer): a rank's first ~10 ms run up to twice as slow a hop (its loop
 * thread settles from its set-up spin into its naps, the scheduler places
 * the threads), longer than 200 round trips of a small frame take; the
 * run measures the steady state after it. */
static int warm_for(const struct opts *o, size_t size, int iters)
{
    if (o->smoke) return 1;
    int floor = (int)SFB_MIN((size_t)5000, ((size_t)64 << 20) / SFB_MAX(size, (size_t)1));
    return SFB_MAX(SFB_MAX(5, iters / 10), floor);
}

/* Blocking exact read/write on the name socket. */
static int xfer(int fd, void *p, size_t n, int wr)
{
    uint8_t *b = p;
    while (n) {
        ssize_t k = wr ? write(fd, b, n) : read(fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -EIO;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int recv_frame(struct sfb__transport *t, struct sfb__frame *f, size_t want)
{
    int rc = sfb__transport_recv(t, f, TIMEOUT_S);
    if (rc) return sfb__error(rc, "bench: no frame within %.0f s", TIMEOUT_S);
    if (want && f->len != want) {
        sfb__buf_put(f->buf);
        return sfb__error(-EPROTO, "bench: frame of %zu bytes, expected %zu", f->len, want);
    }
    return 0;
}

/* Rank 0 sends from `buf`; rank 1 echoes the received buffer itself (a
 * zero-copy relay, as the broadcast layer forwards frames). */
static int pingpong(struct sfb__transport *t, int rank, struct sfb__buf *buf, size_t size, int warm,
                    int iters, double *secs)
{
    struct sfb__frame f;
    double t0 = 0;
    int rc;
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm) t0 = sfb__now();
        if (rank == 0) {
            if ((rc = sfb__transport_send(t, 1, NULL, 0, buf, 0, size, TIMEOUT_S)) ||
                (rc = recv_frame(t, &f, size)))
                return rc;
            sfb__buf_put(f.buf);
        } else {
            if ((rc = recv_frame(t, &f, size))) return rc;
            rc = sfb__transport_send(t, 0, NULL, 0, f.buf, (size_t)(f.data - f.buf->data), f.len,
                                     TIMEOUT_S);
            sfb__buf_put(f.buf);
            if (rc) return rc;
        }
    }
    *secs = sfb__now() - t0;
    return 0;
}

static int stream(struct sfb__transport *t, int rank, struct sfb__buf *buf, size_t size, int warm,
                  int iters, double *secs)
{
    struct sfb__frame f;
    double t0 = 0;
    int rc;
    for (int round = 0; round < 2; round++) { /* round 0: warm-up */
        int n = round ? iters : warm;
        if (round) t0 = sfb__now();
        if (rank == 0) {
            for (int i = 0; i < n; i++)
                if ((rc = sfb__transport_send(t, 1, NULL, 0, buf, 0, size, TIMEOUT_S))) return rc;
            if ((rc = recv_frame(t, &f, 1))) return rc;
            sfb__buf_put(f.buf);
        } else {
            for (int i = 0; i < n; i++) {
                if ((rc = recv_frame(t, &f, size))) return rc;
                sfb__buf_put(f.buf);
            }
            if ((rc = sfb__transport_send(t, 0, NULL, 0, buf, 0, 1, TIMEOUT_S))) return rc;
        }
    }
    *secs = sfb__now() - t0;
    return 0;
}

#define DUPLEX_AHEAD 64

/* One frame of a duplex round: a data frame (`size` bytes) counts in *got,
 * the peer's end-of-round mark (`mark` bytes) in *marked. -EAGAIN: none
 * waiting (timeout 0). */
static int duplex_take(struct sfb__transport *t, size_t size, size_t mark, double timeout_s,
                       int *got, int *marked)
{
    struct sfb__frame f;
    int rc = sfb__transport_recv(t, &f, timeout_s);
    if (rc == -EAGAIN && timeout_s <= 0) return rc;
    if (rc) return sfb__error(rc, "bench: no frame within %.0f s", timeout_s);
    size_t len = f.len;
    sfb__buf_put(f.buf);
    if (len == mark) ++*marked;
    else if (len == size) ++*got;
    else return sfb__error(-EPROTO, "bench: frame of %zu bytes, expected %zu or %zu", len, size, mark);
    return 0;
}

/* Both ranks send `iters` frames to each other at once, taking what
 * arrives between sends: one connection carrying both directions, as
 * overlays whose links pair with their reverses (halton-classic) use it.
 * A round ends when this rank has all the peer's frames and the peer's
 * mark saying it has all of this rank's (frames may overtake each other,
 * so the mark has its own length). */
static int duplex(struct sfb__transport *t, int rank, struct sfb__buf *buf, size_t size, int warm,
                  int iters, double *secs)
{
    const size_t mark = size == 1 ? 2 : 1;
    double t0 = 0;
    int rc;
    for (int round = 0; round < 2; round++) { /* round 0: warm-up */
        int n = round ? iters : warm, got = 0, marked = 0;
        if (round) t0 = sfb__now();
        for (int i = 0; i < n; i++) {
            /* at most DUPLEX_AHEAD frames sent beyond those taken: both
             * ranks blocked in a send with the other's inbox full would
             * otherwise be possible */
            while (got < i - DUPLEX_AHEAD)
                if ((rc = duplex_take(t, size, mark, TIMEOUT_S, &got, &marked))) return rc;
            if ((rc = sfb__transport_send(t, 1 - rank, NULL, 0, buf, 0, size, TIMEOUT_S))) return rc;
            while ((rc = duplex_take(t, size, mark, 0, &got, &marked)) == 0) {}
            if (rc != -EAGAIN) return rc;
        }
        while (got < n)
            if ((rc = duplex_take(t, size, mark, TIMEOUT_S, &got, &marked))) return rc;
        if ((rc = sfb__transport_send(t, 1 - rank, NULL, 0, buf, 0, mark, TIMEOUT_S))) return rc;
        while (!marked)
            if ((rc = duplex_take(t, size, mark, TIMEOUT_S, &got, &marked))) return rc;
    }
    *secs = sfb__now() - t0;
    return 0;
}

/* One rank's whole run: open, swap names over `sock`, measure, close. */
static int run_rank(const char *prov, int rank, int sock, const struct opts *o)
{
    struct sfb__loop *loop = NULL;
    struct sfb__transport *t = NULL;
    struct sfb__buf *buf = NULL;
    struct sfb__transport_settings s;
    sfb__transport_default_settings(&s);
    s.provider = prov;
    s.all_local = 1;
    s.rank = (uint32_t)rank;
    if (getenv("SFB_BENCH_CHUNK")) s.chunk_size = strtoull(getenv("SFB_BENCH_CHUNK"), NULL, 0);
    if (getenv("SFB_BENCH_RXDEPTH")) s.rx_depth = (unsigned)atoi(getenv("SFB_BENCH_RXDEPTH"));
    int rc = 0;
    if (o->netns[rank] && (rc = enter_netns(o->netns[rank]))) goto out;
    if (o->cpu[rank] >= 0) { /* before the loop thread starts: it inherits this */
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(o->cpu[rank], &set);
        if (sched_setaffinity(0, sizeof set, &set)) {
            rc = sfb__error(-errno, "bench: rank %d cannot run on CPU %d: %s", rank, o->cpu[rank],
                            strerror(errno));
            goto out;
        }
    }
    if ((rc = sfb__loop_open(&loop)) || (rc = sfb__loop_start(loop)) ||
        (rc = sfb__transport_open(&t, &s, loop)))
        goto out;
    const void *names[2];
    size_t lens[2];
    uint8_t peer[1024];
    uint64_t mylen, peerlen = 0;
    const void *me;
    size_t melen;
    sfb__transport_name(t, &me, &melen);
    mylen = melen;
    if ((rc = xfer(sock, &mylen, sizeof mylen, 1)) || (rc = xfer(sock, (void *)me, melen, 1)) ||
        (rc = xfer(sock, &peerlen, sizeof peerlen, 0)) || peerlen > sizeof peer ||
        (rc = xfer(sock, peer, (size_t)peerlen, 0))) {
        rc = sfb__error(rc ? rc : -EPROTO, "bench: name exchange failed");
        goto out;
    }
    names[rank] = me;
    lens[rank] = melen;
    names[1 - rank] = peer;
    lens[1 - rank] = (size_t)peerlen;
    if ((rc = sfb__transport_set_peers(t, names, lens, 2))) goto out;
    static const char *const mode_name[3] = {"pingpong", "stream", "duplex"};
    for (int mode = 0; mode < 3; mode++) {
        if (!(o->modes & (1 << mode))) continue;
        for (int k = 0; k < o->nsizes; k++) {
            size_t size = o->sizes[k];
            int iters = iters_for(o, size), warm = warm_for(o, size, iters);
            double secs = 0;
            /* A frame lives in a pooled buffer of its size, as in sfb. */
            if (buf) sfb__buf_put(buf);
            buf = NULL;
            if ((rc = sfb__transport_buf_get(t, SFB_MAX(size, 1), &buf))) goto out;
            memset(buf->data, 0x5a, size);
            rc = mode == 0   ? pingpong(t, rank, buf, size, warm, iters, &secs)
                 : mode == 1 ? stream(t, rank, buf, size, warm, iters, &secs)
                             : duplex(t, rank, buf, size, warm, iters, &secs);
            if (rc) goto out;
            if (getenv("SFB_BENCH_STATS")) {
                const struct sfb__transport_stats *st = sfb__transport_stats(t);
                fprintf(stderr, "rank %d: eagain %llu dropped %llu errors %llu\n", rank,
                        (unsigned long long)atomic_load(&st->eagain),
                        (unsigned long long)atomic_load(&st->dropped),
                        (unsigned long long)atomic_load(&st->errors));
            }
            if (rank != 0) continue;
            double us = 1e6 * secs / iters / (mode == 0 ? 2 : 1);
            printf("transport/%s/%s  %zu  %d  %.2f  %.3f\n", mode_name[mode],
                   prov, size, iters, us, (double)size / us / 1e3);
            fflush(stdout);
        }
    }
out:
    if (rc) fprintf(stderr, "bench_transport rank %d (%s): %s: %s\n", rank, prov, sfb_strerror(rc),
                    sfb_last_error());
    if (t) sfb__transport_flush(t, 5);
    if (buf) sfb__buf_put(buf);
    sfb__transport_close(&t);
    sfb__loop_close(&loop);
    return rc;
}

static int bench_provider(const char *prov, const struct opts *o)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        perror("socketpair");
        return 1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        /* The child never outlives the parent. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(sv[0]);
        _exit(run_rank(prov, 1, sv[1], o) ? 1 : 0);
    }
    close(sv[1]);
    int rc = run_rank(prov, 0, sv[0], o);
    close(sv[0]);
    if (rc) kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(st) || WEXITSTATUS(st)) rc = rc ? rc : 1;
    return rc;
}

static int parse_sizes(struct opts *o, const char *arg)
{
    o->nsizes = 0;
    char *end;
    while (*arg) {
        unsigned long long v = strtoull(arg, &end, 10);
        if (end == arg || v == 0 || v > ((size_t)1 << 30) || o->nsizes == MAX_SIZES) return -1;
        if (*end == 'k' || *end == 'K') v <<= 10, end++;
        else if (*end == 'm' || *end == 'M') v <<= 20, end++;
        o->sizes[o->nsizes++] = (size_t)v;
        if (*end == ',') end++;
        else if (*end) return -1;
        arg = end;
    }
    return o->nsizes ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct opts o = {.modes = 3, .cpu = {-1, -1}};
    int nprov = 0, rc = 0, have_sizes = 0;
    const char *provs[16];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--smoke")) {
            o.smoke = 1;
        } else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            if (parse_sizes(&o, argv[++i])) {
                fprintf(stderr, "bad --sizes %s (e.g. 4k,64k,1m)\n", argv[i]);
                return 2;
            }
            have_sizes = 1;
        } else if (!strcmp(argv[i], "--netns") && i + 1 < argc) {
            static char ns[512];
            snprintf(ns, sizeof ns, "%s", argv[++i]);
            char *comma = strchr(ns, ',');
            if (!comma || comma == ns || !comma[1] || strchr(comma + 1, ',')) {
                fprintf(stderr, "bad --netns %s (want NS0,NS1)\n", argv[i]);
                return 2;
            }
            *comma = 0;
            o.netns[0] = ns;
            o.netns[1] = comma + 1;
        } else if (!strcmp(argv[i], "--bind") && i + 1 < argc) {
            char *end;
            long c0 = strtol(argv[++i], &end, 10), c1 = -1;
            if (*end == ',') c1 = strtol(end + 1, &end, 10);
            if (*end || c0 < 0 || c1 < 0 || c0 >= CPU_SETSIZE || c1 >= CPU_SETSIZE) {
                fprintf(stderr, "bad --bind %s (want CPU0,CPU1)\n", argv[i]);
                return 2;
            }
            o.cpu[0] = (int)c0;
            o.cpu[1] = (int)c1;
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            o.iters = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            i++;
            o.modes = !strcmp(argv[i], "pingpong") ? 1
                      : !strcmp(argv[i], "stream") ? 2
                      : !strcmp(argv[i], "duplex") ? 4
                                                   : 3;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--smoke] [--sizes a,b] [--iters n] "
                            "[--mode pingpong|stream|both|duplex] [--netns NS0,NS1] [--bind CPU0,CPU1] "
                            "[provider ...]\n", argv[0]);
            return 2;
        } else if (nprov < 16) {
            provs[nprov++] = argv[i];
        }
    }
    if (!have_sizes) {
        if (o.smoke) parse_sizes(&o, "4k,64k,256k");
        else parse_sizes(&o, "4k,16k,64k,256k,1m,4m,16m");
    }
    if (!nprov) {
        provs[nprov++] = "shm";
        provs[nprov++] = "tcp";
    }
    /* A wedged run must end: the whole benchmark is bounded. */
    alarm(o.smoke ? 60 : 590);
    printf("# name  size  iters  us/op  GB/s\n");
    for (int i = 0; i < nprov; i++)
        if (bench_provider(provs[i], &o)) rc = 1;
    return rc;
}
