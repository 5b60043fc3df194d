/* Local launcher: fork P workers, relay their output line by line with a rank
 * prefix, forward signals, stop everyone when one fails, and leave nothing
 * behind: each rank leads a process group of its own, which the signals go
 * to, and the launcher is a child subreaper while it runs, so descendants
 * that left the group (setsid, a double fork) are reparented to it once
 * their parent dies, and stopped when the ranks are done. */
#include "config.h"
#include "src/launch/launch_internal.h"
#include "src/launch/line_relay.h"
#include "src/launch/proc_sweep.h"
#include "src/launch/rank_env.h"
#include "src/boot/bootstrap.h"
#include "src/transport/transport.h"
#include <sfb/launch.h>
#include "src/base/util.h"
#include "src/base/timeline.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

struct child {
    pid_t pid;
    int alive;
    int label;   /* the rank it prints as (a respawned copy: the one it replaces) */
    int joining; /* started later, into the running job */
    /* a joining copy: the pipe on which it says it joined (SFB_JOINED_FD:
     * the launcher's read end, the child's write end; -1: none), and
     * whether the launcher stopped it because the job ended first */
    int joined_r, joined_w, joined, unjoined;
    struct sfb__line_stream s[2]; /* stdout, stderr */
};

struct spawn;

struct launcher {
    int n;              /* copies started so far (slots of c in use) */
    int world, cap;     /* the job's copies at start; slots (world + respawns) */
    struct child *c;
    const struct spawn *sp;
    struct sfb__line_relay out;
    int failed_rank, failed_status; /* first failure */
    int usage_exit;                 /* some copy exited 2 (a usage error) */
    int stopping, sigs_forwarded, abort_sig, timed_out;
    int sent_sigkill;
    int elastic, finished; /* elastic job; ranks that exited 0 */
    int respawns;          /* copies the launcher may still restart */
    double kill_at;
    double first_exit, last_exit; /* sfb__now() of the first and last reap */
    /* what the ranks left behind (sweep()), and the sweep's deadlines */
    struct sfb__sweep sw;
    double sweep_kill_at, sweep_give_up;
    int swept_left; /* processes seen by the last sweep round */
};

void sfb__launch_default_settings(struct sfb__launch_settings *s)
{
    s->grace_s = 3;
    s->timeout_s = 0;
    const char *el = getenv("SFB_ELASTIC"), *re = getenv("SFB_RESPAWN");
    s->elastic = el && !strcmp(el, "1");
    s->respawn = re ? atoi(re) : 0;
    if (s->respawn < 0 || s->respawn > SFB__LAUNCH_MAX_PROCS) s->respawn = 0;
    s->out_fd = 1;
    s->err_fd = 2;
    s->host = "127.0.0.1";
    s->worker = NULL;
}

int sfb__launch_reserve_port(const char *host, int *fd)
{
    *fd = -1;
    struct in_addr ip;
    if (inet_pton(AF_INET, host, &ip) != 1)
        return sfb__error(-SFB_EUSAGE, "launch: host '%s' is not an IPv4 address", host);
    char addr[64]; /* "host:port", as the elastic join port is reserved */
    int r = sfb__join_reserve(host, fd, addr, sizeof addr);
    return r ? r : atoi(strrchr(addr, ':') + 1);
}

int sfb__launch_self_path(char *buf, size_t len)
{
    if (len < 2) return -ENAMETOOLONG;
    ssize_t n = readlink("/proc/self/exe", buf, len);
    if (n < 0) return sfb__error(-errno, "launch: readlink /proc/self/exe: %s", strerror(errno));
    if ((size_t)n >= len) return sfb__error(-ENAMETOOLONG, "launch: executable path longer than %zu", len - 1);
    buf[n] = 0;
    return 0;
}

/* Every rank's process group: the rank and whatever it started that stayed
 * in its group (children of `sh -c`, `cmd &`). A reaped rank's group may
 * still have members; its id cannot be reused while it has. */
static void signal_all(struct launcher *L, int sig)
{
    if (sig == SIGKILL) L->sent_sigkill = 1;
    for (int i = 0; i < L->n; i++) {
        if (!L->c[i].pid) continue;
        if (kill(-L->c[i].pid, sig) != 0 && L->c[i].alive) kill(L->c[i].pid, sig);
    }
}

