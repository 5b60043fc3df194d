/* Bootstrap back end: environment rendezvous over TCP. Rank 0 listens on
 * SFB_RENDEZVOUS, checks every joiner's HELLO (job key, world, rank) and
 * serves the collectives: each joiner sends its CONTRIB, rank 0 answers with
 * the TABLE of all. Wire format: src/boot/bootstrap.h. */
#include "config.h"
#include "src/boot/bootstrap_impl.h"
#include "src/base/bytes.h"
#include "src/base/fdlimit.h"
#include "src/base/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

static struct sfb__boot_hdr make_hdr(const struct sfb__bootstrap *bs, uint16_t type, uint32_t len)
{
    struct sfb__boot_hdr h = {SFB__BOOT_MAGIC, SFB__BOOT_VERSION, type, bs->key,
                              (uint32_t)bs->rank, (uint32_t)bs->size, bs->seq, len};
    return h;
}

/* ---- environment ---------------------------------------------------------- */

/* A number of seconds in (0, 86400] from `name`, or `def` when it is unset. */
static int parse_seconds_env(const char *name, double def, double *out)
{
    const char *s = getenv(name);
    *out = def;
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v > 0 && v <= 86400))
        return sfb__error(-SFB_EUSAGE, "%s='%s': expected seconds, a number in (0, 86400]", name, s);
    *out = v;
    return 0;
}

/* ---- env rendezvous: rank 0 ---------------------------------------------- */

/* A connection in rank 0's table may be dropped to make room for a newer one
 * once it has been accepted this long. A real joiner sends its hello right
 * after its connect completes, usually before rank 0 even accepts it (and
 * rank 0 reads a new connection at once, and the oldest again before
 * dropping it), so it is not still silent this long after; a flood of idle
 * ones turns over table_size / EVICT_AGE_S connections a second. */
#define EVICT_AGE_S 0.25
/* Rejected and dropped connections are logged one by one up to this many,
 * then only counted (a flood must not turn into a flood of log lines, nor
 * stall rank 0 on a slow log). */
#define LOG_EACH_MAX 16

struct pending {
    int fd;
    size_t got;
    double born; /* when accepted */
    uint8_t buf[SFB__BOOT_HDR_SIZE];
    char addr[64];
};

/* Rank 0's state while it waits for the hellos. */
struct rdv {
    struct sfb__bootstrap *bs;
    int lfd, key_given, joined;
    double hello_s;
    struct pending *pend; /* connections without a whole hello yet */
    size_t npend, cap;
    unsigned char *seen; /* ranks joined */
    unsigned long nlogged, nquiet;
    double pause_until; /* out of file descriptors: accept nothing until then */
};

static void drop(struct rdv *z, struct pending *p, const char *verb, const char *why)
{
    if (z->nlogged < LOG_EACH_MAX) {
        SFB_LOG_W("bootstrap: %s connection from %s: %s", verb, p->addr, why);
        if (++z->nlogged == LOG_EACH_MAX)
            SFB_LOG_W("bootstrap: rank 0 counts further rejected or dropped connections without "
                      "logging each");
    } else {
        z->nquiet++;
    }
    close(p->fd);
    p->fd = -1;
}

/* Reads what `p` has sent; a whole hello either joins its rank (the socket
 * moves to bs->fds) or is rejected. Either way p->fd is then -1. */
static void serve(struct rdv *z, struct pending *p)
{
    ssize_t got;
    while ((got = recv(p->fd, p->buf + p->got, sizeof p->buf - p->got, 0)) < 0 && errno == EINTR) {}
    if (got == 0) {
        drop(z, p, "rejected", "closed before sending a whole hello");
        return;
    }
    if (got < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) drop(z, p, "rejected", strerror(errno));
        return;
    }
    p->got += (size_t)got;
    if (p->got < sizeof p->buf) return;
    struct sfb__boot_hdr h;
    char why[200];
    sfb__boot_hdr_decode(p->buf, &h);
    if (sfb__boot_check_hello(&h, z->bs->key, z->key_given, (uint32_t)z->bs->size, z->seen, why,
                              sizeof why)) {
        drop(z, p, "rejected", why);
        return;
    }
    SFB_LOG_D("bootstrap: rank %" PRIu32 " joined from %s", h.rank, p->addr);
    z->seen[h.rank] = 1;
    z->bs->fds[h.rank] = p->fd;
    p->fd = -1;
    z->joined++;
}

