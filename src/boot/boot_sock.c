/* The env rendezvous's TCP sockets: reads and writes with deadlines on
 * non-blocking sockets, host:port resolution, peer address names, connect.
 * Used by src/boot/boot_env.c (both rank 0 and the joiners). */
#include "src/boot/bootstrap_impl.h"
#include "src/base/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- socket I/O with deadlines ------------------------------------------- */

/* Milliseconds from now until `deadline` for poll(): never negative (a
 * deadline already past gives 0, not "forever"), rounded up by one so that
 * poll does not wake just before it. Callers re-check the deadline after. */
int sfb__boot_poll_ms(double deadline, double now)
{
    double ms = (deadline - now) * 1000.0;
    if (ms <= 0) return 0;
    if (ms >= (double)INT_MAX - 1) return INT_MAX;
    return (int)ms + 1;
}

static _Atomic int64_t away_ns; /* sfb__boot_now: the stops sfb__boot_wait_fd saw */

double sfb__boot_now(void)
{
    return sfb__now() - 1e-9 * (double)atomic_load_explicit(&away_ns, memory_order_relaxed);
}

int sfb__boot_wait_fd(int fd, short events, double deadline)
{
    double last = sfb__now();
    for (;;) {
        /* A look seconds after the last one (polls last 1 s at most): the
         * process was stopped and continued, and the bootstrap's clock
         * leaves the time out. */
        double gap = sfb__gap(&last, sfb__now(), 2.0);
        if (gap > 0) atomic_fetch_add_explicit(&away_ns, (int64_t)(gap * 1e9), memory_order_relaxed);
        double now = sfb__boot_now();
        struct pollfd p = {fd, events, 0};
        int n = poll(&p, 1, SFB_MIN(sfb__boot_poll_ms(deadline, now), 1000));
        if (n > 0) return 0;
        if (n < 0 && errno != EINTR) return -errno;
        if (n == 0 && now >= deadline) return -ETIMEDOUT; /* looked once past it */
    }
}

/* Reads or writes exactly len bytes on a non-blocking socket before
 * `deadline`: partial transfers, EINTR and EAGAIN are retried. A peer that
 * closes gives -ECONNRESET. */
int sfb__boot_fd_io(int fd, void *buf, size_t len, double deadline, int writing)
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
        int r = sfb__boot_wait_fd(fd, writing ? POLLOUT : POLLIN, deadline);
        if (r) return r;
    }
    return 0;
}

int sfb__boot_send_msg(int fd, const struct sfb__boot_hdr *h, const void *payload, double deadline)
{
    uint8_t b[SFB__BOOT_HDR_SIZE];
    sfb__boot_hdr_encode(h, b);
    int r = sfb__boot_fd_io(fd, b, sizeof b, deadline, 1);
    if (!r && h->len) r = sfb__boot_fd_io(fd, (void *)payload, h->len, deadline, 1);
    return r;
}

int sfb__boot_recv_hdr(int fd, struct sfb__boot_hdr *h, double deadline)
{
    uint8_t b[SFB__BOOT_HDR_SIZE];
    int r = sfb__boot_fd_io(fd, b, sizeof b, deadline, 0);
    if (!r) sfb__boot_hdr_decode(b, h);
    return r;
}

/* `bound`: the seconds the step was allowed, named in a timeout. */
int sfb__boot_io_error(int r, const char *what, int peer, double bound)
{
    if (r == -ETIMEDOUT)
        return sfb__error(r, "bootstrap: timed out after %.3g s %s rank %d", bound, what, peer);
    if (r == -ECONNRESET)
        return sfb__error(-SFB_EPEER, "bootstrap: rank %d closed the connection (%s it)", peer, what);
    return sfb__error(r, "bootstrap: %s rank %d: %s", what, peer, strerror(-r));
}


/* Splits "host:port" / "[v6]:port" and resolves it. */
int sfb__boot_resolve(const char *spec, int passive, struct addrinfo **res)
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
    int r = sfb__boot_parse_int_env("SFB_RENDEZVOUS port", colon + 1, 1, 65535, &port);
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

void sfb__boot_addr_name(const struct sockaddr_storage *ss, char *out, size_t n)
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

int sfb__boot_try_connect(const struct addrinfo *ai, double deadline)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        int r = -errno;
        if (r == -EINPROGRESS) r = sfb__boot_wait_fd(fd, POLLOUT, deadline);
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
