/* Bootstrap back end: environment rendezvous over TCP. Rank 0 listens on
 * SFB_RENDEZVOUS, checks every joiner's HELLO (job key, world, rank) and
 * serves the collectives: each joiner sends its CONTRIB, rank 0 answers with
 * the TABLE of all. Wire format: src/bootstrap.h. */
#include "config.h"
#include "src/bootstrap_impl.h"
#include "src/bytes.h"
#include "src/common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_PENDING 64

static struct sfb__boot_hdr make_hdr(const struct sfb__bootstrap *bs, uint16_t type, uint32_t len)
{
    struct sfb__boot_hdr h = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, type, bs->key,
                              (uint32_t)bs->rank, (uint32_t)bs->size, bs->seq, len};
    return h;
}

/* ---- socket I/O with deadlines ------------------------------------------- */

static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - sfb__now();
        if (left <= 0) return -ETIMEDOUT;
        struct pollfd p = {fd, events, 0};
        int n = poll(&p, 1, (int)(left * 1000) + 1);
        if (n > 0) return 0;
        if (n < 0 && errno != EINTR) return -errno;
    }
}

/* Reads or writes exactly len bytes on a non-blocking socket before
 * `deadline`: partial transfers, EINTR and EAGAIN are retried. A peer that
 * closes gives -ECONNRESET. */
static int fd_io(int fd, void *buf, size_t len, double deadline, int writing)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) return -ECONNRESET;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
        int r = wait_fd(fd, writing ? POLLOUT : POLLIN, deadline);
        if (r) return r;
    }
    return 0;
}

static int send_msg(int fd, const struct sfb__boot_hdr *h, const void *payload, double deadline)
{
    uint8_t b[SFB__BOOT_HDR_SIZE];
    sfb__boot_hdr_encode(h, b);
    int r = fd_io(fd, b, sizeof b, deadline, 1);
    if (!r && h->len) r = fd_io(fd, (void *)payload, h->len, deadline, 1);
    return r;
}

static int recv_hdr(int fd, struct sfb__boot_hdr *h, double deadline)
{
    uint8_t b[SFB__BOOT_HDR_SIZE];
    int r = fd_io(fd, b, sizeof b, deadline, 0);
    if (!r) sfb__boot_hdr_decode(b, h);
    return r;
}

static int io_error(int r, const char *what, int peer)
{
    if (r == -ETIMEDOUT) return sfb__error(r, "bootstrap: timed out %s rank %d", what, peer);
    if (r == -ECONNRESET)
        return sfb__error(-SFB_EPEER, "bootstrap: rank %d closed the connection (%s it)", peer, what);
    return sfb__error(r, "bootstrap: %s rank %d: %s", what, peer, strerror(-r));
}


/* ---- environment ---------------------------------------------------------- */

static int parse_int_env(const char *name, const char *s, long lo, long hi, int *out)
{
    if (!s || !*s) return sfb__error(-SFB_EUSAGE, "%s is not set", name);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return sfb__error(-SFB_EUSAGE, "%s='%s': expected an integer in %ld..%ld", name, s, lo, hi);
    *out = (int)v;
    return 0;
}

/* Splits "host:port" / "[v6]:port" and resolves it. */
static int resolve(const char *spec, int passive, struct addrinfo **res)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec || !colon[1])
        return sfb__error(-SFB_EUSAGE, "SFB_RENDEZVOUS='%s': expected host:port", spec);
    const char *h = spec;
    size_t hl = (size_t)(colon - spec);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl >= sizeof host) return sfb__error(-SFB_EUSAGE, "SFB_RENDEZVOUS: host name too long");
    memcpy(host, h, hl);
    host[hl] = 0;
    int port;
    int r = parse_int_env("SFB_RENDEZVOUS port", colon + 1, 1, 65535, &port);
    if (r) return r;
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    int g = getaddrinfo(host, colon + 1, &hints, res);
    if (g)
        return sfb__error(-SFB_EUSAGE, "SFB_RENDEZVOUS='%s': cannot resolve '%s': %s", spec, host,
                          gai_strerror(g));
    return 0;
}

