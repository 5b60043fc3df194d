/* Joining a running elastic job (docs/robustness.md, "Elastic jobs"): the
 * join listener the job's rank 0 keeps at SFB_JOIN, and the handshake a
 * process started later does there. Messages use the env rendezvous's
 * 32-byte header (src/boot/bootstrap.h) with their own types:
 *   JOIN    joiner -> rank 0: key = the job key, payload = the joiner's
 *           settings text (what must agree across ranks, world left out)
 *   ASSIGN  rank 0 -> joiner: rank, world = its place in the grown job,
 *           payload = i64 LE clock to start at, two u64 LE of the job's
 *           (its max_s, the caller's value), then the rendezvous
 *           "host:port" (NUL-terminated)
 *   REFUSE  rank 0 -> joiner: payload = the reason (a wrong key, other
 *           settings)
 * A joiner's bytes are untrusted: its hello is read with a deadline, its
 * length bounded, and a bad one is dropped without touching the job. */
#include "config.h"
#include "src/boot/bootstrap_impl.h"
#include "src/base/bytes.h"
#include "src/base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { JOIN = 16, ASSIGN = 17, REFUSE = 18 };
#define TEXT_MAX 65536

static struct sfb__boot_hdr hdr(uint16_t type, uint64_t key, uint32_t rank, uint32_t world,
                                uint32_t len)
{
    return (struct sfb__boot_hdr){SFB__BOOT_MAGIC, SFB__BOOT_VERSION, type, key, rank, world, 0,
                                  len};
}

int sfb__join_listen(const char *addr, int *fd_out)
{
    *fd_out = -1;
    struct addrinfo *ai;
    int r = sfb__boot_resolve(addr, 1, &ai);
    if (r) return r;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        r = sfb__error(-errno, "join listener: socket: %s", strerror(errno));
    } else {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
            r = sfb__error(-errno, "join listener: %s: %s", addr, strerror(errno));
            close(fd);
        } else {
            *fd_out = fd;
        }
    }
    freeaddrinfo(ai);
    return r;
}

int sfb__join_reserve(const char *host, int *fd_out, char *addr, size_t n)
{
    *fd_out = -1;
    char h[96];
    size_t hl = strlen(host);
    /* "[v6]" as SFB_JOIN spells it, bare for getaddrinfo */
    snprintf(h, sizeof h, "%.*s", (int)(hl >= 2 && host[0] == '[' ? hl - 2 : hl),
             hl >= 2 && host[0] == '[' ? host + 1 : host);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai;
    int g = getaddrinfo(h, "0", &hints, &ai);
    if (g)
        return sfb__error(-SFB_EUSAGE, "reserving a rendezvous port on \"%s\": %s", host,
                          gai_strerror(g));
    int r = 0;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        r = sfb__error(-errno, "reserving a rendezvous port on %s: %s", host, strerror(errno));
        if (fd >= 0) close(fd);
    } else {
        int port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                                 : ((struct sockaddr_in6 *)&ss)->sin6_port);
        snprintf(addr, n, ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", h, port);
        *fd_out = fd;
    }
    freeaddrinfo(ai);
    return r;
}

/* Reads one JOIN from a new connection within 0.5 s: 0 with the text
 * (malloc'd, NUL-terminated), or a negative code (dropped). */
static int read_join(int fd, struct sfb__boot_hdr *h, char **text)
{
    double deadline = sfb__boot_now() + 0.5;
    int r = sfb__boot_recv_hdr(fd, h, deadline);
    if (r) return r;
    if (h->magic != SFB__BOOT_MAGIC || h->version != SFB__BOOT_VERSION || h->type != JOIN ||
        h->len > TEXT_MAX)
        return -SFB_EFORMAT;
    *text = malloc((size_t)h->len + 1);
    if (!*text) return -ENOMEM;
    if ((r = sfb__boot_fd_io(fd, *text, h->len, deadline, 0))) {
        free(*text);
        return r;
    }
    (*text)[h->len] = '\0';
    return 0;
}

static void refuse(int fd, uint64_t key, const char *why)
{
    struct sfb__boot_hdr h = hdr(REFUSE, key, 0, 0, (uint32_t)strlen(why));
    sfb__boot_send_msg(fd, &h, why, sfb__boot_now() + 0.5);
}

/* The first line where two settings texts differ, for the refusal. */
static void first_difference(const char *mine, const char *theirs, char *out, size_t n)
{
    for (;;) {
        size_t a = strcspn(mine, "\n"), b = strcspn(theirs, "\n");
        if (a != b || memcmp(mine, theirs, a)) {
            snprintf(out, n, "settings differ from the job's: %.*s here, %.*s in the job",
                     (int)SFB_MIN(b, 200), theirs, (int)SFB_MIN(a, 200), mine);
            return;
        }
        if (!mine[a]) break;
        mine += a + 1;
        theirs += b + 1;
    }
    snprintf(out, n, "settings differ from the job's");
}