static void compact(struct rdv *z)
{
    size_t k = 0;
    for (size_t i = 0; i < z->npend; i++)
        if (z->pend[i].fd >= 0) z->pend[k++] = z->pend[i];
    z->npend = k;
}

static struct pending *oldest(struct rdv *z)
{
    struct pending *o = NULL;
    for (size_t i = 0; i < z->npend; i++)
        if (!o || z->pend[i].born < o->born) o = &z->pend[i];
    return o;
}

/* Frees a slot when the table is full, by dropping the oldest connection
 * if it is at least EVICT_AGE_S old (or at once when `force`). Returns 1 if
 * there is room. */
static int make_room(struct rdv *z, double now, int force)
{
    if (z->npend < z->cap && !force) return 1;
    struct pending *o = oldest(z);
    if (!o || (!force && now - o->born < EVICT_AGE_S)) return 0;
    serve(z, o); /* its hello may just have come */
    if (o->fd >= 0) {
        char why[160];
        snprintf(why, sizeof why, "no hello after %.2f s, dropped to make room (%zu connections "
                 "waiting for a hello)", now - o->born, z->npend);
        drop(z, o, "dropped", why);
    }
    compact(z);
    return 1;
}

/* Accepts what the listen queue holds, as long as there is room. */
static void accept_some(struct rdv *z, double now)
{
    for (size_t n = 0; n <= z->cap && z->joined < z->bs->size - 1; n++) {
        if (!make_room(z, now, 0)) return;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(z->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Out of descriptors: give up a silent connection, or wait. */
                if (!z->npend) z->pause_until = now + 0.05;
                make_room(z, now, 1);
                return;
            }
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
            return; /* EAGAIN: the queue is empty */
        }
        struct pending *p = &z->pend[z->npend++];
        p->fd = fd;
        p->got = 0;
        p->born = now;
        sfb__boot_addr_name(&ss, p->addr, sizeof p->addr);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        serve(z, p); /* a joiner's hello is usually here already */
        compact(z);
    }
}

static int rendezvous_timeout(struct rdv *z, double waited)
{
    struct sfb__bootstrap *bs = z->bs;
    char miss[256] = "";
    size_t o = 0;
    int nmiss = 0;
    for (int i = 1; i < bs->size && o + 16 < sizeof miss; i++)
        if (!z->seen[i]) o += (size_t)snprintf(miss + o, sizeof miss - o, "%s%d", nmiss++ ? ", " : "", i);
    unsigned long nrej = z->nlogged + z->nquiet;
    char rej[96] = "";
    if (nrej)
        snprintf(rej, sizeof rej, " (%lu other connections rejected or dropped; see rank 0's log)", nrej);
    return sfb__error(-ETIMEDOUT, "bootstrap: rank 0 waited %.3g s: %d of %d ranks joined; missing %s%s",
                      waited, z->joined + 1, bs->size, miss, rej);
}

/* Accepts world-1 valid HELLOs before the absolute `deadline` (waited s
 * after the start). Bad connections are logged and closed and do not count;
 * a connection without a whole hello is dropped after hello_s, or earlier
 * when the table is full and it is the oldest. Every poll() waits at most
 * until the next of those instants, and the deadline is checked on every
 * pass, so nothing a peer does or fails to do (nor a stall of rank 0 itself)
 * keeps rank 0 past it. */