static void addr_name(const struct sockaddr_storage *ss, char *out, size_t n)
{
    char h[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)ss;
        inet_ntop(AF_INET, &a->sin_addr, h, sizeof h);
        port = ntohs(a->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof h);
        port = ntohs(a->sin6_port);
    }
    snprintf(out, n, "%s:%d", h, port);
}

/* ---- env rendezvous: rank 0 ---------------------------------------------- */

struct pending {
    int fd;
    size_t got;
    double deadline;
    uint8_t buf[SFB__BOOT_HDR_SIZE];
    char addr[64];
};

static void reject(struct pending *p, const char *why)
{
    SFB_LOG_W("bootstrap: rejected connection from %s: %s", p->addr, why);
    close(p->fd);
    p->fd = -1;
}

/* Accepts world-1 valid HELLOs; bad connections are logged, closed and not
 * counted. Stragglers that never finish a hello expire on their own. */
static int rank0_accept(struct sfb__bootstrap *bs, int lfd, int key_given, double deadline)
{
    struct pending pend[MAX_PENDING];
    struct pollfd pfd[MAX_PENDING + 1];
    size_t npend = 0;
    int joined = 0, r = 0;
    unsigned char *seen = calloc((size_t)bs->size, 1);
    if (!seen) return -ENOMEM;
    while (joined < bs->size - 1) {
        double now = sfb__now();
        if (now >= deadline) {
            char miss[256] = "";
            size_t o = 0;
            int nmiss = 0;
            for (int i = 1; i < bs->size && o + 16 < sizeof miss; i++)
                if (!seen[i]) o += (size_t)snprintf(miss + o, sizeof miss - o, "%s%d", nmiss++ ? ", " : "", i);
            r = sfb__error(-ETIMEDOUT, "bootstrap: rank 0 waited %.0f s: %d of %d ranks joined; missing %s",
                           bs->timeout_s, joined + 1, bs->size, miss);
            goto out;
        }
        nfds_t n = 0;
        int listening = npend < MAX_PENDING;
        if (listening) pfd[n++] = (struct pollfd){lfd, POLLIN, 0};
        for (size_t i = 0; i < npend; i++) pfd[n++] = (struct pollfd){pend[i].fd, POLLIN, 0};
        double next = deadline;
        for (size_t i = 0; i < npend; i++) next = SFB_MIN(next, pend[i].deadline);
        int pr = poll(pfd, n, (int)((next - now) * 1000) + 1);
        if (pr < 0 && errno != EINTR) {
            r = sfb__error(-errno, "bootstrap: poll: %s", strerror(errno));
            goto out;
        }
        now = sfb__now();
        /* Serve pending connections first (indexes shift as they leave). */
        for (size_t i = 0; i < npend; i++) {
            struct pending *p = &pend[i];
            ssize_t got = recv(p->fd, p->buf + p->got, sizeof p->buf - p->got, 0);
            if (got > 0) p->got += (size_t)got;
            if (got == 0) {
                reject(p, "closed before sending a whole hello");
            } else if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                reject(p, strerror(errno));
            } else if (p->got == sizeof p->buf) {
                struct sfb__boot_hdr h;
                char why[200];
                sfb__boot_hdr_decode(p->buf, &h);
                if (sfb__boot_check_hello(&h, bs->key, key_given, (uint32_t)bs->size, seen, why,
                                          sizeof why)) {
                    reject(p, why);
                } else {
                    SFB_LOG_D("bootstrap: rank %" PRIu32 " joined from %s", h.rank, p->addr);
                    seen[h.rank] = 1;
                    bs->fds[h.rank] = p->fd;
                    p->fd = -1;
                    joined++;
                }
            } else if (now >= p->deadline) {
                reject(p, "no complete hello in time");
            }
            if (p->fd < 0) {
                pend[i--] = pend[--npend];
            }
        }
        if (listening && npend < MAX_PENDING && pr > 0 && (pfd[0].revents & POLLIN)) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0) {
                struct pending *p = &pend[npend++];
                p->fd = fd;
                p->got = 0;
                p->deadline = now + SFB_MIN(bs->timeout_s, 10.0);
                addr_name(&ss, p->addr, sizeof p->addr);
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            }
        }
    }
out:
    for (size_t i = 0; i < npend; i++) close(pend[i].fd);
    free(seen);
    return r;
}