int sfb__join_accept(int lfd, uint64_t key, const char *text, int *fds, uint32_t max,
                     uint32_t *n)
{
    *n = 0;
    /* the job waits while this runs: idle connections (each dropped after
     * 0.5 s without a JOIN) cost it 1 s a check at most; the rest wait for
     * the next check */
    double end = sfb__boot_now() + 1.0;
    while (*n < max && sfb__boot_now() < end) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            return sfb__error(-errno, "join listener: accept: %s", strerror(errno));
        }
        struct sfb__boot_hdr h;
        char *theirs = NULL;
        int r = read_join(fd, &h, &theirs);
        if (r) {
            SFB_LOG_W("join listener: dropped a connection that sent no valid JOIN (%s)",
                      sfb_strerror(r));
            close(fd);
            continue;
        }
        char why[512] = "";
        if (h.key != key)
            snprintf(why, sizeof why, "job key 0x%016llx is not this job's",
                     (unsigned long long)h.key);
        else if (strcmp(theirs, text) != 0)
            first_difference(text, theirs, why, sizeof why);
        free(theirs);
        if (why[0]) {
            SFB_LOG_W("join listener: refused a joiner: %s", why);
            refuse(fd, key, why);
            close(fd);
            continue;
        }
        fds[(*n)++] = fd;
    }
    return 0;
}

#define ASSIGN_FIXED 24 /* clock, extra[0], extra[1] */

int sfb__join_assign(int fd, uint64_t key, uint32_t rank, uint32_t world, int64_t clock,
                     const uint64_t extra[2], const char *rendezvous)
{
    size_t len = ASSIGN_FIXED + strlen(rendezvous) + 1;
    uint8_t *p = malloc(len);
    if (!p) return -ENOMEM;
    sfb__put_u64(p, (uint64_t)clock);
    sfb__put_u64(p + 8, extra[0]);
    sfb__put_u64(p + 16, extra[1]);
    memcpy(p + ASSIGN_FIXED, rendezvous, len - ASSIGN_FIXED);
    struct sfb__boot_hdr h = hdr(ASSIGN, key, rank, world, (uint32_t)len);
    int r = sfb__boot_send_msg(fd, &h, p, sfb__boot_now() + 2.0);
    free(p);
    return r;
}

int sfb__join_request(const char *addr, uint64_t key, const char *text, double timeout_s,
                      uint32_t *rank, uint32_t *world, int64_t *clock, uint64_t extra[2],
                      char *rdv, size_t rdv_len)
{
    struct addrinfo *ai;
    int r = sfb__boot_resolve(addr, 0, &ai);
    if (r) return r;
    double deadline = sfb__boot_now() + timeout_s;
    int fd = -1;
    while (fd < 0 && sfb__boot_now() < deadline) {
        for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next)
            fd = sfb__boot_try_connect(a, deadline);
        if (fd < 0) sfb__sleep(0.05);
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return sfb__error(-ETIMEDOUT, "joining: nobody answered at %s within %.0f s (SFB_JOIN)",
                          addr, timeout_s);
    size_t tlen = strlen(text);
    struct sfb__boot_hdr h = hdr(JOIN, key, 0, 0, (uint32_t)tlen);
    if ((r = sfb__boot_send_msg(fd, &h, text, deadline))) goto out;
    /* the job answers at its next check (every --check-every clocks) */
    if ((r = sfb__boot_recv_hdr(fd, &h, deadline))) {
        r = sfb__error(r, "joining %s: no answer within %.0f s: %s", addr, timeout_s,
                       sfb_strerror(r));
        goto out;
    }
    if (h.magic != SFB__BOOT_MAGIC || (h.type != ASSIGN && h.type != REFUSE) || h.len > TEXT_MAX ||
        (h.type == ASSIGN && (h.len < ASSIGN_FIXED + 2 || h.world < 2 || h.rank >= h.world))) {
        r = sfb__error(-SFB_EFORMAT, "joining %s: a malformed answer", addr);
        goto out;
    }
    char *p = malloc((size_t)h.len + 1);
    if (!p) {
        r = -ENOMEM;
        goto out;
    }
    if ((r = sfb__boot_fd_io(fd, p, h.len, deadline, 0))) {
        free(p);
        goto out;
    }
    p[h.len] = '\0';
    if (h.type == REFUSE) {
        r = sfb__error(-SFB_ECONFIG, "joining %s: refused: %s", addr, p);
    } else if (!memchr(p + ASSIGN_FIXED, 0, h.len - ASSIGN_FIXED) ||
               strlen(p + ASSIGN_FIXED) >= rdv_len) {
        r = sfb__error(-SFB_EFORMAT, "joining %s: a malformed answer", addr);
    } else {
        *rank = h.rank;
        *world = h.world;
        *clock = (int64_t)sfb__get_u64((uint8_t *)p);
        extra[0] = sfb__get_u64((uint8_t *)p + 8);
        extra[1] = sfb__get_u64((uint8_t *)p + 16);
        snprintf(rdv, rdv_len, "%s", p + ASSIGN_FIXED);
    }
    free(p);
out:
    close(fd);
    return r;
}
