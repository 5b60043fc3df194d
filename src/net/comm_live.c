/* Liveness (loop thread): heartbeats out, silence and dead-process checks
 * in, fabric errors that name no peer. Each rank watches its two ring
 * neighbours (docs/design.md, "Liveness"). */
#include "config.h"
#include "src/net/comm_impl.h"
#include "src/base/common.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* A watched peer on this host whose process has been gone for a second
 * without saying BYE (a BYE sent just before a normal exit may still be in
 * flight), or -1. Called every heartbeat: a local death is named within
 * ~1.5 s by its neighbours, and by their ABORT to every other rank. */
static int dead_local_peer(struct sfb__comm *c, double now)
{
    if (!c->peer_pid) return -1;
    uint32_t w[2];
    unsigned n = sfb__comm_watched(c, w);
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
        sfb__comm_fail(c, d, "rank %d died (its process %d is gone)%s%s", d, c->peer_pid[d],
             c->anon_error_at ? "; fabric error " : "", c->anon_error_at ? c->anon_error : "");
    else if (c->anon_error_at && now - c->anon_error_at > c->s.peer_timeout_s)
        sfb__comm_fail(c, -1, "fabric error: %s", c->anon_error);
}

void sfb__comm_on_error(void *user, int peer, int code, const char *msg)
{
    struct sfb__comm *c = user;
    if (peer >= 0) {
        sfb__comm_fail(c, peer, "rank %d failed: fabric error %s", peer, msg ? msg : sfb_strerror(code));
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
void sfb__comm_heartbeat(void *arg)
{
    struct sfb__comm *c = arg;
    double now = sfb__now();
    uint32_t w[2];
    unsigned n = sfb__comm_watched(c, w);
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
            sfb__comm_fail(c, (int)p, "rank %u is dead or silent: nothing heard for %.1f s (timeout %.1f s)",
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
double sfb__comm_silence_timeout(const struct sfb__comm *c, uint32_t here)
{
    double t = c->s.peer_timeout_s;
    if (!c->peer_pid) return t;
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    if (cpus < 1) cpus = 1;
    double per_cpu = (double)here / cpus;
    return per_cpu > 1 ? t * per_cpu : t;
}

void sfb__comm_reset_heard(void *arg)
{
    struct sfb__comm *c = arg;
    double now = sfb__now();
    for (uint32_t p = 0; p < c->world; p++) c->last_heard[p] = now;
}
