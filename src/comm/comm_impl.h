/* The comm context's fields, for src/comm only (and the unit tests that
 * drive the loopback); the engines and the job API go through
 * src/comm/comm.h. The files, each calling only those listed above it:
 *
 *   comm_fail.c      the failure record (c->fail): sfb__comm_fail, _check,
 *                    _explain, _peers_know
 *   comm_send.c      the header every sent frame gets, control frames
 *                    (sfb__comm_header, sfb__comm_send_control)
 *   comm_budget.c    the bandwidth budget (c->budget)
 *   comm_live.c      liveness (c->live): heartbeats, silence, dead
 *                    processes of this host's peers, anonymous fabric errors
 *   comm_stall.c     stalls (c->stall): published clocks, status probes
 *   comm_watch.c     the watchdog of the loop thread's fabric calls
 *   comm.c           defaults, frames in (validation, control, bundles),
 *                    shapes and hooks, finish, abort, close
 *   comm_ops.c       the data path over the transport (an ops table)
 *   comm_open.c      set-up: bootstrap, host and provider exchange, the
 *                    transport, the loop, the heartbeats
 *   comm_loopback.c  the in-process loopback (an ops table; tests, P = 1)
 *   comm_api.c       accessors and the bootstrap collectives
 *   comm_elastic.c   elastic jobs: the survivors' rendezvous addresses, LOST */
#ifndef SFB_SRC_COMM_IMPL_H
#define SFB_SRC_COMM_IMPL_H

#include "src/comm/comm.h"
#include "src/base/util.h"
#include "src/loop/pace.h"

#include <stdatomic.h>
#include <stdint.h>

/* The comm context's fields by concern: each part is owned (written) by the
 * file of its concern; the others read it. */

/* Liveness (comm_live.c; loop thread unless noted): heartbeats, what each
 * peer was last heard of, and the processes of this host's peers. */
struct sfb__comm_live {
    struct sfb__loop_timer *hb;
    double *last_heard;
    double *last_sent;     /* when a send to each peer last completed */
    uint8_t *talks;        /* a peer has sent this rank something other than a heartbeat */
    _Atomic uint8_t *said_bye; /* written by the loop thread, read by the watchdog too */
    _Atomic int bye_sent;      /* this rank is sending its BYEs (compute thread sets it,
                                * sfb__comm_finish): heartbeats to peers that said BYE stop */
    int *peer_pid;         /* every rank on this host: their pids, else NULL */
    int *pidfd;            /* with peer_pid: a pidfd per peer (-1: none; pid checks instead) */
    int deaths_fd;         /* an epoll set of the pidfds, watched by the loop */
    struct sfb__loop_io *deaths;
    double *gone_since;    /* when a peer's process was first seen gone */
    double silence_s;      /* a watched peer silent this long has failed (see heartbeat()) */
    double last_beat;      /* the last heartbeat tick or status answered (sfb__gap) */
    _Atomic int64_t away_us; /* time this rank was found not running (sfb__comm_clock) */
    double anon_error_at;  /* a fabric error naming no peer, not yet blamed */
    char anon_error[256];
};

/* Stalls (comm_stall.c): this rank's newest published clock and when (µs of
 * sfb__now; noted by comm_send.c), what each peer says of its own, and the
 * next probe. */
struct sfb__comm_stall {
    _Atomic int64_t published, published_us;
    _Atomic int64_t *peer_pub, *peer_pub_us;
    _Atomic int64_t *arrived; /* per origin: every update through this clock is here */
    /* per peer: the job's collective call it said it entered (comm_stall.c,
     * sfb__comm_enter_call): the collective's number (0: none), the call,
     * and the clock it had published through */
    _Atomic uint32_t *call_seq, *call_what;
    _Atomic int64_t *call_pub;
    /* per peer: the name its caller gave the call (sfb_job_name_calls), as
     * CALL_LABEL_WORDS words: its length in byte 0, then the bytes; words
     * apart, so a reader may see halves of two names (a message's text) */
    _Atomic uint64_t *call_label;
    /* this rank's call in progress (compute thread writes, the heartbeat
     * reads: `since` last, with release; 0 none), told to the peers once */
    _Atomic int64_t my_since_us, my_pub;
    _Atomic uint32_t my_seq, my_what;
    _Atomic uint64_t my_label[4];
    int64_t my_told_since; /* loop thread: the call told (its since) */
    double next_probe; /* compute thread */
    double last_look, hold_until; /* compute thread: checks that ran late (sfb__gap) */
    int debug_drop_sf; /* SFB_DEBUG_DROP_SF_AT names this rank: it drops every SF
                        * frame and bundle it receives (tests: test/integration/stall.sh) */
};

