/* sfb — the job API: one worker of a distributed job that keeps replicas of
 * parameter matrices identical (up to the SSP bound) by broadcasting
 * sufficient factors. The trainer (sfb_train_run) and the Python module
 * (python/sfb) are both built on it.
 *
 *     sfb_job_default_settings(&s);         rank, world, rendezvous
 *     sfb_job_open(&job, &s);               explicit, SFB_* environment or PMIx
 *     sfb_job_default_attach(&a);           matrices, engine, staleness
 *     sfb_job_attach(job, &a);
 *     for t in 0 .. T-1:
 *         sfb_job_wait(job, t, NULL);       SSP gate: peers' updates applied
 *         compute the SFs of clock t from the replica
 *         sfb_job_publish(job, t, sfs, n);  sent, and applied here at once
 *           (or each matrix as soon as its update is known, in any order:
 *            sfb_job_publish_one(job, t, m, &sf) / sfb_job_publish_dense)
 *     sfb_job_finish(job, T-1);             every update applied everywhere
 *     sfb_job_close(&job);
 *
 * sfb_job_broadcast (any time after open) hands every rank the root's bytes,
 * e.g. to start every replica alike before attach.
 *
 * Errors: every function returning int returns 0 or a negative code
 * (sfb/common.h); sfb_error_message(code) gives the detail, e.g. "rank 2
 * failed: …". After any failure except -EINVAL and -SFB_EUSAGE (bad
 * arguments, nothing happened) the job is failed: call sfb_job_abort (so
 * peers stop at once naming this rank) and sfb_job_close.
 *
 * Threads: one job per process (the bootstrap is process-global), and all
 * its functions are called from one thread (the "compute thread"); the job
 * runs its own network thread. */
#ifndef SFB_JOB_H
#define SFB_JOB_H

#include <sfb/common.h>
#include <sfb/sf.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The versions of the two settings structures (docs/api.md, "Versions of
 * the structures"), each on its own: a later release that adds a field to
 * one (in its reserved bytes) raises that one's. 2 for both in 0.1.0 (the
 * attach structure's 1 had a sf_bytes of 4 entries). */
#define SFB_JOB_SETTINGS_VERSION 2
#define SFB_JOB_ATTACH_VERSION 2
/* The most matrices of one job (their per-matrix state is allocated at
 * attach: no cost for the bound itself). */
#define SFB_JOB_MAX_MATRICES 65536

/* How to join the job. Filled by sfb_job_default_settings; a caller sets
 * only what it needs. `version` is SFB_JOB_SETTINGS_VERSION; `reserved` is
 * for fields of later versions and must stay zero. */
struct sfb_job_settings {
    uint32_t version;
    /* world 0 (default): rank and world come from the environment
     * rendezvous (SFB_RANK, SFB_WORLD_SIZE, SFB_RENDEZVOUS, SFB_JOB_KEY, as
     * `sfb launch` sets them) when SFB_RANK is set, else from PMIx (mpirun,
     * srun --mpi=pmix), else this is a single worker. world > 0: explicit, whatever the environment says;
     * rendezvous ("host:port" where rank 0 listens) is needed for world > 1
     * and job_key (NULL: rank 0 draws one) is optional. */
    uint32_t rank, world;
    const char *rendezvous;
    const char *job_key;
    const char *provider;       /* libfabric provider; NULL: FI_PROVIDER or auto */
    const char *progress;       /* network thread: "auto" (default), "spin", "block" */
    double heartbeat_s;         /* default 0.5 */
    double peer_timeout_s;      /* a peer silent this long has failed (default 5) */
    double bootstrap_timeout_s; /* rendezvous and collectives (default 60) */
    /* Egress budget of this worker's data messages in bytes per second
     * (heartbeats and control frames exempt); 0 (default): none. A token
     * bucket paces every data message (own factors, relayed bundles, FMS
     * row blocks); see docs/design.md §Managed communication. */
    double bandwidth;
    /* A wait fails when an update a peer published this long ago has not
     * arrived, the peer alive (lost in transit: docs/robustness.md,
     * "Stalls"); a peer still computing never trips it. Default 300; 0:
     * never. */
    double stall_timeout_s;
    /* Where a worker's threads run: "auto" (NULL, default: "cpu" when its
     * host runs more ranks than this process may use CPUs, else "none"),
     * "cpu" (each rank of a host bound to one CPU of those it may use,
     * round robin by its place among the host's ranks) or "none" (the OS
     * places them, or the launcher's binding stays). */
    const char *cpu_bind;
    /* An elastic process started later (SFB_JOINING=1, with SFB_JOIN and
     * SFB_JOB_KEY: `sfb launch --elastic --respawn N` sets them): the text
     * of its settings that must agree with the running job's (the job's
     * rank 0 compares it with what its sfb_job_grow gets, and refuses a
     * joiner that differs, naming the first line). NULL: "". */
    const char *join_text;
    /* 1: an elastic job (docs/robustness.md, "Elastic jobs"): when a rank
     * dies, the survivors' waits fail with sfb_job_lost() naming it and
     * sfb_job_shrink() goes on without it. Needs the environment
     * rendezvous (sfb launch --elastic) and at attach the engine "sfb" at
     * staleness 0, ordered (forced). Every rank sets the same. Default 0. */
    uint32_t elastic;
    uint8_t reserved[64 - 2 * sizeof(double) - 2 * sizeof(const char *) - sizeof(uint32_t)];
};