static int rank0_listen(const char *spec, int *lfd_out)
{
    struct addrinfo *ai;
    int r = resolve(spec, 1, &ai);
    if (r) return r;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        r = sfb__error(-errno, "bootstrap: socket: %s", strerror(errno));
        goto out;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* Joiners connect to the name in SFB_RENDEZVOUS, but rank 0's own view
     * of that name can differ (Debian maps the host name to 127.0.1.1), so
     * rank 0 listens on every interface unless the name is loopback. */
    struct sockaddr_storage ss;
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (void *)&ss;
        if ((ntohl(a->sin_addr.s_addr) >> 24) != 127) a->sin_addr.s_addr = htonl(INADDR_ANY);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (void *)&ss;
        if (!IN6_IS_ADDR_LOOPBACK(&a->sin6_addr)) a->sin6_addr = in6addr_any;
    }
    if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) < 0) {
        r = sfb__error(-errno, "bootstrap: rank 0 cannot listen on SFB_RENDEZVOUS=%s: %s", spec,
                       strerror(errno));
        goto out;
    }
    if (listen(fd, 1024) < 0) {
        r = sfb__error(-errno, "bootstrap: listen on %s: %s", spec, strerror(errno));
        goto out;
    }
    *lfd_out = fd;
    fd = -1;
out:
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return r;
}

/* ---- env rendezvous: joiner ---------------------------------------------- */

static int try_connect(const struct addrinfo *ai, double deadline)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        int r = -errno;
        if (r == -EINPROGRESS) r = wait_fd(fd, POLLOUT, deadline);
        if (r == 0) {
            int err = 0;
            socklen_t l = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
            r = -err;
        }
        if (r) {
            close(fd);
            return r;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int joiner_connect(struct sfb__bootstrap *bs, const char *spec, double connect_timeout)
{
    struct addrinfo *ai;
    int r = resolve(spec, 0, &ai);
    if (r) return r;
    double deadline = sfb__now() + connect_timeout, backoff = 0.01;
    int fd = -1;
    for (;;) {
        for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) fd = try_connect(a, deadline);
        if (fd >= 0) break;
        double now = sfb__now();
        if (now + backoff >= deadline) {
            freeaddrinfo(ai);
            return sfb__error(-ETIMEDOUT, "bootstrap: rank %d could not reach rank 0 at %s within %.0f s: %s",
                              bs->rank, spec, connect_timeout, strerror(-fd));
        }
        struct timespec ts = {(time_t)backoff, (long)((backoff - (long)backoff) * 1e9)};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
        backoff = SFB_MIN(backoff * 2, 0.5);
    }
    freeaddrinfo(ai);
    bs->fds[0] = fd;
    return 0;
}

/* ---- open ------------------------------------------------------------------ */