static int rank0_accept(struct sfb__bootstrap *bs, int lfd, int key_given, double hello_s,
                        size_t max_pending, double deadline, double waited)
{
    struct rdv z = {.bs = bs, .lfd = lfd, .key_given = key_given, .hello_s = hello_s, .cap = max_pending};
    struct pollfd *pfd = calloc(max_pending + 1, sizeof *pfd);
    z.pend = calloc(max_pending, sizeof *z.pend);
    z.seen = calloc((size_t)bs->size, 1);
    int r = 0;
    if (!pfd || !z.pend || !z.seen) {
        r = -ENOMEM;
        goto out;
    }
    while (z.joined < bs->size - 1) {
        double now = sfb__boot_now();
        if (now >= deadline) {
            r = rendezvous_timeout(&z, waited);
            goto out;
        }
        for (size_t i = 0; i < z.npend; i++)
            if (now - z.pend[i].born >= hello_s) {
                char why[80];
                snprintf(why, sizeof why, "no complete hello within %.3g s", hello_s);
                drop(&z, &z.pend[i], "dropped", why);
            }
        compact(&z);
        double wake = deadline;
        /* Accept again once there is room (or the oldest may be dropped for
         * it) and no pause for lack of descriptors is running. */
        double resume = z.pause_until;
        if (z.npend == z.cap) resume = SFB_MAX(resume, oldest(&z)->born + EVICT_AGE_S);
        int listening = now >= resume;
        if (!listening) wake = SFB_MIN(wake, resume);
        nfds_t n = 0;
        if (listening) pfd[n++] = (struct pollfd){lfd, POLLIN, 0};
        for (size_t i = 0; i < z.npend; i++) {
            pfd[n++] = (struct pollfd){z.pend[i].fd, POLLIN, 0};
            wake = SFB_MIN(wake, z.pend[i].born + hello_s);
        }
        int pr = poll(pfd, n, sfb__boot_poll_ms(wake, now));
        if (pr < 0 && errno != EINTR) {
            r = sfb__error(-errno, "bootstrap: rank 0: poll: %s", strerror(errno));
            goto out;
        }
        if (pr <= 0) continue;
        size_t off = listening ? 1 : 0;
        for (size_t i = 0; i < z.npend; i++)
            if (pfd[off + i].revents) serve(&z, &z.pend[i]);
        compact(&z);
        if (listening && (pfd[0].revents & POLLIN)) accept_some(&z, sfb__boot_now());
    }
out:
    for (size_t i = 0; z.pend && i < z.npend; i++) close(z.pend[i].fd);
    if (z.nquiet)
        SFB_LOG_W("bootstrap: rank 0 rejected or dropped %lu more connections during the rendezvous",
                  z.nquiet);
    free(z.pend);
    free(z.seen);
    free(pfd);
    return r;
}

static int rank0_listen(const char *spec, int *lfd_out)
{
    struct addrinfo *ai;
    int r = sfb__boot_resolve(spec, 1, &ai);
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

static int joiner_connect(struct sfb__bootstrap *bs, const char *spec, double connect_timeout)
{
    struct addrinfo *ai;
    int r = sfb__boot_resolve(spec, 0, &ai);
    if (r) return r;
    double deadline = sfb__boot_now() + connect_timeout, backoff = 0.01;
    int fd = -1;
    for (;;) {
        for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) fd = sfb__boot_try_connect(a, deadline);
        if (fd >= 0) break;
        double now = sfb__boot_now();
        if (now + backoff >= deadline) {
            freeaddrinfo(ai);
            return sfb__error(-ETIMEDOUT, "bootstrap: rank %d could not reach rank 0 at %s within %.0f s: %s",
                              bs->rank, spec, connect_timeout, strerror(-fd));
        }
        sfb__sleep(backoff);
        /* at most 50 ms: rank 0 under load may start seconds after the
         * others, and each is late by up to one sleep (refused connects are
         * cheap; 128 joiners retrying 20 times a second are nothing) */
        backoff = SFB_MIN(backoff * 2, 0.05);
    }
    freeaddrinfo(ai);
    bs->fds[0] = fd;
    return 0;
}

/* ---- open ------------------------------------------------------------------ */

/* torchrun's environment names this process's rank: RANK and WORLD_SIZE set,
 * neither SFB_RANK (sfb launch, the SFB_* variables) nor PMIX_RANK (mpirun,
 * srun) is. */
static int torchrun_env(void)
{
    return !getenv("SFB_RANK") && !getenv("PMIX_RANK") && getenv("RANK") && getenv("WORLD_SIZE");
}