/* Fills defaults (version included). NULL is a no-op. */
SFB_API void sfb_job_default_settings(struct sfb_job_settings *s);

struct sfb_job;

/* Joins the job: bootstrap, then for world > 1 the fabric and the peers'
 * addresses. Collective: returns once every rank has joined (or a bound
 * of s->bootstrap_timeout_s ran out). Returns 0, -EINVAL (NULL argument),
 * -SFB_EVERSION (s->version unknown or reserved bytes set), -SFB_EUSAGE (bad
 * rank, world, rendezvous, key or progress), -ETIMEDOUT, -SFB_EPEER,
 * -SFB_EJOBKEY, -ENOMEM or a fabric code. The caller owns *job_out; on failure
 * *job_out is NULL. */
SFB_API int sfb_job_open(struct sfb_job **job_out, const struct sfb_job_settings *s);

/* This worker's rank and the job's world size (UINT32_MAX for NULL). */
SFB_API uint32_t sfb_job_rank(const struct sfb_job *job);
SFB_API uint32_t sfb_job_world(const struct sfb_job *job);

/* The replicas this job synchronizes and how. */
struct sfb_job_attach {
    uint32_t version;        /* SFB_JOB_ATTACH_VERSION */
    uint32_t n;              /* matrices, 1 .. SFB_JOB_MAX_MATRICES (65536) */
    struct sfb_matrix *mats; /* n replicas, row-major float; the caller keeps
                                them alive and at the same address until
                                close, and writes them only between calls */
    uint32_t max_s;          /* largest s (samples) of a published SF */
    const char *engine;      /* "sfb" (default): factors broadcast; "fms":
                                full matrices through sharded servers;
                                "auto": each matrix by the cost model
                                (below); or one per matrix, comma
                                separated, any of the three ("sfb,fms":
                                matrix 0 by SFB, 1 by FMS; "auto,fms,auto":
                                1 forced to FMS, 0 and 2 chosen) */
    int64_t staleness;       /* SSP bound s: 0 = BSP (default), -1 = async */
    int apply_early;         /* apply peers' updates as they come: -1 (default)
                                = when staleness != 0 */
    const char *topology;    /* "sfb" overlay: NULL = "full" (sfb_topo_names) */
    uint32_t degree;         /* overlay degree, 0 = the topology's default */
    int flush_clock;         /* relays forward at clock boundaries only */
    int64_t start_clock;     /* the first clock (a resumed run's; default 0) */
    /* engine "auto" entries (per matrix the engine the cost model predicts
     * faster, docs/design.md §Per-matrix sync): the links, else measured by
     * a short ping-pong at attach (both 0; at most 1e6 Gbit/s and 1e9 us,
     * SFB_EUSAGE for more, a negative or a NaN); and sf_bytes: NULL, or n
     * entries (the caller's, read during attach only), each matrix's SF
     * frame as the codec sends it in bytes (0: dense factors of max_s
     * samples). Every rank decides with rank 0's values, so all decide the
     * same. */
    double link_gbps, latency_us;
    const uint32_t *sf_bytes;
    /* The order in which SFB sends what waits to leave (behind the
     * settings' bandwidth budget or a busy link): "fifo" (NULL, default:
     * computation order), "magnitude" (largest |scale|·‖b‖·‖c‖ first),
     * "relative" (largest change relative to the replica's rows first);
     * every update's clock comes first either way (SSP waits on the oldest).
     * Under a budget, or any policy but fifo, updates travel in parts
     * (docs/wire.md); nothing is dropped. */
    const char *priority;
    /* 1: every replica applies a matrix's updates of a clock together, once
     * all ranks' have arrived, in rank order, the own one among them (it is
     * not applied at publish: no read-my-writes). Replicas that start with
     * the same bits then hold the same bits after every clock, whatever the
     * order in which frames arrive (same BLAS kernel and thread count on
     * every rank). FMS sums in rank order and applies the sum as it is.
     * 0 (default): the own update at once, peers' as they come. */
    int ordered;
    /* An elastic job's matrices whose contents are not the job's state (a
     * training step's gradient buffers, as sfb.torch's): 1: a world change
     * does not keep them: sfb_job_shrink and sfb_job_grow detach them (the
     * engine closed, the matrices forgotten) and the caller attaches again
     * afterwards, with the new world's shapes, bringing every rank to one
     * state itself; any engine and staleness then. 0 (default): they are
     * the state, which shrink and grow keep (engine "sfb" at staleness 0,
     * ordered: checked here). */
    uint32_t reattach;
    /* engine "auto" entries whose factors travel with a CSR c (an
     * embedding's rows: c one-hot): NULL, or n entries (read during attach
     * only), each matrix's non-zeros of c in an SF of max_s samples (0:
     * dense c). The plan charges such a matrix's apply rows·nnz
     * multiply-adds (the sparse pass) instead of the dense GEMM, and its
     * frame the CSR bytes when sf_bytes does not say. */
    const uint32_t *sf_nnz;
    /* The precision SFB's factors travel in (docs/wire.md, "bfloat16 SF
     * payload"): "f32" (NULL, default) or "bf16": B and c rounded to the
     * nearest bfloat16 (half the bytes), which every replica, the origin's
     * own included, applies, accumulating in float32 (the usual sgemm: no
     * bf16 GEMM here); or one per matrix, comma separated ("bf16,bf16,f32").
     * A matrix FMS carries ignores it (dense_dtype is its); the
     * cost model of engine "auto" charges a bf16 matrix's factors their
     * bf16 bytes. Every rank must attach the same (checked at attach). */
    const char *factor_dtype;
    /* The precision FMS's rows travel in (pushes and owners' sums; Horovod's
     * Compression.fp16): "f32" (NULL, default) or "bf16": each worker's
     * update rounded to the nearest bfloat16 (half the bytes), summed by its
     * owner in float32, the sum rounded again, and every replica (the
     * owner's included) applies that rounded sum, so replicas stay
     * identical under `ordered`; or one per matrix, comma separated. A
     * matrix SFB carries ignores it; the cost model charges a bf16 matrix's
     * FMS its bf16 bytes. Every rank must attach the same (checked at
     * attach). */
    const char *dense_dtype;
    /* (The tail from link_gbps on is 128 bytes; 0.1.0 grew it from 64
     * before its release, when dense_dtype took the last of the 64.) */
    uint8_t reserved[128 - 2 * sizeof(double) - 2 * sizeof(const uint32_t *) -
                     3 * sizeof(const char *) - 2 * sizeof(int)];
};