/* ---- what the ranks leave behind ---------------------------------------- */

/* Whether pid is a rank still running (the sweep leaves those alone). */
static int live_rank(void *arg, pid_t pid)
{
    const struct launcher *L = arg;
    for (int i = 0; i < L->n; i++)
        if (L->c[i].alive && L->c[i].pid == pid) return 1;
    return 0;
}

/* One round of stopping what the ranks left behind once every rank is
 * reaped: their groups' members (SIGTERM in the first round) and the
 * descendants reparented here get SIGTERM, then SIGKILL once the grace
 * period (from the first round, or from the job's own stop) has passed.
 * Returns how many were seen. */
static int sweep(struct launcher *L, double grace)
{
    double now = sfb__now();
    int first = !L->sweep_give_up;
    if (first) {
        L->sweep_kill_at = L->stopping ? SFB_MAX(L->kill_at, now) : now + grace;
        L->sweep_give_up = L->sweep_kill_at + 5.0;
    }
    int sig = now >= L->sweep_kill_at ? SIGKILL : SIGTERM, left = 0;
    int group_sig = sig == SIGKILL || first ? sig : 0; /* 0: only whether any is left */
    for (int i = 0; i < L->n; i++)
        if (L->c[i].pid && kill(-L->c[i].pid, group_sig) == 0) left++;
    left += sfb__sweep_orphans(&L->sw, sig, live_rank, L);
    L->swept_left = left;
    return left;
}

/* After the event loop: sweeps until nothing is left, within the grace
 * period plus 5 s for processes that ignore SIGKILL's effect for a while
 * (uninterruptible sleep). */
static void sweep_all(struct launcher *L, double grace)
{
    while (sweep(L, grace) && sfb__now() < L->sweep_give_up) sfb__sleep(0.02);
    if (L->swept_left)
        SFB_LOG_W("launch: %d processes started by the ranks did not stop within %.0f s of "
                  "SIGKILL", L->swept_left, 5.0);
}

static void start_stopping(struct launcher *L, double grace)
{
    if (L->stopping) return;
    L->stopping = 1;
    L->kill_at = sfb__now() + grace;
    signal_all(L, SIGTERM);
}

static const char *sig_name(char buf[32], int sig);
static int fork_rank(struct launcher *L, int i, const struct spawn *sp);

/* Elastic: a copy that replaces dead slot i, joining the running job. */
static void respawn(struct launcher *L, int i)
{
    int k = L->n;
    L->c[k].label = L->c[i].label;
    L->c[k].joining = 1;
    L->c[k].s[0].fd = L->c[k].s[1].fd = -1;
    L->respawns--;
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
        SFB_LOG_W("launch: restarting rank %d: pipe: %s", L->c[i].label, strerror(errno));
        return;
    }
    L->c[k].joined_r = p[0];
    L->c[k].joined_w = p[1];
    int r = fork_rank(L, k, L->sp);
    close(p[1]);
    L->c[k].joined_w = -1;
    if (r) {
        SFB_LOG_W("launch: restarting rank %d: %s", L->c[i].label, sfb_last_error());
        close(p[0]);
        L->c[k].joined_r = -1;
        return;
    }
    L->n++;
    SFB_LOG_W("launch: rank %d restarted (pid %d): it joins the running job (%d restart%s "
              "left)", L->c[i].label, (int)L->c[k].pid, L->respawns,
              L->respawns == 1 ? "" : "s");
}

/* A copy exited 0: the job is over (its finish is collective), and a
 * restarted copy that has not said it joined never will: stopped. */
static void stop_unjoined(struct launcher *L)
{
    for (int i = 0; i < L->n; i++) {
        struct child *c = &L->c[i];
        char b;
        if (!c->joined && c->joined_r >= 0 && read(c->joined_r, &b, 1) == 1) c->joined = 1;
        if (!c->alive || !c->joining || c->joined || c->unjoined) continue;
        c->unjoined = 1;
        SFB_LOG_W("launch: the job ended before rank %d's restarted copy (pid %d) joined it: "
                  "stopped", c->label, (int)c->pid);
        if (kill(-c->pid, SIGTERM) != 0) kill(c->pid, SIGTERM);
    }
}