/* The bandwidth budget (comm_budget.c): paced = 0 without one. */
struct sfb__comm_budget {
    int paced;
    struct sfb__pace pace;
    struct sfb__loop_timer *pace_timer; /* wakes the data hook when the budget has room */
    int pace_armed;                     /* loop thread */
};

/* The failure (comm_fail.c), published to the compute thread. */
struct sfb__comm_failure {
    _Atomic int failing; /* claimed by the first sfb__comm_fail */
    _Atomic int failed;
    _Atomic int found_here; /* a failure found by this rank (a peer's frames), not reported */
    int failed_rank;
    int lost; /* 1 + the rank whose death (or silence) the failure is, else 0 */
    char reason[1024];
};

/* Elastic jobs (comm_elastic.c): every rank's reserved rendezvous
 * address (world × SFB__COMM_ADDR_LEN bytes, NUL-terminated; NULL when not
 * elastic) and this rank's reservation. */
#define SFB__COMM_ADDR_LEN 64
struct sfb__comm_elastic {
    char *addrs;
    int fd;
};

/* The context itself: set up by comm_open.c, frames and finish in comm.c. */
struct sfb__comm {
    uint32_t rank, world;
    uint64_t job_key;
    struct sfb__bootstrap *bs;
    struct sfb__loop *loop;
    struct sfb__transport *t; /* NULL when world == 1 */
    const struct sfb__comm_ops *ops; /* how frames move (below); NULL when world == 1 */
    void *impl;                      /* the ops' own state (the loopback's rank) */
    struct sfb__wire_job job;
    struct sfb__wire_stats wstats;
    struct sfb__wire_shape *shapes; /* job.nshapes of them (malloc'd: sfb__comm_copy_shapes) */
    struct sfb__comm_settings s;
    _Atomic int64_t *final_clock; /* a peer's last clock (BYE or last-clock flag; INT64_MAX: running) */
    int64_t last_clock;    /* this rank's last clock if known ahead (sfb__comm_set_last_clock), else -2 */
    uint32_t local_ranks;  /* ranks of the job on this host, this one included */
    unsigned cpus;         /* CPUs this process could use before bind_cpu (comm_open.c) */
    uint32_t *host_of;     /* per rank: the lowest rank on its host (NULL: one host) */
    struct sfb__comm_live live;
    struct sfb__comm_stall stall;
    struct sfb__comm_watch *watch; /* the watchdog (comm_watch.c) */
    struct sfb__comm_budget budget;
    struct sfb__comm_failure fail;
    struct sfb__comm_elastic elastic;
};

/* Records the first failure; later ones are logged only (comm_fail.c).
 * Any thread. */
void sfb__comm_fail(struct sfb__comm *c, int rank, const char *fmt, ...) SFB_PRINTF(3, 4);
/* The same for a failure that is rank `rank`'s death or silence (found
 * here, or a peer's LOST): what sfb__comm_lost reports. */
void sfb__comm_fail_lost(struct sfb__comm *c, int rank, const char *fmt, ...) SFB_PRINTF(3, 4);
/* The transport's hooks (loop thread): every received frame, a completed
 * send, a fabric error. */
int sfb__comm_on_frame(void *user, struct sfb__frame *f);
void sfb__comm_sent_hook(void *user, uint32_t dst, const struct sfb__buf *buf, int failed);
void sfb__comm_pass_hook(void *user);
void sfb__comm_on_error(void *user, int peer, int code, const char *msg);
/* c->shapes = a malloc'd copy of shapes[0 .. n) (the old array freed),
 * c->job's table pointing at it. Before the loop runs, or in it. 0 or
 * -ENOMEM. */