/* Fills defaults (version included). NULL is a no-op. */
SFB_API void sfb_job_default_attach(struct sfb_job_attach *a);

/* Attaches the replicas and starts the engine. Collective (an agreement,
 * then a barrier: no rank sends before every rank checks frames of these
 * shapes); once per job. Every rank must attach the same shapes and the
 * same max_s, engine, staleness, topology, degree, start_clock, ordered,
 * reattach, factor_dtype and dense_dtype: where they differ, every rank
 * fails with -SFB_ECONFIG naming the first shape or each setting that
 * differs, nothing attached (the job goes on; attach again). The others
 * are each rank's own (apply_early, flush_clock, priority) or rank 0's for
 * all (link_gbps, latency_us, sf_bytes, sf_nnz). Returns 0, -EINVAL,
 * -SFB_EVERSION, -SFB_EUSAGE (a second attach, n or a shape out of range,
 * unknown engine or topology), -SFB_ECONFIG, -SFB_ENOTIMPL, -ENOMEM, or a
 * peer's failure. */
SFB_API int sfb_job_attach(struct sfb_job *job, const struct sfb_job_attach *a);

/* The engine of matrix m after attach ("sfb" or "fms"), or NULL (not
 * attached, m out of range). */
SFB_API const char *sfb_job_engine(const struct sfb_job *job, uint32_t m);

