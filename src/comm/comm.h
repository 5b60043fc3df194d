/* A worker's communication context: bootstrap → event loop → transport →
 * address exchange, plus peer liveness (heartbeats, BYE, ABORT) and the
 * job's frame validation. The sync engines (sfb/) send and receive SF and
 * DENSE_ROWS frames through it.
 *
 * Threads: open/close/finish/abort and the send helpers are called by the
 * compute thread; frame dispatch, heartbeats and failure detection run in the
 * loop thread. A peer failure is reported to the compute thread through
 * sfb__comm_check(), which every blocking wait of an engine calls. */
#ifndef SFB_SRC_COMM_H
#define SFB_SRC_COMM_H

#include "src/transport/frame.h"
#include "src/wire/wire.h"

#include <stdint.h>

struct sfb__bootstrap;
struct sfb__loop;
struct sfb__loop_timer;

/* Where a rank's threads run: auto (cpu when its host runs more ranks than
 * the process may use CPUs), none (the OS's or the launcher's placement),
 * cpu (one CPU of the allowed ones, round robin over the host's ranks). */
enum sfb__cpu_bind { SFB__CPU_BIND_AUTO, SFB__CPU_BIND_NONE, SFB__CPU_BIND_CPU };

struct sfb__comm_settings {
    const char *provider;      /* NULL: FI_PROVIDER, else shm when all ranks share a host */
    double heartbeat_s;        /* heartbeat period (default 0.5 s) */
    double peer_timeout_s;     /* a peer silent this long has failed (default 5 s) */
    /* A wait fails when a peer's update, published this long ago, has not
     * arrived (comm_stall.c; default 300 s; 0: never). */
    double stall_timeout_s;
    double bootstrap_timeout_s; /* rendezvous and barriers (default 60 s) */
    /* Explicit rendezvous (world > 0) instead of PMIx or the SFB_* variables;
     * see sfb__bootstrap_settings. Default world 0. */
    int rank, world;
    const char *rendezvous, *job_key;
    enum sfb__progress progress; /* how the loop thread waits (default auto) */
    enum sfb__cpu_bind cpu_bind; /* where the threads run (default auto; comm_open.c) */
    /* Egress budget of this worker's data messages in bytes/s (0, the
     * default: none); see sfb__comm_budget_wait. */
    double bandwidth;
    /* An elastic job: a peer's death is logged as a warning (the survivors
     * go on, sfb_job_shrink), and a reserved rendezvous port is kept
     * (comm_open.c). Default 0. */
    int elastic;
    /* Frame validation: allowed (K, D) per matrix id and the largest S. */
    const struct sfb__wire_shape *shapes;
    uint32_t nshapes;
    uint32_t max_s;
    /* Loop thread: offered every valid data frame (SF, BUNDLE, DENSE_ROWS)
     * before it goes to the inbox; return 1 to take it (and its buffer
     * reference). NULL: every data frame goes to the inbox. */
    int (*on_data)(void *user, struct sfb__frame *f, const struct sfb__wire_hdr *h);
    /* Loop thread: a send to dst completed (see sfb__transport_settings). */
    void (*on_sent)(void *user, uint32_t dst, const struct sfb__buf *buf, int failed);
    /* Loop thread: the frames one pass over the completion queue delivered
     * have all been offered to on_data; what they queued may leave now as
     * one message per destination (a relay coalesces its forwards here).
     * Called after every pass that completed anything. NULL: not called. */
    void (*on_pass)(void *user);
    void *user;
};

/* The data hooks of the settings, installed after open. */
struct sfb__comm_hooks {
    int (*on_data)(void *user, struct sfb__frame *f, const struct sfb__wire_hdr *h);
    void (*on_sent)(void *user, uint32_t dst, const struct sfb__buf *buf, int failed);
    void (*on_pass)(void *user);
    void *user;
};

struct sfb__comm_ops;

/* Opaque: its fields are the network layer's (src/comm/comm_impl.h). */
struct sfb__comm;