int sfb__comm_copy_shapes(struct sfb__comm *c, const struct sfb__wire_shape *shapes, uint32_t n);
/* The budget's set-up (after the loop started) and release. */
int sfb__comm_budget_open(struct sfb__comm *c);
void sfb__comm_budget_close(struct sfb__comm *c);
/* The ring neighbours this rank watches (1 or 2 of them). */
unsigned sfb__comm_watched(const struct sfb__comm *c, uint32_t out[2]);
/* The heartbeat timer's callback, the silence timeout for `here` ranks on
 * this host, and "heard from everyone now" (loop thread, or before it runs). */
void sfb__comm_heartbeat(void *arg);
/* How late a periodic check of liveness runs before it counts as not
 * having run (sfb__gap): max(2 s, a quarter of the silence timeout). */
static inline double sfb__comm_gap_slack(const struct sfb__comm *c)
{
    return SFB_MAX(2.0, c->live.silence_s / 4);
}
/* Loop thread, at least every heartbeat: a run seconds after the last one
 * means this rank was not running (stopped and continued): the time is
 * added to away_us and every peer's silence counts from now. */
void sfb__comm_awake(struct sfb__comm *c, double now);
/* This rank's clock for liveness and stalls (any thread): sfb__now() less
 * the time it was found not running, so that a job stopped and continued
 * (Ctrl-Z and fg, a debugger, Slurm's suspend, a paused VM) blames no one
 * for the stop. */
static inline double sfb__comm_clock(const struct sfb__comm *c)
{
    return sfb__now() -
           1e-6 * (double)atomic_load_explicit(&c->live.away_us, memory_order_relaxed);
}
/* Stalls (comm_stall.c): take a status heartbeat's payload (loop thread),
 * and the wait's check (compute thread). This rank's own published clock is
 * noted as its SF frames get their headers (comm_send.c). */
void sfb__comm_on_status(struct sfb__comm *c, uint32_t src, const uint8_t *payload, size_t len);
/* Loop thread (the heartbeat): tells the peers of this rank's call in
 * progress once it has lasted CALL_TELL_S. */
void sfb__comm_tell_call(struct sfb__comm *c, double now);
/* A peer in a collective call this rank has not entered, short of the
 * clock this wait needs from it: -SFB_EPEER naming both (comm_stall.c). */
int sfb__comm_check_calls(struct sfb__comm *c, int64_t required);
int sfb__comm_check_stall(struct sfb__comm *c, int64_t required, double since,
                          const struct sfb__ssp *ssp);
double sfb__comm_silence_timeout(const struct sfb__comm *c, uint32_t here);
void sfb__comm_reset_heard(void *arg);
/* Same-host peers' processes (comm_live.c): pidfds opened at set-up when
 * there is room for them (else pid checks) and watched by the loop (their
 * deaths start the peers' grace, see check_liveness()), whether a peer's
 * process is gone (any thread: a poll or a pid check), and the transport's
 * peer_gone hook (loop thread: a death already seen). */
void sfb__comm_open_pidfds(struct sfb__comm *c);
int sfb__comm_watch_deaths(struct sfb__comm *c);
void sfb__comm_close_pidfds(struct sfb__comm *c);
int sfb__comm_pid_gone(const struct sfb__comm *c, uint32_t p);
int sfb__comm_peer_gone(void *user, uint32_t p);
/* ", also gone: rank a, rank b" for the other peers of this host whose
 * processes are gone without a BYE (any thread), or "". */
void sfb__comm_also_gone(const struct sfb__comm *c, int except, char *out, size_t n);
/* Elastic jobs (comm_elastic.c): reserve this rank's rendezvous port and
 * allgather every rank's address (set-up, after the hosts' exchange); free
 * them (close). */
int sfb__comm_elastic_open(struct sfb__comm *c);
void sfb__comm_elastic_close(struct sfb__comm *c);
/* The watchdog of the loop thread's fabric calls (comm_watch.c): started
 * with the heartbeats, stopped first at close. */
int sfb__comm_watch_start(struct sfb__comm *c);
void sfb__comm_watch_stop(struct sfb__comm *c);

#endif