/* The rendezvous of a job from the environment: SFB_RENDEZVOUS, else under
 * torchrun rank 0 at MASTER_ADDR on MASTER_PORT + 1 (torchrun's agent may
 * hold MASTER_PORT itself: its store under the static rendezvous; and the
 * program may open torch.distributed there), written into buf. */
static int env_rendezvous(char *buf, size_t n, const char **spec)
{
    const char *e = getenv("SFB_RENDEZVOUS");
    *spec = e;
    if ((e && *e) || !torchrun_env()) return 0;
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    if (!addr || !*addr || !port || !*port)
        return sfb__error(-SFB_EUSAGE, "bootstrap: RANK and WORLD_SIZE are set (torchrun's) but "
                          "not MASTER_ADDR and MASTER_PORT, nor SFB_RENDEZVOUS");
    int p, r = sfb__boot_parse_int_env("MASTER_PORT", port, 1, 65534, &p);
    if (r) return r;
    snprintf(buf, n, "%s:%d", addr, p + 1);
    *spec = buf;
    return 0;
}

/* Rank and world from the settings (an explicit rendezvous), SFB_* or
 * torchrun's RANK and WORLD_SIZE. */
static int rank_and_world(struct sfb__bootstrap *bs, const struct sfb__bootstrap_settings *s)
{
    int r = 0;
    if (s->world > 0) {
        if (s->world > SFB__BOOTSTRAP_MAX_WORLD || s->rank < 0 || s->rank >= s->world)
            return sfb__error(-SFB_EUSAGE, "bootstrap: rank %d of world %d: need 0 <= rank < "
                              "world <= %d", s->rank, s->world, SFB__BOOTSTRAP_MAX_WORLD);
        bs->size = s->world;
        bs->rank = s->rank;
    } else {
        int tr = torchrun_env();
        const char *wn = tr ? "WORLD_SIZE" : "SFB_WORLD_SIZE", *rn = tr ? "RANK" : "SFB_RANK";
        r = sfb__boot_parse_int_env(wn, getenv(wn), 1, SFB__BOOTSTRAP_MAX_WORLD, &bs->size);
        if (!r) r = sfb__boot_parse_int_env(rn, getenv(rn), 0, bs->size - 1, &bs->rank);
    }
    return r;
}

/* Rank 0: listens, takes every rank's hello, welcomes them all. */
static int rank0_open(struct sfb__bootstrap *bs, const struct sfb__bootstrap_settings *s,
                      const char *spec, int key_given, double hello_s, int max_pending)
{
    int lfd = -1, r = rank0_listen(spec, &lfd);
    if (r) return r;
    if (!key_given) bs->key = sfb__boot_random_key();
    /* Absolute: nothing a peer sends, nor a stall of rank 0, moves it. */
    double waited = SFB_MAX(s->connect_timeout_s, s->timeout_s);
    double deadline = sfb__boot_now() + waited;
    r = rank0_accept(bs, lfd, key_given, hello_s, (size_t)max_pending, deadline, waited);
    close(lfd);
    if (r) return r;
    deadline = sfb__boot_now() + s->timeout_s;
    struct sfb__boot_hdr w = make_hdr(bs, SFB__BOOT_WELCOME, 0);
    for (int i = 1; i < bs->size; i++)
        if ((r = sfb__boot_send_msg(bs->fds[i], &w, NULL, deadline)))
            return sfb__boot_io_error(r, "welcoming", i, s->timeout_s);
    return 0;
}