/* After an attach whose engine has an "auto" entry: one line per matrix
 * (every matrix, so the plan of a 300-matrix job has 300 lines): an auto
 * one with its shape, each engine's predicted ms per clock and the choice
 * ("matrix 0 1024x785: sfb 6.1 ms, fms 38.2 ms per clock -> sfb"), a
 * forced one with its engine ("matrix 1 10x1024: fms (forced)"); ""
 * otherwise. Owned by the job, valid until close. NULL: no job. */
SFB_API const char *sfb_job_plan(const struct sfb_job *job);

/* What one wait or drain did (accumulated: the caller zeroes it and sets
 * size, `struct sfb_job_clock acct = {sizeof acct};`). The library adds to
 * the fields that fit in `size` (a later version may add fields at the end)
 * and refuses a size below this version's with -EINVAL. */
struct sfb_job_clock {
    uint32_t size;          /* sizeof(struct sfb_job_clock), set by the caller */
    double wait_s;          /* blocked waiting for peers */
    double apply_s;         /* applying peers' updates */
    int64_t staleness;      /* max over updates applied: own clock − theirs − 1 */
    uint64_t applied;       /* peers' updates applied */
    uint64_t applied_early; /* of which before SSP required them */
    int64_t min_applied;    /* wait: the oldest clock applied of every origin */
    double budget_wait_s;   /* of wait_s: while this worker's own sends waited for
                               its bandwidth budget (the budget, not the peers,
                               held the job back) */
};

/* The SSP gate of `clock`: blocks until every origin's updates through
 * clock − staleness − 1 are applied to the replicas (with apply_early,
 * whatever else arrived too). Clocks go in order: wait(t), publish(t),
 * wait(t + 1), … from start_clock, each once (publish: all matrices at once,
 * or each alone). `acct` may be NULL. Returns 0, -EINVAL (acct->size too
 * small: nothing happened), -SFB_EUSAGE (no attach,
 * clock out of order, a matrix of the clock before not published: named),
 * -SFB_EPEER naming the failed
 * rank (or the rank whose update could not be applied: one holding a NaN or
 * an infinity, named with its clock), or -ETIMEDOUT. */
SFB_API int sfb_job_wait(struct sfb_job *job, int64_t clock, struct sfb_job_clock *acct);

/* Publishes this worker's SFs of `clock` (after its wait), one per
 * attached matrix (none published alone this clock yet), sf[m] for matrix m
 * (dense or CSR c, 1 <= s <= max_s, shapes equal to the matrix's): sends
 * them to the peers and applies them to the own replicas at once. The job
 * reads sf only (its matrix, origin and clock fields are ignored: the
 * update is matrix m's of this rank and `clock`) and copies what it needs.
 * Returns 0, -EINVAL,
 * -SFB_ESHAPE, -SFB_EUSAGE (no attach, n or clock wrong), -ERANGE when a
 * scale, b or c holds a NaN or an infinity (nothing is sent or applied; the
 * message names the clock, the matrix and the first such number: peers
 * refuse such an update and fail the job naming its origin), -ENOMEM, or a
 * peer's failure. */
