/* Liveness (loop thread): heartbeats out, silence and dead-process checks
 * in, fabric errors that name no peer. Each rank watches its two ring
 * neighbours (docs/robustness.md, "Liveness: dead, silent and finished peers"). */
#include "config.h"
#include "src/comm/comm_impl.h"
#include "src/base/fdlimit.h"
#include "src/base/util.h"
#include "src/loop/loop.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

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

/* A pidfd per peer of this host: readable once the process has ended
 * (zombie or reaped). All of them sit in one epoll set that the loop
 * watches (on_deaths), so a death is known at the loop's next turn and
 * sfb__comm_peer_gone, asked before every send, is a memory read (a poll()
 * per send cost 6 ms a clock at P = 64 on 2 cores). Only where the
 * descriptors fit well within the limit (they are P − 1 per process);
 * elsewhere the heartbeat's pid checks of the watched peers. */
void sfb__comm_open_pidfds(struct sfb__comm *c)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < sfb__fd_limit_want(c->world))
        return;
    if (!(c->live.pidfd = malloc(c->world * sizeof *c->live.pidfd))) return;
    c->live.deaths_fd = epoll_create1(EPOLL_CLOEXEC);
    for (uint32_t p = 0; p < c->world; p++) {
        c->live.pidfd[p] = p == c->rank ? -1 : (int)syscall(SYS_pidfd_open, c->live.peer_pid[p], 0);
        struct epoll_event e = {.events = EPOLLIN, .data.u32 = p};
        if (c->live.pidfd[p] >= 0 && c->live.deaths_fd >= 0)
            epoll_ctl(c->live.deaths_fd, EPOLL_CTL_ADD, c->live.pidfd[p], &e);
    }
}

/* Loop thread: peers whose processes ended enter their grace period
 * (check_liveness) and get nothing more posted (sfb__comm_peer_gone). */
static void on_deaths(void *arg)
{
    struct sfb__comm *c = arg;
    struct epoll_event e[16];
    int n = epoll_wait(c->live.deaths_fd, e, 16, 0);
    double now = sfb__now();
    for (int i = 0; i < n; i++) {
        uint32_t p = e[i].data.u32;
        if (!c->live.gone_since[p]) c->live.gone_since[p] = now;
        epoll_ctl(c->live.deaths_fd, EPOLL_CTL_DEL, c->live.pidfd[p], NULL);
    }
}

int sfb__comm_watch_deaths(struct sfb__comm *c)
{
    if (!c->live.pidfd || c->live.deaths_fd < 0) return 0;
    return sfb__loop_io_open(c->loop, &c->live.deaths, c->live.deaths_fd, on_deaths, c);
}

/* After the loop watcher is closed (sfb__comm_close). */
void sfb__comm_close_pidfds(struct sfb__comm *c)
{
    if (!c->live.pidfd) return;
    for (uint32_t p = 0; p < c->world; p++)
        if (c->live.pidfd[p] >= 0) close(c->live.pidfd[p]);
    if (c->live.deaths_fd >= 0) close(c->live.deaths_fd);
    free(c->live.pidfd);
    c->live.pidfd = NULL;
}

int sfb__comm_pid_gone(const struct sfb__comm *c, uint32_t p)
{
    if (!c->live.peer_pid || p == c->rank) return 0;
    if (c->live.pidfd && c->live.pidfd[p] >= 0) {
        struct pollfd q = {.fd = c->live.pidfd[p], .events = POLLIN};
        return poll(&q, 1, 0) > 0;
    }
    return pid_gone(c->live.peer_pid[p]);
}

int sfb__comm_peer_gone(void *user, uint32_t p)
{
    const struct sfb__comm *c = user;
    return p < c->world && c->live.gone_since[p] != 0;
}

void sfb__comm_also_gone(const struct sfb__comm *c, int except, char *out, size_t n)
{
    size_t k = 0;
    out[0] = '\0';
    for (uint32_t p = 0; c->live.peer_pid && p < c->world && k + 16 < n; p++)
        if ((int)p != except && !c->live.said_bye[p] && sfb__comm_pid_gone(c, p))
            k += (size_t)snprintf(out + k, n - k, "%s rank %u", k ? "," : "; also gone:", p);
}

/* The peers this rank watches: its neighbours on the ring of ranks. Every
 * rank is watched by two others, whose ABORT tells the rest; watching all
 * P − 1 cost O(P²) heartbeats and /proc reads for the job. */
unsigned sfb__comm_watched(const struct sfb__comm *c, uint32_t out[2])
{
    unsigned n = 0;
    uint32_t next = (c->rank + 1) % c->world, prev = (c->rank + c->world - 1) % c->world;
    if (next != c->rank) out[n++] = next;
    if (prev != c->rank && prev != next) out[n++] = prev;
    return n;
}

/* Whether peer p's process has been gone for a second without saying BYE
 * (a BYE sent just before a normal exit may still be in flight). */
static int dead_for_good(struct sfb__comm *c, uint32_t p, double now)
{
    if (c->live.said_bye[p] || !sfb__comm_pid_gone(c, p)) return 0;
    if (!c->live.gone_since[p]) c->live.gone_since[p] = now;
    return now - c->live.gone_since[p] >= 1.0;
}

/* A peer of this host dead for good, or -1: the watched ones (checked
 * every heartbeat), and any whose death the loop saw (on_deaths). A
 * local death is named within ~1.5 s by its neighbours, and by their ABORT
 * to every other rank. */