static void reap(struct launcher *L, double grace)
{
    for (int i = 0; i < L->n; i++) {
        struct child *c = &L->c[i];
        int st;
        if (!c->alive) continue;
        pid_t p = waitpid(c->pid, &st, WNOHANG);
        if (p == 0 || (p < 0 && errno == EINTR)) continue;
        c->alive = 0;
        L->last_exit = sfb__now();
        if (!L->first_exit) L->first_exit = L->last_exit;
        if (p < 0) st = 0x7f00; /* cannot happen for our own child; count as a failure */
        if (c->joined_r >= 0) close(c->joined_r);
        c->joined_r = -1;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            L->finished++;
            if (L->elastic) stop_unjoined(L);
            continue;
        }
        if (c->unjoined) continue; /* (stopped above: not a failure of the job) */
        if (L->elastic && !L->stopping) {
            /* the survivors go on without it (or all fail, and say why) */
            char name[32];
            if (WIFSIGNALED(st))
                SFB_LOG_W("launch: rank %d killed by signal %d (%s); the job goes on without it "
                          "(elastic)", i, WTERMSIG(st), sig_name(name, WTERMSIG(st)));
            else
                SFB_LOG_W("launch: rank %d exited with status %d; the job goes on without it "
                          "(elastic)", i, WIFEXITED(st) ? WEXITSTATUS(st) : st);
            if (L->failed_rank < 0) {
                L->failed_rank = i;
                L->failed_status = st;
            }
            if (WIFEXITED(st) && WEXITSTATUS(st) == 2) L->usage_exit = 1;
            else if (L->respawns > 0 && L->n < L->cap && !L->finished) respawn(L, i);
            continue;
        }
        if (WIFEXITED(st) && WEXITSTATUS(st) == 2) L->usage_exit = 1;
        /* Ranks that die after the job started stopping are not the cause,
         * except one killed by a signal nobody here sent: a peer that saw
         * the fabric fail may exit before the killed rank is reaped, and
         * the killed rank is what the user must hear about. */
        int foreign = WIFSIGNALED(st) && !L->sigs_forwarded && WTERMSIG(st) != SIGTERM &&
                      !(WTERMSIG(st) == SIGKILL && L->sent_sigkill);
        if (foreign && L->failed_rank >= 0 && !WIFSIGNALED(L->failed_status)) {
            L->failed_rank = i;
            L->failed_status = st;
        }
        if (L->failed_rank < 0 && !L->stopping) {
            L->failed_rank = i;
            L->failed_status = st;
            start_stopping(L, grace);
        }
    }
}

static int n_alive(const struct launcher *L)
{
    int k = 0;
    for (int i = 0; i < L->n; i++) k += L->c[i].alive;
    return k;
}

/* What every rank's child_exec needs besides its rank. */
struct spawn {
    const struct sfb__launch_settings *s;
    int port, sfd;
    uint64_t key;
    char join[96]; /* elastic: SFB_JOIN for the copies ("" : none) */
    pid_t self;
    char t0[32];
    const sigset_t *oldmask;
    char *const *argv;
    struct sfb__rank_env env;
};

/* In the child between fork and exec: wire stdio, set the rendezvous
 * environment, arrange to die with the launcher, then exec argv or, with
 * s->worker, call it in this copy of the launcher. Never returns. */