static int env_open_world(struct sfb__bootstrap *bs, const struct sfb__bootstrap_settings *s)
{
    int r = rank_and_world(bs, s);
    if (r) return r;
    const char *ks = s->world > 0 ? s->job_key : getenv("SFB_JOB_KEY");
    int key_given = ks && *ks;
    if (key_given && (r = sfb__bootstrap_parse_key(ks, &bs->key))) return r;
    bs->kind = SFB__BOOTSTRAP_ENV;
    if (bs->size == 1) {
        if (!key_given) bs->key = sfb__boot_random_key();
        return 0;
    }
    /* Before the rendezvous: rank 0 holds a connection per rank until the
     * welcome (and the comm context wants 4 descriptors a peer later). */
    sfb__fd_limit_raise((uint32_t)bs->size, bs->rank == 0);
    char from_master[300];
    const char *spec = s->rendezvous;
    if (s->world == 0 && (r = env_rendezvous(from_master, sizeof from_master, &spec))) return r;
    if (!spec || !*spec)
        return sfb__error(-SFB_EUSAGE, "%s is not set (need host:port)",
                          s->world > 0 ? "the rendezvous" : "SFB_RENDEZVOUS");
    double hello_s;
    int max_pending = s->max_pending;
    if ((r = parse_seconds_env("SFB_RENDEZVOUS_HELLO_TIMEOUT", s->hello_timeout_s, &hello_s))) return r;
    const char *mp = getenv("SFB_RENDEZVOUS_MAX_PENDING");
    if (mp && *mp && (r = sfb__boot_parse_int_env("SFB_RENDEZVOUS_MAX_PENDING", mp, 1, 65536, &max_pending))) return r;
    if (!(hello_s > 0) || max_pending < 1)
        return sfb__error(-SFB_EUSAGE, "bootstrap: hello timeout %g s and table of %d connections: "
                          "both must be positive", hello_s, max_pending);
    bs->fds = malloc(sizeof(int) * (size_t)bs->size);
    if (!bs->fds) return -ENOMEM;
    for (int i = 0; i < bs->size; i++) bs->fds[i] = -1;

    if (bs->rank == 0) return rank0_open(bs, s, spec, key_given, hello_s, max_pending);

    if ((r = joiner_connect(bs, spec, s->connect_timeout_s))) return r;
    /* Rank 0 answers once the last rank has joined, which may take as long as
     * the slowest joiner's connect retries. */
    double welcome_s = s->connect_timeout_s + s->timeout_s;
    double deadline = sfb__boot_now() + welcome_s;
    struct sfb__boot_hdr h = make_hdr(bs, SFB__BOOT_HELLO, 0);
    if ((r = sfb__boot_send_msg(bs->fds[0], &h, NULL, deadline))) return sfb__boot_io_error(r, "sending the hello to", 0, welcome_s);
    if ((r = sfb__boot_recv_hdr(bs->fds[0], &h, deadline))) {
        if (r == -ECONNRESET)
            return sfb__error(-SFB_EPEER, "bootstrap: rank 0 at %s closed the connection before "
                              "welcoming rank %d: it rejected the hello (wrong SFB_JOB_KEY or "
                              "SFB_WORLD_SIZE, or a duplicate rank; see rank 0's log), dropped it (no hello "
                              "within SFB_RENDEZVOUS_HELLO_TIMEOUT) or gave up waiting for other ranks",
                              spec, bs->rank);
        return sfb__boot_io_error(r, "waiting for the welcome from", 0, welcome_s);
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
        if ((r = sfb__boot_recv_hdr(bs->fds[i], &h, deadline))) {
            r = sfb__boot_io_error(r, "waiting for the contribution of", i, bs->timeout_s);
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
        if (h.len > SFB__BOOTSTRAP_WIRE_BLOB || used + h.len > SFB__BOOTSTRAP_MAX_TABLE) {
            r = sfb__error(-SFB_EFORMAT, "bootstrap: collective %" PRIu32 ": rank %d: len %" PRIu32
                           " exceeds the limit of %u bytes per rank", bs->seq, i, h.len,
                           SFB__BOOTSTRAP_WIRE_BLOB);
            goto fail;
        }
        if ((r = sfb__reserve((void **)&t, &cap, used + h.len))) goto fail;
        sfb__put_u32(t + 4 * (size_t)i, h.len);
        if (h.len && (r = sfb__boot_fd_io(bs->fds[i], t + used, h.len, deadline, 0))) {
            r = sfb__boot_io_error(r, "reading the contribution of", i, bs->timeout_s);
            goto fail;
        }
        used += h.len;
    }
    struct sfb__boot_hdr th = make_hdr(bs, SFB__BOOT_TABLE, (uint32_t)used);
    for (int i = 1; i < bs->size; i++)
        if ((r = sfb__boot_send_msg(bs->fds[i], &th, t, deadline))) {
            r = sfb__boot_io_error(r, "sending the table to", i, bs->timeout_s);
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
    int r = sfb__boot_send_msg(fd, &h, mine, deadline);
    if (r) return sfb__boot_io_error(r, "sending the contribution to", 0, bs->timeout_s);
    if ((r = sfb__boot_recv_hdr(fd, &h, deadline))) return sfb__boot_io_error(r, "waiting for the table from", 0, bs->timeout_s);
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
    if ((r = sfb__boot_fd_io(fd, t, h.len, deadline, 0))) {
        free(t);
        return sfb__boot_io_error(r, "reading the table from", 0, bs->timeout_s);
    }
    *table = t;
    *tlen = h.len;
    return 0;
}



static int env_allgatherv(struct sfb__bootstrap *bs, const void *mine, uint32_t len, void **all,
                          size_t *lens)
{
    if (bs->size == 1) return sfb__boot_gather_self(bs, mine, len, all, lens);
    double deadline = sfb__boot_now() + bs->timeout_s;
    uint8_t *t = NULL;
    size_t tlen = 0;
    int r = bs->rank == 0 ? env_rank0(bs, mine, len, &t, &tlen, deadline)
                          : env_joiner(bs, mine, len, &t, &tlen, deadline);
    if (!r) r = sfb__boot_unpack_table(bs->size, bs->rank, t, tlen, all, lens);
    if (r) mark_broken(bs);
    return r;
}

static void env_close(struct sfb__bootstrap *bs)
{
    if (bs->fds)
        for (int i = 0; i < bs->size; i++)
            if (bs->fds[i] >= 0) close(bs->fds[i]);
    free(bs->fds);
    bs->fds = NULL;
}

static int env_open(struct sfb__bootstrap *bs, const struct sfb__bootstrap_settings *s, int *taken)
{
    *taken = s->world > 0 || getenv("SFB_RANK") != NULL || torchrun_env();
    if (!*taken) return 0;
    int r = env_open_world(bs, s);
    if (r) env_close(bs);
    return r;
}

int sfb__bootstrap_reserve(struct sfb__bootstrap *bs, int *fd_out, char *addr, size_t n)
{
    *fd_out = -1;
    if (bs->kind != SFB__BOOTSTRAP_ENV || bs->size < 2)
        return sfb__error(-SFB_EUSAGE, "elastic jobs need the environment rendezvous (sfb "
                          "launch, torchrun's variables) of two or more ranks%s",
                          bs->kind == SFB__BOOTSTRAP_PMIX ? ", not PMIx (mpirun, srun)" : "");
    /* the address this rank's peers reached it at (rank 0) or it reached
     * rank 0 from (a joiner) */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(bs->fds[bs->rank == 0 ? 1 : 0], (struct sockaddr *)&ss, &sl) < 0)
        return sfb__error(-errno, "bootstrap: getsockname: %s", strerror(errno));
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sfb__error(-errno, "bootstrap: socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    char h[INET6_ADDRSTRLEN] = "?";
    struct sockaddr_storage any;
    memset(&any, 0, sizeof any);
    any.ss_family = ss.ss_family;
    if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, h, sizeof h);
    else
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, h, sizeof h);
    /* bound, not listening: a rendezvous this rank serves later binds the
     * same port (SO_REUSEADDR on both), nobody else can take it */
    if (bind(fd, (struct sockaddr *)&any, sl) < 0 ||
        getsockname(fd, (struct sockaddr *)&any, &sl) < 0) {
        int r = sfb__error(-errno, "bootstrap: reserving a rendezvous port: %s", strerror(errno));
        close(fd);
        return r;
    }
    int port = ntohs(any.ss_family == AF_INET ? ((struct sockaddr_in *)&any)->sin_port
                                              : ((struct sockaddr_in6 *)&any)->sin6_port);
    snprintf(addr, n, ss.ss_family == AF_INET ? "%s:%d" : "[%s]:%d", h, port);
    *fd_out = fd;
    return 0;
}

const struct sfb__boot_ops sfb__boot_env_ops = {
    .kind = SFB__BOOTSTRAP_ENV,
    .open = env_open,
    .allgatherv = env_allgatherv,
    .close = env_close,
};