static int dead_local_peer(struct sfb__comm *c, double now)
{
    if (!c->live.peer_pid) return -1;
    uint32_t w[2];
    unsigned n = sfb__comm_watched(c, w);
    for (unsigned i = 0; i < n; i++)
        if (dead_for_good(c, w[i], now)) return (int)w[i];
    for (uint32_t p = 0; p < c->world; p++)
        if (c->live.gone_since[p] && dead_for_good(c, p, now)) return (int)p;
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
    if (d >= 0 && !atomic_load_explicit(&c->fail.failed, memory_order_acquire))
        atomic_store_explicit(&c->fail.found_here, 1, memory_order_relaxed);
    if (d >= 0) {
        char also[160];
        sfb__comm_also_gone(c, d, also, sizeof also);
        sfb__comm_fail_lost(c, d, "rank %d died (its process %d is gone)%s%s%s", d, c->live.peer_pid[d],
                       also, c->live.anon_error_at ? "; fabric error: " : "",
                       c->live.anon_error_at ? c->live.anon_error : "");
    } else if (c->live.anon_error_at && now - c->live.anon_error_at > c->s.peer_timeout_s)
        sfb__comm_fail(c, -1, "fabric error: %s", c->live.anon_error);
}

void sfb__comm_on_error(void *user, int peer, int code, const char *msg)
{
    struct sfb__comm *c = user;
    if (peer >= 0) {
        sfb__comm_fail_lost(c, peer, "rank %d failed: fabric error: %s", peer, msg ? msg : sfb_strerror(code));
        return;
    }
    if (!c->live.anon_error_at) {
        c->live.anon_error_at = sfb__now();
        snprintf(c->live.anon_error, sizeof c->live.anon_error, "%s",
                 msg ? msg : sfb_strerror(code));
        SFB_LOG_D("fabric error naming no peer, looking for the culprit: %s", c->live.anon_error);
    }
}

void sfb__comm_awake(struct sfb__comm *c, double now)
{
    /* this rank did not run (the job stopped and continued, every rank
     * with it or this one alone), and heard nothing meanwhile through no
     * fault of its peers */
    double away = sfb__gap(&c->live.last_beat, now, sfb__comm_gap_slack(c));
    if (!(away > 0)) return;
    atomic_fetch_add_explicit(&c->live.away_us, (int64_t)(away * 1e6), memory_order_relaxed);
    SFB_LOG_I("rank %u did not run for %.1f s (stopped and continued?): its peers' silence "
              "counts from now", c->rank, away);
    sfb__comm_reset_heard(c);
}

/* Loop thread: heartbeats out, silence detection in. Each rank watches only
 * its two neighbours on the ring of ranks (rank ± 1): heartbeat traffic is
 * O(P) for the job instead of O(P²) (at P = 128 on 2 cores, every rank
 * beating to every other was 32k frames a second, and slowed the ranks it
 * was meant to watch), and every rank is still watched by two others. A
 * neighbour that falls silent fails the job here, and this rank's ABORT
 * (found_here) tells every other rank. Any frame counts as heard. */
void sfb__comm_heartbeat(void *arg)
{
    struct sfb__comm *c = arg;
    double now = sfb__now();
    sfb__comm_awake(c, now);
    uint32_t w[2];
    unsigned n = sfb__comm_watched(c, w);
    /* Peers that talk to this rank hear from it too (a sender waiting for
     * an RMA frame's ACK counts anything heard from its receiver), unless
     * something went to them within the period already. A peer that said
     * BYE still watches this rank, from the final barrier, until this
     * rank's BYE: it hears from it until then (it cannot leave the barrier
     * before this rank enters it, after its BYEs). */
    int bye_sent = atomic_load_explicit(&c->live.bye_sent, memory_order_acquire);
    for (uint32_t p = 0; p < c->world; p++)
        if (p != c->rank && (!c->live.said_bye[p] || !bye_sent) &&
            (c->live.talks[p] || p == w[0] || (n > 1 && p == w[1])) &&
            now - c->live.last_sent[p] >= c->s.heartbeat_s)
            sfb__comm_send_control(c, p, SFB_WIRE_HEARTBEAT, NULL, 0, 0.0);
    for (unsigned i = 0; i < n; i++) {
        uint32_t p = w[i];
        if (c->live.said_bye[p]) continue;
        double silent = now - c->live.last_heard[p];
        if (silent > c->live.silence_s &&
            !atomic_load_explicit(&c->fail.failed, memory_order_acquire)) {
            atomic_store_explicit(&c->fail.found_here, 1, memory_order_relaxed);
            sfb__comm_fail_lost(c, (int)p,
                           "rank %u is dead or silent: nothing heard for %.1f s (timeout %.1f s)",
                           p, silent, c->live.silence_s);
        }
    }
    check_liveness(c, now);
}

/* How long a watched peer may be silent. Across hosts: --peer-timeout. With
 * every rank on this host, a rank's death is named by its pid within ~1.5 s
 * (dead_local_peer), so silence alone only means starved: with more ranks
 * than CPUs a rank can wait its turn for seconds, so the timeout grows with
 * the ranks per CPU (128 ranks on 2 CPUs: 64 × 5 s). */
double sfb__comm_silence_timeout(const struct sfb__comm *c, uint32_t here)
{
    double t = c->s.peer_timeout_s;
    if (!c->live.peer_pid) return t;
    double per_cpu = (double)here / (c->cpus ? c->cpus : 1);
    return per_cpu > 1 ? t * per_cpu : t;
}

void sfb__comm_reset_heard(void *arg)
{
    struct sfb__comm *c = arg;
    double now = sfb__now();
    for (uint32_t p = 0; p < c->world; p++)
        c->live.last_heard[p] = now;
}