static void child_exec(int rank, const struct launcher *L, const struct spawn *sp, const int out[2],
                       const int err[2])
{
    const struct sfb__launch_settings *s = sp->s;
    char v[64];
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != sp->self) _exit(126);
    /* a group of its own, which the launcher signals as a whole (the
     * launcher sets it too, so it holds whichever runs first) */
    setpgid(0, 0);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    if (dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0) _exit(126);
    snprintf(v, sizeof v, "%d", L->c[rank].label);
    setenv("SFB_RANK", v, 1);
    snprintf(v, sizeof v, "%d", L->world);
    setenv("SFB_WORLD_SIZE", v, 1);
    if (sp->join[0]) setenv("SFB_JOIN", sp->join, 1);
    if (L->c[rank].joining) {
        setenv("SFB_JOINING", "1", 1);
        /* the pipe on which it tells the launcher it joined (it survives exec) */
        if (L->c[rank].joined_w >= 0 && fcntl(L->c[rank].joined_w, F_SETFD, 0) == 0) {
            snprintf(v, sizeof v, "%d", L->c[rank].joined_w);
            setenv("SFB_JOINED_FD", v, 1);
        }
    }
    snprintf(v, sizeof v, "%s:%d", s->host, sp->port);
    setenv("SFB_RENDEZVOUS", v, 1);
    snprintf(v, sizeof v, "0x%016" PRIx64, sp->key);
    setenv("SFB_JOB_KEY", v, 1);
    setenv(SFB__LAUNCH_T0_ENV, sp->t0, 1);
    sfb__rank_env_apply(&sp->env, !s->worker);
    if (s->worker) {
        /* No exec closes what the launcher holds: the signalfd and the read
         * ends of the earlier ranks' pipes. */
        close(sp->sfd);
        for (int i = 0; i < rank; i++) {
            for (int k = 0; k < 2; k++)
                if (L->c[i].s[k].fd >= 0) close(L->c[i].s[k].fd);
            if (L->c[i].joined_r >= 0) close(L->c[i].joined_r);
        }
        close(out[0]);
        close(err[0]);
        if (out[1] > 2) close(out[1]);
        if (err[1] > 2) close(err[1]);
        /* ps / pgrep tell the ranks apart (an exec'd worker has its
         * SFB_RANK in /proc/PID/environ; a fork's setenv is not seen there) */
        snprintf(v, sizeof v, "sfb rank %d", L->c[rank].label);
        prctl(PR_SET_NAME, v);
        sigprocmask(SIG_SETMASK, sp->oldmask, NULL);
        int argc = 0;
        while (sp->argv[argc]) argc++;
        exit(s->worker(argc, (char **)sp->argv));
    }
    sigprocmask(SIG_SETMASK, sp->oldmask, NULL);
    execvp(sp->argv[0], sp->argv);
    dprintf(2, "sfb: cannot execute %s: %s\n", sp->argv[0], strerror(errno));
    _exit(127);
}

/* "SIGTERM" (what users type with kill -s), or strsignal's text for a
 * signal without an abbreviation. */
static const char *sig_name(char buf[32], int sig)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev)
        snprintf(buf, 32, "SIG%s", abbrev);
    else
        snprintf(buf, 32, "%s", strsignal(sig));
    return buf;
}

/* What stopped the job of the latest sfb__launch_local (main thread). */
static int stop_signal;
static int failed_exit; /* the first failed copy's exit status, if it exited */

static int describe_failure(const struct launcher *L)
{
    int st = L->failed_status;
    int pid = (int)L->c[L->failed_rank].pid;
    char name[32];
    if (WIFSIGNALED(st))
        return sfb__error(-SFB_EPEER, "rank %d killed by signal %d (%s); pid %d", L->failed_rank,
                          WTERMSIG(st), sig_name(name, WTERMSIG(st)), pid);
    return sfb__error(-SFB_EPEER, "rank %d exited with status %d; pid %d", L->failed_rank,
                      WIFEXITED(st) ? WEXITSTATUS(st) : st, pid);
}

/* Forks rank i with its stdout and stderr piped to the launcher. */
static int fork_rank(struct launcher *L, int i, const struct spawn *sp)
{
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) < 0) return sfb__error(-errno, "launch: pipe: %s", strerror(errno));
    if (pipe2(err, O_CLOEXEC) < 0) {
        int r = sfb__error(-errno, "launch: pipe: %s", strerror(errno));
        close(out[0]);
        close(out[1]);
        return r;
    }
    pid_t pid = fork();
    if (pid == 0) child_exec(i, L, sp, out, err);
    if (pid > 0) setpgid(pid, pid); /* EACCES once it has exec'd: it set it itself */
    close(out[1]);
    close(err[1]);
    if (pid < 0) {
        int r = sfb__error(-errno, "launch: fork of rank %d: %s", i, strerror(errno));
        close(out[0]);
        close(err[0]);
        return r;
    }
    struct child *c = &L->c[i];
    c->pid = pid;
    c->alive = 1;
    c->s[0].fd = out[0];
    c->s[0].out = sp->s->out_fd;
    c->s[1].fd = err[0];
    c->s[1].out = sp->s->err_fd;
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    return 0;
}