SFB_API int sfb_job_publish(struct sfb_job *job, int64_t clock, const struct sfb_sf *sf,
                            uint32_t n);

/* Publishes matrix m's SF of `clock` alone (after its wait): as
 * sfb_job_publish for one matrix; the factors leave for the peers within
 * this call (a training loop can publish layer L while computing the
 * layers below). Every matrix is published once a clock, by this call or
 * sfb_job_publish_dense, in any order (ranks may use different orders);
 * the clock is complete (the own SSP clock marked, the next wait allowed)
 * with its last matrix. sf is only read. Returns 0, -EINVAL,
 * -SFB_ESHAPE, -SFB_EUSAGE (no attach, clock not the one waited for, m out
 * of range, m published already this clock: the message names matrix and
 * clock), -ERANGE (a NaN or an infinity: nothing sent), -ENOMEM, or a
 * peer's failure. */
SFB_API int sfb_job_publish_one(struct sfb_job *job, int64_t clock, uint32_t m,
                                const struct sfb_sf *sf);

/* Publishes matrix m's update of `clock` dense: ΔA_m = scale · delta, delta
 * rows × cols row-major floats (the caller's, copied; or
 * sfb_job_dense_buffer's, sent from there). Only for a matrix
 * whose engine is "fms" (it goes into FMS's own-update buffer, no
 * reconstruction): on an "sfb" matrix -SFB_EUSAGE (that engine carries
 * factors only). Counts as matrix m's publish of the clock, as
 * sfb_job_publish_one (mix them freely). Returns 0, -EINVAL, -SFB_EUSAGE
 * (as publish_one, or the engine), -ERANGE when scale or an element is a
 * NaN or an infinity, or scale · an element overflows float32 (the message
 * names clock, matrix and element; nothing is sent), -ENOMEM, or a peer's
 * failure. */
SFB_API int sfb_job_publish_dense(struct sfb_job *job, int64_t clock, uint32_t m, float scale,
                                  const float *delta);

/* A buffer of the job's for matrix m's next dense update (rows × cols
 * row-major floats; what it holds at first is unspecified): write the update
 * into it and pass it as sfb_job_publish_dense's delta, which then sends it
 * from there (float32 rows, scale 1) instead of copying it, as an in-place
 * all-reduce does. The same buffer until a publish_dense of m succeeds;
 * then it is the job's (neither read nor write it again: call this for the
 * next clock's). A replan, a shrink or grow, detach and close take it back
 * too. Only for a matrix whose engine takes dense updates ("fms"). Returns
 * 0, -EINVAL, -SFB_EUSAGE (no attach, m out of range, an "sfb" matrix),
 * -ENOMEM. */
SFB_API int sfb_job_dense_buffer(struct sfb_job *job, uint32_t m, float **out);

/* Waits for and applies every peer update of clocks <= last, where last is
 * at most the last clock published here (for a consistent view mid-run,
 * e.g. before a checkpoint; pair it with sfb_job_barrier). Updates of
 * clocks after `last` that have arrived stay pending (whatever apply_early
 * says): at staleness 0, a drain(t) right after publishing clock t leaves
 * the replicas holding exactly every rank's updates through t, so a caller
 * can read them as the state after clock t (sfb.torch relies on it). `acct`
 * may be NULL (else its size set, as for sfb_job_wait). Returns 0, -EINVAL,
 * -SFB_EUSAGE (no attach, last out of range) or a peer's failure. */
SFB_API int sfb_job_drain(struct sfb_job *job, int64_t last, struct sfb_job_clock *acct);