int sfb__boot_env_open(struct sfb__bootstrap *bs, const struct sfb__bootstrap_settings *s)
{
    int r = parse_int_env("SFB_WORLD_SIZE", getenv("SFB_WORLD_SIZE"), 1, SFB__BOOTSTRAP_MAX_WORLD, &bs->size);
    if (!r) r = parse_int_env("SFB_RANK", getenv("SFB_RANK"), 0, bs->size - 1, &bs->rank);
    if (r) return r;
    const char *ks = getenv("SFB_JOB_KEY");
    int key_given = ks && *ks;
    if (key_given && (r = sfb__bootstrap_parse_key(ks, &bs->key))) return r;
    bs->kind = SFB__BOOTSTRAP_ENV;
    if (bs->size == 1) {
        if (!key_given) bs->key = sfb__boot_random_key();
        return 0;
    }
    const char *spec = getenv("SFB_RENDEZVOUS");
    if (!spec || !*spec) return sfb__error(-SFB_EUSAGE, "SFB_RENDEZVOUS is not set (need host:port)");
    bs->fds = malloc(sizeof(int) * (size_t)bs->size);
    if (!bs->fds) return -ENOMEM;
    for (int i = 0; i < bs->size; i++) bs->fds[i] = -1;

    if (bs->rank == 0) {
        int lfd = -1;
        if ((r = rank0_listen(spec, &lfd))) return r;
        if (!key_given) bs->key = sfb__boot_random_key();
        double deadline = sfb__now() + SFB_MAX(s->connect_timeout_s, s->timeout_s);
        r = rank0_accept(bs, lfd, key_given, deadline);
        close(lfd);
        if (r) return r;
        deadline = sfb__now() + s->timeout_s;
        struct sfb__boot_hdr w = make_hdr(bs, SFB__BOOT_WELCOME, 0);
        for (int i = 1; i < bs->size; i++)
            if ((r = send_msg(bs->fds[i], &w, NULL, deadline))) return io_error(r, "welcoming", i);
        return 0;
    }

    if ((r = joiner_connect(bs, spec, s->connect_timeout_s))) return r;
    /* Rank 0 answers once the last rank has joined, which may take as long as
     * the slowest joiner's connect retries. */
    double deadline = sfb__now() + s->connect_timeout_s + s->timeout_s;
    struct sfb__boot_hdr h = make_hdr(bs, SFB__BOOT_HELLO, 0);
    if ((r = send_msg(bs->fds[0], &h, NULL, deadline))) return io_error(r, "sending hello to", 0);
    if ((r = recv_hdr(bs->fds[0], &h, deadline))) {
        if (r == -ECONNRESET)
            return sfb__error(-SFB_EPEER, "bootstrap: rank 0 at %s closed the connection before "
                              "welcoming rank %d: it rejected the hello (wrong SFB_JOB_KEY or "
                              "SFB_WORLD_SIZE, or a duplicate rank; see rank 0's log) or gave up waiting "
                              "for other ranks", spec, bs->rank);
        return io_error(r, "waiting for the welcome of", 0);
    }
    char why[200];
    if ((r = sfb__boot_check_common(&h, SFB__BOOT_WELCOME, (uint32_t)bs->size, why, sizeof why)))
        return sfb__error(r, "bootstrap: rank %d: bad welcome from rank 0: %s", bs->rank, why);
    if (h.len != 0 || h.key == 0 || (key_given && h.key != bs->key))
        return sfb__error(-SFB_EJOBKEY, "bootstrap: rank %d: welcome from rank 0 has job key 0x%016" PRIx64
                          " len %" PRIu32 ", expected key 0x%016" PRIx64 " len 0",
                          bs->rank, h.key, h.len, bs->key);
    bs->key = h.key;
    return 0;
}

/* ---- collectives ----------------------------------------------------------- */

/* After a failed collective the byte streams are out of step; close them at
 * once so every peer blocked on us sees EOF now rather than at its timeout. */
static void mark_broken(struct sfb__bootstrap *bs)
{
    bs->broken = 1;
    if (bs->fds)
        for (int i = 0; i < bs->size; i++)
            if (bs->fds[i] >= 0) {
                close(bs->fds[i]);
                bs->fds[i] = -1;
            }
}

/* Rank 0: gathers every CONTRIB into a table (world lengths, then blobs),
 * sends it back to all, and leaves the table in *table. */