/* Reads the signalfd: 1 when a child exited. A forwarded signal is passed
 * on with the grace period; a second one means "now". */
static int take_signals(struct launcher *L, int sfd, double grace)
{
    int chld = 0;
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD) {
            chld = 1; /* reaped by the caller */
            continue;
        }
        if (L->sigs_forwarded++) {
            signal_all(L, SIGKILL);
        } else {
            signal_all(L, (int)si.ssi_signo);
            L->stopping = 1;
            L->kill_at = sfb__now() + grace;
        }
        if (!L->abort_sig) L->abort_sig = (int)si.ssi_signo;
    }
    return chld;
}

/* How long poll may sleep, and whether to stop listening (every child
 * reaped, and a grandchild's pipe drained for a moment). */
static double next_wake(struct launcher *L, const struct sfb__launch_settings *s, double end_at,
                        double *drain_until, int nf, int *done)
{
    double now = sfb__now();
    if (end_at && now >= end_at && !L->stopping) {
        L->timed_out = 1;
        start_stopping(L, s->grace_s);
    }
    if (L->stopping && now >= L->kill_at) {
        signal_all(L, SIGKILL);
        L->kill_at = now + 1.0; /* repeat, without spinning, until reaped */
    }
    *done = 0;
    int left = 0;
    if (!n_alive(L)) {
        /* the ranks are done: so is whatever they started; their output
         * is relayed until their pipes close */
        left = sweep(L, s->grace_s) && now < L->sweep_give_up;
        if (nf == 1 && !left) *done = 1;
        if (!*drain_until) *drain_until = now + 1.0;
        if (now >= *drain_until && !left) *done = 1;
    }
    double wake = left ? 0.02 : 1.0;
    if (L->stopping) wake = SFB_MIN(wake, L->kill_at - now);
    if (end_at) wake = SFB_MIN(wake, end_at - now);
    if (*drain_until) wake = SFB_MIN(wake, *drain_until - now);
    return wake;
}

/* Relays the children's output and signals until every child is reaped.
 * pf[j] (j >= 1) is stream src[j] of its rank: no search per event. */
static int event_loop(struct launcher *L, const struct sfb__launch_settings *s, int sfd,
                      struct pollfd *pf, int *src)
{
    double end_at = s->timeout_s > 0 ? sfb__now() + s->timeout_s : 0, drain_until = 0;
    for (;;) {
        int nf = 0, done;
        pf[nf++] = (struct pollfd){sfd, POLLIN, 0};
        for (int i = 0; i < L->n; i++)
            for (int k = 0; k < 2; k++)
                if (L->c[i].s[k].fd >= 0) {
                    src[nf] = 2 * i + k;
                    pf[nf++] = (struct pollfd){L->c[i].s[k].fd, POLLIN, 0};
                }
        double wake = next_wake(L, s, end_at, &drain_until, nf, &done);
        if (done) return 0;
        int pr = poll(pf, (nfds_t)nf, wake > 0 ? (int)(wake * 1000) + 1 : 0);
        if (pr < 0 && errno != EINTR) {
            int r = sfb__error(-errno, "launch: poll: %s", strerror(errno));
            signal_all(L, SIGKILL);
            while (n_alive(L)) reap(L, 0);
            return r;
        }
        if (pr <= 0) {
            if (L->stopping) reap(L, s->grace_s); /* after a SIGKILL, without SIGCHLD */
            continue;
        }
        int chld = (pf[0].revents & POLLIN) ? take_signals(L, sfd, s->grace_s) : 0;
        for (int j = 1; j < nf; j++)
            if (pf[j].revents)
                sfb__line_read(&L->out, L->c[src[j] / 2].label, &L->c[src[j] / 2].s[src[j] % 2]);
        /* waitpid for each child only when one exited, not on every line */
        if (chld) reap(L, s->grace_s);
    }
}

/* Forks every rank, relays until all are reaped; returns the launcher's
 * own error (0 when only the workers failed). */