void sfb__comm_default_settings(struct sfb__comm_settings *s);

/* Allocates the per-peer state (liveness, final clocks) of a comm whose
 * rank and world are set; comm_close frees it. sfb__comm_open and the
 * loopback (comm_loopback.c) both use it. */
int sfb__comm_peers_alloc(struct sfb__comm *c);

/* Bootstraps (PMIx, env rendezvous or single process), and for world > 1
 * opens the loop and transport, exchanges endpoint names and starts the
 * heartbeats. Returns 0 or a negative code with the detail recorded; on
 * failure *out is NULL and everything is released. Compute thread. */
int sfb__comm_open(struct sfb__comm **out, const struct sfb__comm_settings *s);

/* Sets the shapes data frames are validated against (in the loop thread),
 * then waits in a barrier so that no rank sends a data frame before every
 * rank can check it. Compute thread, once, before the first data frame. */
int sfb__comm_set_shapes(struct sfb__comm *c, const struct sfb__wire_shape *shapes, uint32_t n,
                         uint32_t max_s);

/* Installs (or, with NULL, removes) the data hooks of the settings after
 * open: the engine opens after comm. Runs in the loop thread via
 * sfb__loop_call, so once it returns no old hook is running or will run.
 * Compute thread. */
int sfb__comm_set_hooks(struct sfb__comm *c, const struct sfb__comm_hooks *h);

/* Frames rejected by the wire checks so far. */
uint64_t sfb__comm_rejected(const struct sfb__comm *c);
/* Of which rejected for `reason` (src/wire/wire.h). Any thread. */
uint64_t sfb__comm_rejected_for(const struct sfb__comm *c, enum sfb__wire_reason reason);

/* 0 while every peer is alive; -SFB_EPEER naming the failed rank (or the
 * ABORT reason a peer sent) once one is not. Any thread. */
int sfb__comm_check(struct sfb__comm *c);

/* For a collective (bootstrap barrier or allgather) that returned ret:
 * when it failed because a peer left, that peer's reason (its ABORT, or its
 * death), waiting up to 1 s for it to arrive; else ret with its message.
 * Compute thread. */
int sfb__comm_explain(struct sfb__comm *c, int ret);

/* An update that passed the wire checks but that no replica may apply (its
 * payload holds a NaN or an infinity, or is otherwise malformed): its
 * origin published something wrong, so the job fails naming the origin,
 * its clock and `why` (the failure is found here: as for a frame of
 * another shape, the peers learn it by this rank's ABORT). `from` is the
 * rank it came from (a relay, or the origin). Compute or loop thread. */
void sfb__comm_reject_update(struct sfb__comm *c, uint32_t origin, uint32_t from, int64_t clock,
                             uint32_t matrix, const char *why);

/* Elastic jobs (settings.elastic): the rank whose death or silence failed
 * the job, found here (liveness, a fabric error naming it) or told by a
 * peer's LOST; -1 while healthy or when the failure is of another kind.
 * Any thread. */
int sfb__comm_lost(struct sfb__comm *c);
/* Tells every peer but `lost` that `lost` is dead (a LOST frame each, so
 * that ranks that do not watch it go on without it too) and waits briefly
 * for the sends. Compute thread. */
void sfb__comm_tell_lost(struct sfb__comm *c, uint32_t lost);
/* Elastic jobs: the "host:port" where rank r would serve a rendezvous of
 * the survivors (NULL when not elastic), and this rank's reservation of
 * that port, handed over (the caller closes it once its rendezvous is
 * bound; -1 when not elastic). */
const char *sfb__comm_elastic_addr(const struct sfb__comm *c, uint32_t r);
int sfb__comm_take_reservation(struct sfb__comm *c);

/* 1 when the job failed because of a peer and the peers know it (its ABORT,
 * its death or silence); 0 while healthy or when the failure was found here
 * (a peer's frames this rank cannot apply: the peer must be told with
 * sfb__comm_abort). Any thread. */