/* Changes which engine carries each matrix from clock last + 1 on (a cost
 * choice that measured both, say): waits until every update through `last`
 * is applied here, agrees with every rank (a barrier: then no update of the
 * old engines is in flight anywhere), closes the engines and opens
 * `engine`'s (sfb_job_attach's syntax, "sfb" and "fms" only: one for all
 * matrices, or one per matrix) on the same replicas and settings, starting
 * at clock last + 1. The replicas, the SSP clocks, sfb_job_plan's text and
 * the counters of sfb_job_stats carry on. Collective: every rank calls it
 * with the same last and engine, after publishing clock `last` (the last
 * clock published, complete) and before waiting for the next. Returns 0,
 * -SFB_EUSAGE (no attach, not between a clock's publish and the next wait,
 * an "auto" or unknown entry, relays in clock mode) or -SFB_ECONFIG (the
 * ranks passed different clocks or engines: named on every rank) with
 * nothing changed; -ENOMEM or a peer's failure, after which the job has no
 * engine and ends (abort). */
SFB_API int sfb_job_replan(struct sfb_job *job, int64_t last, const char *engine);

/* Raises the job's max_s (the most samples a published SF may carry, and
 * the bound every rank's frame checks hold received ones to) to max_s from
 * clock last + 1 on: a step with more samples than the job was attached
 * for (a longer sequence). Nothing else changes (no drain, the engines and
 * their buffers stay). Collective: every rank calls it with the same last
 * (the last clock published, complete) and max_s, before waiting for the
 * next; it returns once every rank checks frames against the new bound.
 * Returns 0, -SFB_EUSAGE (no attach, not between a clock's publish and the
 * next wait, max_s below the job's) or -SFB_ECONFIG (the ranks passed
 * different clocks or bounds: named on every rank) with nothing changed; a
 * peer's failure. */
SFB_API int sfb_job_set_max_s(struct sfb_job *job, int64_t last, uint32_t max_s);

/* Elastic jobs (sfb_job_settings.elastic): the rank whose death (or
 * silence) failed the job, as this rank found it or a survivor told it;
 * -1 while the job is healthy, when it failed otherwise, or when not
 * elastic. */
SFB_API int sfb_job_lost(struct sfb_job *job);

/* Elastic jobs, after a call failed and sfb_job_lost() named rank k: goes on
 * with the survivors, renumbered (a rank above k moves down one; rank,
 * world and every collective are the new job's). Tells every survivor k
 * died (ranks that did not watch k fail their waits too), closes this
 * job's fabric and engine, meets the survivors at the lowest one's
 * reserved address, agrees on the state to go on from and opens the
 * engine again on the same matrices. The state is the most advanced
 * survivor's (`source`, its new rank): it held every update of the
 * clocks before *next (ordered: a clock's updates of a matrix are applied
 * together, so a clock is in a replica whole or not at all), and every
 * survivor's matrices become its bytes (sent over the bootstrap channel).
 * A clock the dead rank left incomplete is nobody's: every survivor
 * computes it again from *next, with its new rank (its data shard). A
 * matrix whose clock *next the last frames completed keeps it. The stats
 * carry on. Collective over the survivors; needs an attached engine.
 * Returns 0, -SFB_EUSAGE (not elastic, no death named: the job failed
 * otherwise and ends), or the failure of the survivors' rendezvous (a
 * second death, survivors that disagree on the dead: the job ends). */
SFB_API int sfb_job_shrink(struct sfb_job *job, int64_t *next, uint32_t *source);
/* (With matrices attached with `reattach`, or none attached, a shrink only
 * re-forms the survivors' job: the matrices are detached, *next is -1 and
 * *source 0; attach again to go on.) */

/* Elastic jobs: takes in the processes waiting to join (started later with
 * SFB_JOINING=1 and the job's SFB_JOIN address and key), at a clock
 * boundary: every rank calls it after sfb_job_wait(clock) and before
 * publishing `clock` (no rank has published it: the replicas all hold
 * exactly the clocks before it, bit-identical under ordered apply). Rank 0
 * listens at SFB_JOIN; it accepts the joiners whose key and `text` (the
 * settings that must agree) match, refuses the others naming why, and
 * tells every rank how many. With none, nothing changes (the cost: one
 * broadcast of a few bytes). Else the job re-forms with world + n (ranks
 * kept, the joiners after them), rank 0's matrices go to the joiners, and
 * the engine reopens at `clock` (already waited for: publish it next).
 * `value`: handed to every joiner (sfb_job_joined). *joined: n. Returns 0,
 * -SFB_EUSAGE (not elastic, not between a wait and its publish), a peer's
 * failure (a death: sfb_job_lost, sfb_job_shrink as usual). */