static int run_children(struct launcher *L, struct spawn *sp)
{
    int r = 0;
    double t0 = sfb__now();
    snprintf(sp->t0, sizeof sp->t0, "%.6f", t0);
    for (int i = 0; i < L->n && !r; i++) r = fork_rank(L, i, sp);
    if (r) start_stopping(L, sp->s->grace_s);
    double forked = sfb__now();
    struct pollfd *pf = calloc(2 * (size_t)L->cap + 1, sizeof *pf);
    int *src = calloc(2 * (size_t)L->cap + 1, sizeof *src);
    if (pf && src) {
        int er = event_loop(L, sp->s, sp->sfd, pf, src);
        if (!r) r = er;
    } else {
        r = -ENOMEM;
        signal_all(L, SIGKILL);
        for (int i = 0; i < L->n; i++)
            if (L->c[i].alive) {
                while (waitpid(L->c[i].pid, NULL, 0) < 0 && errno == EINTR) {}
                L->c[i].alive = 0;
            }
    }
    free(pf);
    free(src);
    sweep_all(L, sp->s->grace_s); /* (the event loop's error paths did not) */
    if (L->last_exit)
        SFB_LOG_D("launch: %d workers forked in %.3f s; the first exited %.3f s, the last was "
                  "reaped %.3f s after the fork of rank 0 (CLOCK_MONOTONIC %.6f)",
                  L->n, forked - t0, L->first_exit - t0, L->last_exit - t0, L->last_exit);
    for (int i = 0; i < L->n; i++)
        for (int k = 0; k < 2; k++) sfb__line_close(&L->out, L->c[i].label, &L->c[i].s[k]);
    return r;
}

/* The job's outcome once every child is reaped. */
static int outcome(const struct launcher *L, const struct sfb__launch_settings *s, int r)
{
    char name[32];
    /* elastic: ranks that finished it mean the job did, whoever died */
    if (!r && L->failed_rank >= 0 && !(L->elastic && L->finished && !L->usage_exit))
        r = describe_failure(L);
    stop_signal = L->abort_sig; /* also when a worker's failure came first */
    /* a usage error any copy found is the job's (its peers may exit first) */
    failed_exit = L->usage_exit ? 2 : L->failed_rank >= 0 && WIFEXITED(L->failed_status)
                                          ? WEXITSTATUS(L->failed_status) : 0;
    if (!r && L->abort_sig)
        r = sfb__error(-SFB_EABORT, "interrupted by signal %d (%s); workers stopped", L->abort_sig,
                       sig_name(name, L->abort_sig));
    if (!r && L->timed_out)
        r = sfb__error(-SFB_EABORT, "job exceeded its time limit of %.0f s; workers stopped",
                       s->timeout_s);
    return r;
}

/* Drops a SIGCHLD that arrived after the last read so unblocking cannot
 * deliver it to a caller that installed a handler, then restores the mask. */
static void restore_mask(const sigset_t *oldmask)
{
    sigset_t pend, chld;
    struct timespec zero = {0, 0};
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    while (sigpending(&pend) == 0 && sigismember(&pend, SIGCHLD) &&
           sigtimedwait(&chld, NULL, &zero) > 0) {}
    sigprocmask(SIG_SETMASK, oldmask, NULL);
}