int sfb__comm_peers_know(struct sfb__comm *c);

/* sfb__comm_check for a wait that needs every peer's updates through clock
 * `required`: also -SFB_EPEER at once when a peer has finished (said BYE)
 * at a clock below it, naming the peer, its last clock and the clock this
 * rank waits for. With `ssp` (the clocks applied here), a wait that began
 * at `since` also asks the peers it waits for what they have published,
 * and fails when one published an update stall_timeout_s ago that has not
 * arrived (comm_stall.c). Engines call it in every blocking wait. Compute
 * thread. */
struct sfb__ssp;
/* The stall check's record of what has arrived from `origin`: every update
 * of its clocks <= `through` is here, applied or held (an ordered engine
 * holds a complete update until every rank's of the clock has come; such
 * an update is not in transit). Engines call it as updates complete. */
void sfb__comm_stall_arrived(struct sfb__comm *c, uint32_t origin, int64_t through);
int sfb__comm_check_wait(struct sfb__comm *c, int64_t required, double since,
                         const struct sfb__ssp *ssp);

/* Sends a header-only or small control frame (HEARTBEAT, BYE, ABORT) to dst.
 * Returns as sfb__transport_send. */
int sfb__comm_send_control(struct sfb__comm *c, uint32_t dst, enum sfb__wire_type type,
                           const void *payload, size_t len, double timeout_s);

/* Encodes the header of a frame of this job (origin, sender = this rank
 * unless given) into hdr[SFB_WIRE_HDR_SIZE]. This rank's own SF and
 * DENSE_ROWS frames of its last clock (sfb__comm_set_last_clock) get the
 * last-clock flag, so every rank that gets them, relayed or not, learns
 * this rank's final clock without a BYE of its own; its own SF frames
 * also mark their clock published (the stall check's). */
int sfb__comm_header(struct sfb__comm *c, struct sfb__wire_hdr *h,
                     const struct sfb__wire_piece *pieces, size_t npieces,
                     uint8_t hdr[SFB_WIRE_HDR_SIZE]);
/* The same header, its checksum fed as the payload is produced
 * (struct sfb__wire_hash): begin here, feed with sfb__wire_hash_update,
 * end with sfb__wire_encode_hashed(h, s, hdr). */
int sfb__comm_header_begin(struct sfb__comm *c, struct sfb__wire_hdr *h,
                           struct sfb__wire_hash *s);

/* Best effort: tells every peer the job is aborted (ABORT frame with the
 * reason) and waits briefly for the sends. Compute thread. */
void sfb__comm_abort(struct sfb__comm *c, const char *reason);

/* Orderly end: flushes sends, says BYE carrying `last` (this rank's last
 * clock, −1 for none: peers waiting for a later one fail at once) and waits
 * in a barrier until every rank got here (so no rank closes while another
 * still needs its frames). Returns 0 or a negative code (a peer's failure
 * reason before a broken barrier's). Compute thread. */
int sfb__comm_finish(struct sfb__comm *c, int64_t last);

/* Tells comm this rank's last clock before its frames are sent (compute
 * thread, before the first frame of that clock). comm_finish with the same
 * `last` then says BYE only to the peers this rank talked with and its ring
 * neighbours: the others learned the final clock from the flagged frames,
 * and a BYE to every peer would open O(P²) connections (shm maps a region
 * per peer) at the end of an overlay run. */
void sfb__comm_set_last_clock(struct sfb__comm *c, int64_t last);

/* ---- the bandwidth budget (settings.bandwidth; src/loop/pace.h) ----
 * Every data message through sfb__comm_send is charged to it (the frame's
 * bytes, as the transport counts them); heartbeats and control frames are
 * not. A sender asks first: */
/* 0 when a data message may leave now (always without a budget), else the
 * seconds until one may. wake (loop thread only): then also call the
 * on_sent hook once with dst == SFB__COMM_BUDGET_DST and buf NULL when the
 * budget has room again. Any thread. */
