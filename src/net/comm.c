#include "config.h"
#include "src/net/comm_impl.h"
#include "src/net/agree.h"
#include "src/base/timeline.h"
#include "src/net/bootstrap.h"
#include "src/base/bytes.h"
#include "src/base/common.h"
#include "src/net/loop.h"

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
    s->bootstrap_timeout_s = 60.0;
}

/* Records the first failure; later ones are logged only. Loop thread or
 * compute thread. */
static void fail(struct sfb__comm *c, int rank, const char *fmt, ...) SFB_PRINTF(3, 4);
static void fail(struct sfb__comm *c, int rank, const char *fmt, ...)
{
    if (atomic_load_explicit(&c->failed, memory_order_acquire)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->reason, sizeof c->reason, fmt, ap);
    va_end(ap);
    c->failed_rank = rank;
    atomic_store_explicit(&c->failed, 1, memory_order_release);
    SFB_LOG_E("%s", c->reason);
}

int sfb__comm_check(struct sfb__comm *c)
{
    if (!atomic_load_explicit(&c->failed, memory_order_acquire)) return 0;
    return sfb__error(-SFB_EPEER, "%s", c->reason);
}

int sfb__comm_explain(struct sfb__comm *c, int ret)
{
    if (!ret || !c->t) return ret;
    /* the peer's ABORT is sent before it exits, the EOF comes after: give
     * the frame a moment to overtake */
    double end = sfb__now() + 1.0;
    for (;;) {
        int failed = sfb__comm_check(c);
        if (failed) return failed;
        if (sfb__now() >= end) return ret;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int sfb__comm_peers_know(struct sfb__comm *c)
{
    return atomic_load_explicit(&c->failed, memory_order_acquire) &&
           !atomic_load_explicit(&c->found_here, memory_order_relaxed);
}

int sfb__comm_check_wait(struct sfb__comm *c, int64_t required)
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
    return 0;
}

int sfb__comm_header(const struct sfb__comm *c, struct sfb__wire_hdr *h,
                     const struct sfb__wire_piece *pieces, size_t npieces,
                     uint8_t hdr[SFB_WIRE_HDR_SIZE])
{
    h->job_key = c->job_key;
    if ((h->type == SFB_WIRE_SF || h->type == SFB_WIRE_DENSE_ROWS) && h->origin == c->rank &&
        h->clock == c->last_clock)
        h->flags |= SFB_WIRE_F_LAST;
    return sfb__wire_encode(h, pieces, npieces, hdr);
}

int sfb__comm_send_control(struct sfb__comm *c, uint32_t dst, enum sfb__wire_type type,
                           const void *payload, size_t len, double timeout_s)
{
    if (!c->t) return 0;
    struct sfb__wire_hdr h = {.type = (uint8_t)type, .origin = c->rank, .sender = c->rank,
                             .payload_len = len};
    struct sfb__wire_piece piece = {payload, len};
    uint8_t hdr[SFB_WIRE_HDR_SIZE];
    int ret = sfb__comm_header(c, &h, &piece, len ? 1 : 0, hdr);
    if (ret) return ret;
    if (!len) return sfb__transport_send(c->t, dst, hdr, sizeof hdr, NULL, 0, 0, timeout_s);
    struct sfb__buf *b;
    if ((ret = sfb__transport_buf_get(c->t, len, &b))) return ret;
    memcpy(b->data, payload, len);
    ret = sfb__transport_send(c->t, dst, hdr, sizeof hdr, b, 0, len, timeout_s);
    sfb__buf_put(b);
    return ret;
}

/* A frame rejected by the wire checks is counted and dropped (noise, a
 * corrupted or foreign frame). One of this job from a peer with another
 * shape (model, data shape, batch) is not noise: that peer's update of its
 * clock will never arrive in a form this rank can apply, so waiting for it
 * would hang. The job fails, naming the peer and the frame. Loop thread. */
static void rejected(struct sfb__comm *c, uint32_t src, int code)
{
    if (code != -SFB_ESHAPE || src >= c->world) return;
    atomic_store_explicit(&c->found_here, 1, memory_order_relaxed);
    fail(c, (int)src,
         "rank %u cannot apply the updates of rank %u (do the ranks run the same model, data "
         "and batch?): %s",
         c->rank, src, sfb_error_message(code));
}

/* A data frame of its origin's last clock: nothing later will come from
 * that origin (the waits fail at once instead of hanging). */
static void note_last(struct sfb__comm *c, const struct sfb__wire_hdr *h)
{
    if ((h->type == SFB_WIRE_SF || h->type == SFB_WIRE_DENSE_ROWS) &&
        (h->flags & SFB_WIRE_F_LAST) && h->origin < c->world && h->origin != c->rank)
        atomic_store_explicit(&c->final_clock[h->origin], h->clock, memory_order_release);
}

/* Loop thread: every received frame passes here first. Control frames end
 * here; data frames go to the engine's hook or to the inbox. */
static int on_frame(void *user, struct sfb__frame *f)
{
    struct sfb__comm *c = user;
    /* Full validation here, checksum included, so nothing invalid ever
     * reaches the inbox or a relay: counted, logged, dropped. */
    struct sfb__wire_hdr h;
    const uint8_t *payload;
    int bad = sfb__wire_decode(&c->job, f->data, f->len, (int)f->src, &h, &payload);
    if (bad) {
        rejected(c, f->src, bad);
        sfb__buf_put(f->buf);
        return 1;
    }
    if (h.type == SFB_WIRE_BUNDLE) {
        struct sfb__wire_iter it;
        const uint8_t *inner, *ip;
        size_t inner_len;
        struct sfb__wire_hdr ih;
        int r;
        sfb__wire_bundle_begin(&it, payload, h.payload_len, (int)f->src);
        while ((r = sfb__wire_bundle_next(&c->job, &it, &inner, &inner_len, &ih, &ip)) == 1) {
        }
        if (r < 0) {
            rejected(c, f->src, r);
            sfb__buf_put(f->buf);
            return 1;
        }
        sfb__wire_bundle_begin(&it, payload, h.payload_len, (int)f->src);
        while (sfb__wire_bundle_next_trusted(&it, &inner, &inner_len, &ih, &ip) == 1)
            note_last(c, &ih);
    } else {
        note_last(c, &h);
    }
    if (f->src < c->world) {
        c->last_heard[f->src] = sfb__now();
        if (h.type != SFB_WIRE_HEARTBEAT) c->talks[f->src] = 1;
    }
    switch (h.type) {
    case SFB_WIRE_HEARTBEAT:
    case SFB_WIRE_HELLO:
        sfb__buf_put(f->buf);
        return 1;
    case SFB_WIRE_BYE:
        /* a BYE carries the sender's last clock: nothing beyond it will come */
        if (f->src < c->world && h.origin == f->src) {
            c->said_bye[f->src] = 1;
            if (h.payload_len == 8)
                atomic_store_explicit(&c->final_clock[f->src], (int64_t)sfb__get_u64(payload),
                                      memory_order_release);
        }
        sfb__buf_put(f->buf);
        return 1;
    case SFB_WIRE_ABORT: {
        /* the reason is untrusted text: keep it printable */
        char why[301];
        size_t n = (size_t)SFB_MIN(h.payload_len, 300);
        for (size_t i = 0; i < n; i++)
            why[i] = payload[i] >= 0x20 && payload[i] < 0x7f ? (char)payload[i] : '?';
        why[n] = '\0';
        fail(c, (int)h.origin, "rank %u aborted the job: %s", h.origin, why);
        sfb__buf_put(f->buf);
        return 1;
    }
    default:
        break;
    }
    if (c->s.on_data) return c->s.on_data(c->s.user, f, &h);
    return 0;
}

int sfb__comm_deliver(struct sfb__comm *c, struct sfb__frame *f)
{
    return on_frame(c, f);
}

static void sent_hook(void *user, uint32_t dst, const struct sfb__buf *buf, int failed)
{
    struct sfb__comm *c = user;
    if (dst < c->world) c->last_sent[dst] = sfb__now();
    if (c->s.on_sent) c->s.on_sent(c->s.user, dst, buf, failed);
}

/* Whether a process of this host is gone: no such pid, or a zombie that its
 * parent has not reaped yet. */
static int pid_gone(int pid)
{
    if (kill(pid, 0) != 0) return errno == ESRCH;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* "pid (comm) S ..." */
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* The peers this rank watches: its neighbours on the ring of ranks. Every
 * rank is watched by two others, whose ABORT tells the rest; watching all
 * P − 1 cost O(P²) heartbeats and /proc reads for the job. */
static unsigned watched(const struct sfb__comm *c, uint32_t out[2])
{
    unsigned n = 0;
    uint32_t next = (c->rank + 1) % c->world, prev = (c->rank + c->world - 1) % c->world;
    if (next != c->rank) out[n++] = next;
    if (prev != c->rank && prev != next) out[n++] = prev;
    return n;
}

/* A watched peer on this host whose process has been gone for a second
 * without saying BYE (a BYE sent just before a normal exit may still be in
 * flight), or -1. Called every heartbeat: a local death is named within
 * ~1.5 s by its neighbours, and by their ABORT to every other rank. */
static int dead_local_peer(struct sfb__comm *c, double now)
{
    if (!c->peer_pid) return -1;
    uint32_t w[2];
    unsigned n = watched(c, w);
    for (unsigned i = 0; i < n; i++) {
        uint32_t p = w[i];
        if (c->said_bye[p] || !pid_gone(c->peer_pid[p])) continue;
        if (!c->gone_since[p]) c->gone_since[p] = now;
        if (now - c->gone_since[p] >= 1.0) return (int)p;
    }
    return -1;
}

/* A fabric error that names no peer (shm reports a dead peer's receive as
 * EIO without an address) is not fatal at once: the peer whose process is
 * gone (all ranks on this host) or the silent one (heartbeats) is named
 * instead; only if none is within the peer timeout does the job fail on
 * the bare error. */
static void check_liveness(struct sfb__comm *c, double now)
{
    int d = dead_local_peer(c, now);
    if (d >= 0 && !atomic_load_explicit(&c->failed, memory_order_acquire))
        atomic_store_explicit(&c->found_here, 1, memory_order_relaxed);
    if (d >= 0)
        fail(c, d, "rank %d died (its process %d is gone)%s%s", d, c->peer_pid[d],
             c->anon_error_at ? "; fabric error " : "", c->anon_error_at ? c->anon_error : "");
    else if (c->anon_error_at && now - c->anon_error_at > c->s.peer_timeout_s)
        fail(c, -1, "fabric error: %s", c->anon_error);
}

static void on_error(void *user, int peer, int code, const char *msg)
{
    struct sfb__comm *c = user;
    if (peer >= 0) {
        fail(c, peer, "rank %d failed: fabric error %s", peer, msg ? msg : sfb_strerror(code));
        return;
    }
    if (!c->anon_error_at) {
        c->anon_error_at = sfb__now();
        snprintf(c->anon_error, sizeof c->anon_error, "%s", msg ? msg : sfb_strerror(code));
        SFB_LOG_D("fabric error naming no peer, looking for the culprit: %s", c->anon_error);
    }
}

/* Loop thread: heartbeats out, silence detection in. Each rank watches only
 * its two neighbours on the ring of ranks (rank ± 1): heartbeat traffic is
 * O(P) for the job instead of O(P²) (at P = 128 on 2 cores, every rank
 * beating to every other was 32k frames a second, and slowed the ranks it
 * was meant to watch), and every rank is still watched by two others. A
 * neighbour that falls silent fails the job here, and this rank's ABORT
 * (found_here) tells every other rank. Any frame counts as heard. */
static void heartbeat(void *arg)
{
    struct sfb__comm *c = arg;
    double now = sfb__now();
    uint32_t w[2];
    unsigned n = watched(c, w);
    /* Peers that talk to this rank hear from it too (a sender waiting for
     * an RMA frame's ACK counts anything heard from its receiver), unless
     * something went to them within the period already. */
    for (uint32_t p = 0; p < c->world; p++)
        if (p != c->rank && !c->said_bye[p] && (c->talks[p] || p == w[0] || (n > 1 && p == w[1])) &&
            now - c->last_sent[p] >= c->s.heartbeat_s)
            sfb__comm_send_control(c, p, SFB_WIRE_HEARTBEAT, NULL, 0, 0.0);
    for (unsigned i = 0; i < n; i++) {
        uint32_t p = w[i];
        if (c->said_bye[p]) continue;
        double silent = now - c->last_heard[p];
        if (silent > c->silence_s && !atomic_load_explicit(&c->failed, memory_order_acquire)) {
            atomic_store_explicit(&c->found_here, 1, memory_order_relaxed);
            fail(c, (int)p, "rank %u is dead or silent: nothing heard for %.1f s (timeout %.1f s)",
                 p, silent, c->silence_s);
        }
    }
    check_liveness(c, now);
}

/* How long a watched peer may be silent. Across hosts: --peer-timeout. With
 * every rank on this host, a rank's death is named by its pid within ~1.5 s
 * (dead_local_peer), so silence alone only means starved: with more ranks
 * than CPUs a rank can wait its turn for seconds, so the timeout grows with
 * the ranks per CPU (128 ranks on 2 CPUs: 64 × 5 s). */
static double silence_timeout(const struct sfb__comm *c, uint32_t here)
{
    double t = c->s.peer_timeout_s;
    if (!c->peer_pid) return t;
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    if (cpus < 1) cpus = 1;
    double per_cpu = (double)here / cpus;
    return per_cpu > 1 ? t * per_cpu : t;
}

static void reset_heard(void *arg)
{
    struct sfb__comm *c = arg;
    double now = sfb__now();
    for (uint32_t p = 0; p < c->world; p++) c->last_heard[p] = now;
}

/* The provider a rank asks for: --provider, else FI_PROVIDER, else "" (the
 * transport then takes shm when every rank is on this host, else tcp). */
static const char *provider_request(const struct sfb__comm *c)
{
    const char *p = c->s.provider;
    if (!p || !*p) p = getenv("FI_PROVIDER");
    return p ? p : "";
}

/* The providers the ranks will use, as the transport resolves what each
 * asked for (nothing: shm when every rank is on this host, else tcp), must
 * agree. all/lens: the host exchange's records (host\0, pid, request). */
static int check_providers(const struct sfb__comm *c, const char *all, const size_t *lens,
                           int all_local)
{
    enum { STRIDE = 256 + 16 };
    char *buf = malloc((size_t)c->world * STRIDE);
    const char **texts = calloc(c->world, sizeof *texts);
    size_t *tlens = calloc(c->world, sizeof *tlens);
    int ret = 0;
    if (!buf || !texts || !tlens) {
        ret = sfb__error(-ENOMEM, "out of memory");
        goto out;
    }
    const char *p = all;
    for (uint32_t r = 0; r < c->world; p += lens[r], r++) {
        size_t h = strnlen(p, lens[r]) + 1 + sizeof(int), n = SFB_MIN(lens[r] - h, 255);
        char *t = buf + (size_t)r * STRIDE;
        tlens[r] = (size_t)snprintf(t, STRIDE, "provider=%.*s\n", n ? (int)n : 3,
                                    n ? p + h : all_local ? "shm" : "tcp");
        texts[r] = t;
    }
    char why[600];
    if (sfb__agree_verdict(texts, tlens, c->world, why, sizeof why))
        ret = sfb__error(-SFB_ECONFIG,
                         "settings differ between ranks: %s (every worker of a job needs the "
                         "same --provider or FI_PROVIDER)",
                         why);
out:
    free(buf);
    free(texts);
    free(tlens);
    return ret;
}

/* Every rank's host name, pid and requested provider: whether all share
 * this host (the shm provider's case), and then the pids, to tell which
 * peer died. The providers are compared here, before the transport would
 * fail on a mismatch with an address error naming nothing. */
static int exchange_hosts(struct sfb__comm *c, int *all_local, uint32_t *here,
                          int *first_on_host)
{
    char mine[600] = {0};
    gethostname(mine, 256);
    size_t hlen = strlen(mine) + 1;
    int pid = (int)getpid();
    memcpy(mine + hlen, &pid, sizeof pid);
    size_t plen = strlen(provider_request(c));
    if (plen > 255) return sfb__error(-SFB_EUSAGE, "provider name of %zu bytes", plen);
    memcpy(mine + hlen + sizeof pid, provider_request(c), plen);
    void *all = NULL;
    size_t *lens = calloc(c->world, sizeof *lens);
    if (!lens) return -ENOMEM;
    int ret = sfb__bootstrap_allgatherv(c->bs, mine, hlen + sizeof pid + plen, &all, lens);
    *all_local = 0;
    *here = 1;
    *first_on_host = 1;
    if (ret == 0) {
        *all_local = 1;
        *here = 0;
        const char *p = all;
        for (uint32_t r = 0; r < c->world && !ret; p += lens[r], r++) {
            size_t h = strnlen(p, lens[r]) + 1;
            if (h + sizeof pid > lens[r])
                ret = sfb__error(-SFB_EFORMAT, "rank %u sent a malformed host record", r);
            else if (h != hlen || memcmp(p, mine, hlen) != 0)
                *all_local = 0;
            else {
                ++*here;
                if (r < c->rank) *first_on_host = 0;
            }
        }
        if (!ret) ret = check_providers(c, all, lens, *all_local);
        c->gone_since = !ret && *all_local ? calloc(c->world, sizeof *c->gone_since) : NULL;
        if (c->gone_since && (c->peer_pid = calloc(c->world, sizeof *c->peer_pid))) {
            p = all;
            for (uint32_t r = 0; r < c->world; p += lens[r], r++)
                memcpy(&c->peer_pid[r], p + hlen, sizeof pid);
        }
    }
    free(all);
    free(lens);
    return ret;
}

static int exchange_names(struct sfb__comm *c)
{
    const void *name;
    size_t len;
    sfb__transport_name(c->t, &name, &len);
    void *all = NULL;
    size_t *lens = calloc(c->world, sizeof *lens);
    const void **names = calloc(c->world, sizeof *names);
    int ret = -ENOMEM;
    if (!lens || !names) goto out;
    if ((ret = sfb__bootstrap_allgatherv(c->bs, name, len, &all, lens))) goto out;
    const uint8_t *p = all;
    for (uint32_t r = 0; r < c->world; r++) {
        names[r] = p;
        p += lens[r];
    }
    ret = sfb__transport_set_peers(c->t, names, lens, c->world);
out:
    free(all);
    free(lens);
    free(names);
    return ret;
}

int sfb__comm_peers_alloc(struct sfb__comm *c)
{
    c->last_clock = -2;
    c->last_heard = calloc(c->world, sizeof *c->last_heard);
    c->said_bye = calloc(c->world, 1);
    c->last_sent = calloc(c->world, sizeof *c->last_sent);
    c->talks = calloc(c->world, 1);
    c->final_clock = calloc(c->world, sizeof *c->final_clock);
    if (!c->last_heard || !c->said_bye || !c->final_clock || !c->last_sent || !c->talks)
        return -ENOMEM;
    for (uint32_t p = 0; p < c->world; p++) atomic_init(&c->final_clock[p], INT64_MAX);
    return 0;
}

int sfb__comm_open(struct sfb__comm **out, const struct sfb__comm_settings *s)
{
    *out = NULL;
    struct sfb__comm *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->s = *s;
    struct sfb__bootstrap_settings bss;
    sfb__bootstrap_default_settings(&bss);
    bss.timeout_s = s->bootstrap_timeout_s;
    bss.connect_timeout_s = s->bootstrap_timeout_s;
    bss.rank = s->rank;
    bss.world = s->world;
    bss.rendezvous = s->rendezvous;
    bss.job_key = s->job_key;
    int ret = sfb__bootstrap_open(&c->bs, &bss);
    if (ret) goto fail;
    sfb__phase_mark(SFB__PH_BOOT);
    c->rank = (uint32_t)sfb__bootstrap_rank(c->bs);
    c->world = (uint32_t)sfb__bootstrap_size(c->bs);
    c->job_key = sfb__bootstrap_job_key(c->bs);
    sfb_log_set_rank((int)c->rank);
    if (s->nshapes > SFB_ARRAY_LEN(c->shapes)) {
        ret = sfb__error(-EINVAL, "comm: %u matrices, at most %zu", s->nshapes,
                         SFB_ARRAY_LEN(c->shapes));
        goto fail;
    }
    if (s->nshapes) memcpy(c->shapes, s->shapes, s->nshapes * sizeof *s->shapes);
    c->job = (struct sfb__wire_job){
        .job_key = c->job_key,
        .world_size = c->world,
        .shapes = c->shapes,
        .nshapes = s->nshapes,
        .max_s = s->max_s,
        .max_payload = (uint64_t)1 << 32,
        .stats = &c->wstats,
    };
    if (c->world == 1) {
        *out = c;
        return 0;
    }

    if ((ret = sfb__comm_peers_alloc(c))) goto fail;
    int all_local = 0, first_on_host = 1;
    uint32_t here = 1;
    if ((ret = exchange_hosts(c, &all_local, &here, &first_on_host))) goto fail;
    sfb__phase_mark(SFB__PH_HOSTS);
    if ((ret = sfb__loop_open(&c->loop))) goto fail;
    struct sfb__transport_settings ts;
    sfb__transport_default_settings(&ts);
    ts.provider = s->provider;
    ts.all_local = all_local;
    ts.skip_shm_sweep = !first_on_host;
    ts.rank = c->rank;
    ts.world = c->world;
    ts.job_key = c->job_key;
    ts.local_ranks = here;
    ts.progress = s->progress;
    ts.on_frame = on_frame;
    ts.on_error = on_error;
    ts.on_sent = sent_hook;
    ts.user = c;
    sfb__clear_error(); /* so `why` below cannot be an older message */
    if ((ret = sfb__transport_open(&c->t, &ts, c->loop))) {
        char why[600]; /* the transport's own message (a provider that is missing, say) */
        snprintf(why, sizeof why, "%s", sfb_error_message(ret));
        sfb__error(ret, "cannot open the libfabric transport (provider %s): %s",
                   s->provider ? s->provider : (getenv("FI_PROVIDER") ? getenv("FI_PROVIDER")
                                                : all_local ? "shm" : "tcp"),
                   why);
        goto fail;
    }
    sfb__phase_mark(SFB__PH_FABRIC);
    c->ops = &sfb__comm_fabric_ops;
    if ((ret = exchange_names(c))) goto fail;
    sfb__phase_mark(SFB__PH_NAMES);
    c->silence_s = silence_timeout(c, here);
    reset_heard(c);
    if ((ret = sfb__loop_start(c->loop))) goto fail;
    /* Everyone's endpoint is up and addressed before the first data frame. */
    if ((ret = sfb__bootstrap_barrier(c->bs))) goto fail;
    sfb__transport_started(c->t);
    sfb__phase_mark(SFB__PH_READY);
    sfb__loop_call(c->loop, reset_heard, c);
    if ((ret = sfb__loop_timer_open(c->loop, &c->hb, s->heartbeat_s, s->heartbeat_s, heartbeat,
                                    c)))
        goto fail;
    SFB_LOG_I("rank %u of %u up (bootstrap %s, provider %s)", c->rank, c->world,
              sfb__bootstrap_kind_name(sfb__bootstrap_kind(c->bs)),
              sfb__transport_provider(c->t));
    *out = c;
    return 0;
fail:
    sfb__comm_close(&c);
    return ret;
}

struct set_shapes {
    struct sfb__comm *c;
    const struct sfb__wire_shape *shapes;
    uint32_t n, max_s;
};

static void set_shapes_in_loop(void *arg)
{
    struct set_shapes *a = arg;
    memcpy(a->c->shapes, a->shapes, a->n * sizeof *a->shapes);
    a->c->job.nshapes = a->n;
    a->c->job.max_s = a->max_s;
}

int sfb__comm_set_shapes(struct sfb__comm *c, const struct sfb__wire_shape *shapes, uint32_t n,
                         uint32_t max_s)
{
    if (n > SFB_ARRAY_LEN(c->shapes))
        return sfb__error(-EINVAL, "comm: %u matrices, at most %zu", n, SFB_ARRAY_LEN(c->shapes));
    struct set_shapes a = {c, shapes, n, max_s};
    if (!c->loop) {
        set_shapes_in_loop(&a);
        return 0;
    }
    int ret = sfb__loop_call(c->loop, set_shapes_in_loop, &a);
    if (!ret) ret = sfb__comm_explain(c, sfb__bootstrap_barrier(c->bs));
    if (!ret) ret = sfb__comm_check(c);
    return ret;
}

struct set_hooks {
    struct sfb__comm *c;
    int (*on_data)(void *user, struct sfb__frame *f, const struct sfb__wire_hdr *h);
    void (*on_sent)(void *user, uint32_t dst, const struct sfb__buf *buf, int failed);
    void *user;
};

static void set_hooks_in_loop(void *arg)
{
    struct set_hooks *a = arg;
    a->c->s.on_data = a->on_data;
    a->c->s.on_sent = a->on_sent;
    a->c->s.user = a->user;
}

int sfb__comm_set_hooks(struct sfb__comm *c,
                        int (*on_data)(void *user, struct sfb__frame *f,
                                       const struct sfb__wire_hdr *h),
                        void (*on_sent)(void *user, uint32_t dst, const struct sfb__buf *buf,
                                        int failed),
                        void *user)
{
    struct set_hooks a = {c, on_data, on_sent, user};
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
    for (uint32_t p = 0; p < c->world; p++)
        if (p != c->rank) sfb__comm_send_control(c, p, SFB_WIRE_ABORT, reason, len, 0.2);
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
    unsigned nw = watched(c, w);
    for (uint32_t p = 0; p < c->world; p++)
        a->to[p] = !a->flagged || c->talks[p] || c->last_sent[p] > 0 || p == w[0] ||
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
    sfb__loop_timer_close(&c->hb);
    sfb__transport_close(&c->t);
    sfb__loop_close(&c->loop);
    sfb__bootstrap_close(&c->bs);
    free(c->last_heard);
    free(c->said_bye);
    free(c->last_sent);
    free(c->talks);
    free(c->final_clock);
    free(c->peer_pid);
    free(c->gone_since);
    free(c);
    *pc = NULL;
}