int sfb__launch_local(int nprocs, char *const argv[], const struct sfb__launch_settings *s)
{
    struct sfb__launch_settings def;
    stop_signal = failed_exit = 0;
    if (!s) {
        sfb__launch_default_settings(&def);
        s = &def;
    }
    if (nprocs < 1 || nprocs > SFB__LAUNCH_MAX_PROCS)
        return sfb__error(-SFB_EUSAGE, "launch: -n %d: expected 1..%d processes", nprocs, SFB__LAUNCH_MAX_PROCS);
    if (!argv || !argv[0]) return sfb__error(-SFB_EUSAGE, "launch: no worker command");
    struct spawn sp = {.s = s, .oldmask = NULL, .argv = argv, .self = getpid()};
    /* rank 0's rendezvous port, held bound (never listening) for the job:
     * rank 0 binds it beside, and no other socket can take it first */
    int rdv_fd;
    sp.port = sfb__launch_reserve_port(s->host, &rdv_fd);
    if (sp.port < 0) return sp.port;
    /* the caller's key, if it set one (a process joining later needs it) */
    const char *ks = getenv("SFB_JOB_KEY");
    if (ks && *ks && sfb__bootstrap_parse_key(ks, &sp.key)) {
        close(rdv_fd);
        return sfb__error(-SFB_EUSAGE, "launch: SFB_JOB_KEY=\"%s\": %s", ks, sfb_last_error());
    }
    while (sp.key == 0)
        if (getrandom(&sp.key, sizeof sp.key, 0) != (ssize_t)sizeof sp.key)
            sp.key = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
    /* elastic: where the job's rank 0 takes in processes started later (the
     * caller's SFB_JOIN, else a port of this host reserved for the job) */
    int join_fd = -1;
    const char *join = getenv("SFB_JOIN");
    if (s->elastic && join && *join) {
        snprintf(sp.join, sizeof sp.join, "%s", join);
    } else if (s->elastic) {
        int r = sfb__join_reserve(s->host, &join_fd, sp.join, sizeof sp.join);
        if (r) {
            close(rdv_fd);
            return r;
        }
    }

    sfb__rank_env_prepare(&sp.env, nprocs, !s->worker);

    struct launcher L = {0};
    L.n = L.world = nprocs;
    L.elastic = s->elastic;
    L.respawns = s->elastic ? s->respawn : 0;
    L.cap = nprocs + L.respawns;
    L.sp = &sp;
    L.failed_rank = -1;
    L.c = calloc((size_t)L.cap, sizeof *L.c);
    if (!L.c) {
        sfb__rank_env_free(&sp.env);
        if (join_fd >= 0) close(join_fd);
        close(rdv_fd);
        return -ENOMEM;
    }
    for (int i = 0; i < L.cap; i++) {
        L.c[i].s[0].fd = L.c[i].s[1].fd = -1;
        L.c[i].joined_r = L.c[i].joined_w = -1;
        L.c[i].label = i;
    }

    /* SIGCHLD and the forwarded signals are taken through a signalfd, so the
     * loop sees them in order with pipe data and no handler races. */
    sigset_t mask, oldmask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &oldmask);
    sp.oldmask = &oldmask;
    int r, subreaper = 0;
    /* The caller's children from before: not the job's, never touched. Then
     * the ranks' orphaned descendants come here, not to init. */
    sfb__sweep_note_before(&L.sw);
    prctl(PR_GET_CHILD_SUBREAPER, &subreaper);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    sp.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sp.sfd < 0) {
        r = sfb__error(-errno, "launch: signalfd: %s", strerror(errno));
    } else {
        /* nothing buffered here may be written again by a forked worker */
        fflush(NULL);
        r = outcome(&L, s, run_children(&L, &sp));
        close(sp.sfd);
    }
    prctl(PR_SET_CHILD_SUBREAPER, subreaper);
    restore_mask(&oldmask);
    sfb__rank_env_free(&sp.env);
    if (join_fd >= 0) close(join_fd);
    close(rdv_fd);
    for (int i = 0; i < L.cap; i++)
        for (int k = 0; k < 2; k++) sfb__line_stream_free(&L.c[i].s[k]);
    free(L.c);
    sfb__line_relay_free(&L.out);
    sfb__sweep_free(&L.sw);
    return r;
}

int sfb_launch_local(int nprocs, char *const argv[])
{
    SFB_ENTER();
    SFB_ARG(argv);
    SFB_ARG(argv[0]);
    return sfb__launch_local(nprocs, argv, NULL);
}

int sfb_launch_local_fork(int nprocs, int (*worker)(int argc, char **argv), char *const argv[])
{
    SFB_ENTER();
    SFB_ARG(worker);
    SFB_ARG(argv);
    SFB_ARG(argv[0]);
    struct sfb__launch_settings s;
    sfb__launch_default_settings(&s);
    const char *e = getenv("SFB_LAUNCH_EXEC");
    if (!(e && !strcmp(e, "1"))) {
        s.worker = worker;
        /* once here instead of once per worker; one worker opens no
         * transport (libfabric loads on a transport's first use) */
        if (nprocs > 1) sfb__transport_preinit();
    }
    return sfb__launch_local(nprocs, argv, &s);
}

int sfb_launch_failed_exit(void)
{
    return failed_exit;
}

int sfb_launch_stop_signal(void)
{
    return stop_signal;
}

int sfb_launch_self_path(char *buf, size_t len)
{
    SFB_ENTER();
    SFB_ARG(buf);
    return sfb__launch_self_path(buf, len);
}