#define SFB__COMM_BUDGET_DST UINT32_MAX
double sfb__comm_budget_wait(struct sfb__comm *c, int wake);
/* The budget in bytes/s (0: none), and the seconds so far that it held
 * this worker's data messages back (from a refusal to the next send). */
double sfb__comm_budget_rate(const struct sfb__comm *c);
double sfb__comm_budget_held_s(struct sfb__comm *c);

/* Stops heartbeats, closes transport, loop and bootstrap. NULL is a no-op. */
void sfb__comm_close(struct sfb__comm **c);

/* ---- the data path the engines use (dispatch: src/comm/comm_ops.c) ----
 * One ops table per way of moving frames: the libfabric transport (opened by
 * sfb__comm_open) and the in-process loopback of several ranks in one
 * process (src/comm/comm_loopback.h, for unit tests). Each entry behaves as the
 * transport function of the same name (src/transport/transport.h); `call` runs fn
 * where the comm's hooks run (the loop thread) and returns once it has run;
 * `post` queues it there and returns at once (in order with calls made or
 * posted before; drop(arg) instead if it will never run: sfb__loop_post);
 * `barrier` returns once every rank of the job has entered it. */
struct sfb__comm_ops {
    int (*buf_get)(struct sfb__comm *c, size_t size, struct sfb__buf **out);
    int (*send)(struct sfb__comm *c, uint32_t dst, const void *hdr, size_t hdr_len,
                struct sfb__buf *buf, size_t off, size_t len, double timeout_s);
    int (*recv)(struct sfb__comm *c, struct sfb__frame *out, double timeout_s, uint32_t units);
    int (*call)(struct sfb__comm *c, void (*fn)(void *), void *arg);
    int (*post)(struct sfb__comm *c, void (*fn)(void *), void (*drop)(void *), void *arg);
    int (*barrier)(struct sfb__comm *c);
    /* frees the buffers the pool holds for later (NULL: nothing pooled) */
    int (*trim)(struct sfb__comm *c);
};

extern const struct sfb__comm_ops sfb__comm_fabric_ops;

/* The engines' calls, through c->ops. Returns as the ops entry; with no
 * peers (world == 1) call and post run fn at once, barrier returns 0,
 * buf_get gives a buffer of its own (sfb__comm_buf_plain) and the others
 * fail with -ENOTCONN. Compute thread (send and buf_get: also the hooks). */
int sfb__comm_buf_get(struct sfb__comm *c, size_t size, struct sfb__buf **out);
/* A buffer in one allocation of its own, in no pool (64-byte aligned data,
 * one reference; freed by its last sfb__buf_put): the in-process
 * loopback's, and a job of one worker's. 0 or -ENOMEM. */
int sfb__comm_buf_plain(size_t size, struct sfb__buf **out);
/* The pool's buffers that no one holds freed (sfb__transport_trim): after a
 * phase whose sizes will not come again. 0 where nothing is pooled. */
int sfb__comm_trim(struct sfb__comm *c);
int sfb__comm_send(struct sfb__comm *c, uint32_t dst, const void *hdr, size_t hdr_len,
                   struct sfb__buf *buf, size_t off, size_t len, double timeout_s);
int sfb__comm_recv(struct sfb__comm *c, struct sfb__frame *out, double timeout_s);
/* Receives as sfb__comm_recv, but a wait lasts until frames carrying at
 * least `units` updates have arrived (sfb__transport_recv_units). */
int sfb__comm_recv_units(struct sfb__comm *c, struct sfb__frame *out, double timeout_s,
                         uint32_t units);
int sfb__comm_call(struct sfb__comm *c, void (*fn)(void *), void *arg);
int sfb__comm_post(struct sfb__comm *c, void (*fn)(void *), void (*drop)(void *), void *arg);
int sfb__comm_barrier(struct sfb__comm *c);