SFB_API int sfb_job_grow(struct sfb_job *job, int64_t clock, const char *text, uint64_t value,
                         uint32_t *joined);
/* (With matrices attached with `reattach`, or none attached, a grow only
 * re-forms the job: the matrices are detached, with joiners or without,
 * nothing is sent, and everyone, the joiners included, attaches again;
 * `clock` is any the caller gives the joiners. It may be called at any
 * point then.) */

/* Elastic jobs, not collective: on rank 0, takes in the processes waiting
 * to join now (their JOIN read and checked against `text` as
 * sfb_job_grow does, mismatches refused) without waiting for more, and
 * keeps them for the next sfb_job_grow; *pending: how many it keeps (0 on
 * other ranks). A caller with a cheaper way to tell every rank (a value in
 * a clock's own frames) then grows only when it is > 0. Returns 0 or
 * -SFB_EUSAGE (not elastic). */
SFB_API int sfb_job_join_poll(struct sfb_job *job, const char *text, uint32_t *pending);

/* A process that joined a running elastic job (SFB_JOINING=1): 1, with
 * the clock it starts at (attach with start_clock = it; its wait returns
 * at once), the job's max_s (attach with it) and the `value` rank 0's
 * sfb_job_grow passed; 0 for a process that started with the job. Its
 * attach receives rank 0's matrices. (*max_s 0: the job kept no matrices
 * through the grow (reattach): it attaches as every rank does.) Any
 * pointer may be NULL. */
SFB_API int sfb_job_joined(const struct sfb_job *job, int64_t *clock, uint32_t *max_s,
                           uint64_t *value);

/* The job's collective calls (barrier, allgather, broadcast, agree, and
 * replan's agreement) run over the bootstrap channel; every rank makes them
 * in the same order. Each carries the call's name: where ranks made
 * different calls at the same point (one in an allgather, another in a
 * barrier), every rank fails at once with -SFB_ECONFIG naming the first rank
 * that differs from rank 0 and both calls, nothing paired (the job goes on).
 * Ranks that wait (sfb_job_wait, drain, finish) for a clock that a rank in
 * a collective call has not published, or whose sums it serves as an FMS
 * owner and has not formed (it forms them in its own waits and publishes),
 * fail their wait within a second with -SFB_EPEER naming it; a rank that does not come for another reason (a
 * long step) ends the collective after bootstrap_timeout_s with -ETIMEDOUT
 * saying so. */

/* Collective over the bootstrap channel: returns once every rank entered
 * it, or with the reason a peer failed. */
SFB_API int sfb_job_barrier(struct sfb_job *job);

/* Collective: rank r's `len` bytes land at all + r·len (all holds world·len
 * bytes). Every rank passes the same len (<= 1 MiB). */
SFB_API int sfb_job_allgather(struct sfb_job *job, const void *mine, size_t len, void *all);

/* Collective, any time after open (before attach too, e.g. to start every
 * replica alike): root's `len` bytes at `data` land at `data` on every
 * rank. Any len (a model's parameters: hundreds of MB), sent in 1 MiB
 * chunks over the bootstrap channel (docs/api.md says why and how fast).
 * Every rank passes the same root and len: checked first, else
 * -SFB_EUSAGE on every rank naming a rank that differs (nothing is
 * written; the job goes on). data (NULL only with len 0) stays the
 * caller's. Returns 0, -EINVAL, -SFB_EUSAGE (also: root not a rank),
 * -ETIMEDOUT (a rank did not come within bootstrap_timeout_s per chunk),
 * -ENOMEM, or a peer's failure. */
SFB_API int sfb_job_broadcast(struct sfb_job *job, uint32_t root, void *data, size_t len);
/* Collective: compares a "key=value\n" text across ranks; 0 when every rank
 * passed the same, else -SFB_ECONFIG on every rank with a message naming
 * each differing key and two ranks' values. */