static int env_rank0(struct sfb__bootstrap *bs, const void *mine, uint32_t len, uint8_t **table,
                     size_t *tlen, double deadline)
{
    size_t cap = 0, used = 4 * (size_t)bs->size + len;
    uint8_t *t = NULL;
    int r = sfb__reserve((void **)&t, &cap, used);
    if (r) return r;
    sfb__put_u32(t, len);
    if (len) memcpy(t + 4 * (size_t)bs->size, mine, len);
    for (int i = 1; i < bs->size; i++) {
        struct sfb__boot_hdr h;
        char why[200];
        if ((r = recv_hdr(bs->fds[i], &h, deadline))) {
            r = io_error(r, "waiting for the contribution of", i);
            goto fail;
        }
        if ((r = sfb__boot_check_common(&h, SFB__BOOT_CONTRIB, (uint32_t)bs->size, why, sizeof why))) {
            r = sfb__error(r, "bootstrap: collective %" PRIu32 ": rank %d sent %s", bs->seq, i, why);
            goto fail;
        }
        if (h.key != bs->key || h.rank != (uint32_t)i || h.seq != bs->seq) {
            r = sfb__error(-SFB_EFORMAT, "bootstrap: collective %" PRIu32 ": rank %d sent key 0x%016" PRIx64
                           " rank %" PRIu32 " seq %" PRIu32 ", expected key 0x%016" PRIx64 " rank %d seq %" PRIu32,
                           bs->seq, i, h.key, h.rank, h.seq, bs->key, i, bs->seq);
            goto fail;
        }
        if (h.len > SFB__BOOTSTRAP_MAX_BLOB || used + h.len > SFB__BOOTSTRAP_MAX_TABLE) {
            r = sfb__error(-SFB_EFORMAT, "bootstrap: collective %" PRIu32 ": rank %d: len %" PRIu32
                           " exceeds the limit of %u bytes per rank", bs->seq, i, h.len, SFB__BOOTSTRAP_MAX_BLOB);
            goto fail;
        }
        if ((r = sfb__reserve((void **)&t, &cap, used + h.len))) goto fail;
        sfb__put_u32(t + 4 * (size_t)i, h.len);
        if (h.len && (r = fd_io(bs->fds[i], t + used, h.len, deadline, 0))) {
            r = io_error(r, "reading the contribution of", i);
            goto fail;
        }
        used += h.len;
    }
    struct sfb__boot_hdr th = make_hdr(bs, SFB__BOOT_TABLE, (uint32_t)used);
    for (int i = 1; i < bs->size; i++)
        if ((r = send_msg(bs->fds[i], &th, t, deadline))) {
            r = io_error(r, "sending the table to", i);
            goto fail;
        }
    *table = t;
    *tlen = used;
    return 0;
fail:
    free(t);
    return r;
}

static int env_joiner(struct sfb__bootstrap *bs, const void *mine, uint32_t len, uint8_t **table,
                      size_t *tlen, double deadline)
{
    int fd = bs->fds[0];
    struct sfb__boot_hdr h = make_hdr(bs, SFB__BOOT_CONTRIB, len);
    int r = send_msg(fd, &h, mine, deadline);
    if (r) return io_error(r, "sending the contribution to", 0);
    if ((r = recv_hdr(fd, &h, deadline))) return io_error(r, "waiting for the table from", 0);
    char why[200];
    if ((r = sfb__boot_check_common(&h, SFB__BOOT_TABLE, (uint32_t)bs->size, why, sizeof why)))
        return sfb__error(r, "bootstrap: rank %d: bad table from rank 0: %s", bs->rank, why);
    if (h.key != bs->key || h.seq != bs->seq || h.len < 4 * (uint64_t)bs->size ||
        h.len > SFB__BOOTSTRAP_MAX_TABLE)
        return sfb__error(-SFB_EFORMAT, "bootstrap: rank %d: table from rank 0 has key 0x%016" PRIx64
                          " seq %" PRIu32 " len %" PRIu32 ", expected key 0x%016" PRIx64 " seq %" PRIu32
                          " len >= %d", bs->rank, h.key, h.seq, h.len, bs->key, bs->seq, 4 * bs->size);
    uint8_t *t = malloc(h.len);
    if (!t) return -ENOMEM;
    if ((r = fd_io(fd, t, h.len, deadline, 0))) {
        free(t);
        return io_error(r, "reading the table from", 0);
    }
    *table = t;
    *tlen = h.len;
    return 0;
}



int sfb__boot_env_allgatherv(struct sfb__bootstrap *bs, const void *mine, uint32_t len, void **all,
                             size_t *lens)
{
    double deadline = sfb__now() + bs->timeout_s;
    uint8_t *t = NULL;
    size_t tlen = 0;
    int r = bs->rank == 0 ? env_rank0(bs, mine, len, &t, &tlen, deadline)
                          : env_joiner(bs, mine, len, &t, &tlen, deadline);
    if (!r) r = sfb__boot_unpack_table(bs->size, bs->rank, t, tlen, all, lens);
    if (r) mark_broken(bs);
    return r;
}

void sfb__boot_env_close(struct sfb__bootstrap *bs)
{
    if (bs->fds)
        for (int i = 0; i < bs->size; i++)
            if (bs->fds[i] >= 0) close(bs->fds[i]);
    free(bs->fds);
    bs->fds = NULL;
}