/* Hands one received frame to the comm as the transport's on_frame does:
 * validation, control frames, then the data hook; returns 1 when taken, 0
 * when the frame goes to the inbox. For another ops' delivery (the
 * loopback's); the caller runs it where the hooks may run. */
int sfb__comm_deliver(struct sfb__comm *c, struct sfb__frame *f);

/* ---- the facade's read side and collectives (src/comm/comm_api.c) ---- */

uint32_t sfb__comm_rank(const struct sfb__comm *c);
uint32_t sfb__comm_world(const struct sfb__comm *c);
/* The largest S an SF frame may carry here (sfb__comm_set_shapes). */
uint32_t sfb__comm_max_s(const struct sfb__comm *c);
/* Ranks of the job on this rank's host, this one included (1 in a job of
 * one worker). */
uint32_t sfb__comm_local_ranks(const struct sfb__comm *c);
/* sfb__transport_copy_max of the transport (0 without one). */
size_t sfb__comm_copy_max(const struct sfb__comm *c);
uint64_t sfb__comm_job_key(const struct sfb__comm *c);
/* The transport, NULL when world == 1 or on the loopback (tests and
 * benchmarks that drive the transport directly). The engines use the data
 * path above instead. */
struct sfb__transport *sfb__comm_transport(const struct sfb__comm *c);
/* Rank r's host: the lowest rank running on the same host (by host name),
 * the same answer on every rank; 0 for every rank when all share one host
 * (and on the loopback), and for r out of range. Any thread. */
uint32_t sfb__comm_host(const struct sfb__comm *c, uint32_t r);
/* The job's wire parameters (key, world, shapes) for decoding frames. */
const struct sfb__wire_job *sfb__comm_wire_job(const struct sfb__comm *c);
/* The transport's counters, all zero when world == 1. */
struct sfb__comm_traffic {
    uint64_t bytes_sent, bytes_recv, frames_sent, frames_recv;
};
void sfb__comm_traffic(const struct sfb__comm *c, struct sfb__comm_traffic *out);

/* Collectives over the bootstrap channel (not the fabric; the barrier is
 * the data path's above): every rank calls them in the same order.
 * Bootstrap errors pass through unexplained (see sfb__comm_explain).
 * Compute thread. */
/* Equal-length blobs: all (world * len bytes) receives rank r's at r * len. */
int sfb__comm_allgather(struct sfb__comm *c, const void *mine, size_t len, void *all);
/* Blobs of any lengths (each <= 1 MiB): *all (malloc'd, the caller frees)
 * holds them back to back, lens[world] their lengths. */
int sfb__comm_allgatherv(struct sfb__comm *c, const void *mine, size_t len, void **all,
                         size_t *lens);
/* Root's len bytes (any len) at data on every rank (sfb__bootstrap_broadcast). */
int sfb__comm_broadcast(struct sfb__comm *c, uint32_t root, void *data, size_t len);
/* sfb__agree over this job's ranks: 0 when every rank's text is equal,
 * -SFB_ECONFIG on every rank naming the differing keys. */
int sfb__comm_agree(struct sfb__comm *c, const char *text);
/* A collective call of the job's API (`what`: "allgather", "barrier",
 * "broadcast", "agree" or "replan") begins: its collectives carry that name
 * (or `label`, where not NULL: a caller's own name for its call, which
 * outlives it) until sfb__comm_leave_call (sfb__bootstrap_label: ranks in
 * different calls fail with -SFB_ECONFIG naming both), and every peer is told (a status
 * heartbeat: comm_stall.c) that this rank is in it, having sent what its
 * peers may wait for of it through clock `published` (its updates; an FMS
 * owner's sums): a peer whose wait needs a later clock of this rank's fails
 * at once (sfb__comm_check_wait) instead of both waiting for each other
 * until the bootstrap timeout. Compute thread. */
void sfb__comm_enter_call(struct sfb__comm *c, const char *what, const char *label,
                          int64_t published);
void sfb__comm_leave_call(struct sfb__comm *c);

#endif