SFB_API int sfb_job_agree(struct sfb_job *job, const char *text);

/* The name the job's collective calls (barrier, allgather, broadcast,
 * agree) carry from now on in place of their own, where ranks made
 * different calls ("rank 1 is in allreduce() where rank 0 is in
 * barrier()") and to the ranks whose waits need a clock of this rank's
 * ("rank 0 is in allreduce() ... rank 1 waits for clock 1"): a library
 * above the job API names its own collectives so,
 * whatever calls of the job's they make (sfb.torch's allreduce() makes
 * allgather calls). NULL: their own names again. name is copied (1 to 31
 * bytes). Not collective. Returns 0, -EINVAL (no job), -SFB_EUSAGE (a name
 * empty or longer). */
SFB_API int sfb_job_name_calls(struct sfb_job *job, const char *name);

/* Optional, before publishing clock `last`: this rank publishes no clock
 * after it. Its frames of that clock then tell every peer (relayed with the
 * factors), and sfb_job_finish says goodbye only to the peers this rank
 * exchanged frames with instead of to every peer (which opens a connection
 * to each: O(P²) connections at the end of an overlay run). */
SFB_API int sfb_job_set_last_clock(struct sfb_job *job, int64_t last);

/* The orderly end after the last clock `last` (-1: none computed; at most
 * the last clock published): drains every update <= last, says goodbye and
 * waits until every rank got here,
 * so every replica ends identical (BSP and SSP alike). After it, only
 * sfb_job_stats and sfb_job_close. */
SFB_API int sfb_job_finish(struct sfb_job *job, int64_t last);

/* Best effort, after a failure: tells every peer that this job is aborted,
 * with `reason` (NULL: "aborted"), so they fail at once naming it. Skipped
 * when the failure came from a peer that the others know of already, and
 * after a successful sfb_job_finish (the job is complete; the peers may be
 * leaving). */
SFB_API void sfb_job_abort(struct sfb_job *job, const char *reason);

/* The training timeline (SFB_TIMELINE=FILE in the environment at
 * sfb_job_open: docs/performance.md, "Where a step's time goes"): 1 when
 * this job records one. */
SFB_API int sfb_job_timeline_on(const struct sfb_job *job);
/* Records a span of the caller's own on the timeline's "user" track (a
 * framework's forward, backward, optimizer step), from t0_us to t1_us in
 * CLOCK_REALTIME microseconds (Python's time.time() · 1e6), with the job
 * clock it belongs to; name is copied. A no-op when the timeline is off.
 * Any thread. */
SFB_API void sfb_job_timeline_span(struct sfb_job *job, const char *name, double t0_us,
                                   double t1_us, int64_t clock);

/* Counters since open (monotonic). The caller sets size (sizeof); the
 * library fills the fields that fit in it (a later version may add fields
 * at the end). */
struct sfb_job_stats {
    uint32_t size;                     /* sizeof(struct sfb_job_stats), set by the caller */
    uint64_t bytes_sent, bytes_recv;   /* transport, every frame */
    uint64_t msgs_sent, msgs_recv;     /* transport frames */
    uint64_t data_msgs, data_bytes;    /* the engine's data messages */
    uint64_t rejected_frames;          /* failed the wire checks */
    uint64_t queued_bytes;             /* data waiting to leave now (budget, busy links) */
    double budget_held_s;              /* seconds the bandwidth budget held sends back */
    double publish_wait_s;             /* seconds sfb_job_publish waited for peers' frames
                                          (--flush clock: those this rank forwards at the
                                          clock's boundary); a wait, not publishing work */
};

/* Fills *st (zeros before attach for the engine's counters). Returns 0 or
 * -EINVAL (NULL, st->size below this version's). */
SFB_API int sfb_job_stats(const struct sfb_job *job, struct sfb_job_stats *st);

/* Leaves the job and frees it; *job becomes NULL. Without sfb_job_finish
 * before it, peers see this rank leave (their waits fail naming it). NULL
 * and *job == NULL are no-ops. */
SFB_API void sfb_job_close(struct sfb_job **job);

#ifdef __cplusplus
}
#endif
#endif
