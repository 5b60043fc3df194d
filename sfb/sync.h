/* Synchronization strategies (sync engines): how a worker's updates reach
 * every replica. `sfb` broadcasts sufficient factors (sfb/broadcast.c);
 * `fms` synchronizes full matrices through sharded servers (sfb/fms.c).
 * Each is a descriptor (struct sfb__sync_desc: its name, summary and byte
 * formula, for the registry) over an ops table (struct sfb__sync_ops); the
 * job (src/job/job.c) drives it for the training loop:
 *
 *     for t in clocks:  wait(t) → compute SFs → publish(t, sfs)
 *     drain(last clock)
 *
 * All ops run in the compute thread. */
#ifndef SFB_SYNC_H
#define SFB_SYNC_H

#include <sfb/sf.h>

#include <stdint.h>

struct sfb__buf;
struct sfb__comm;
struct sfb__frame;
struct sfb__ssp;

/* What the runtime hands an engine. */
struct sfb__sync_env {
    struct sfb__comm *comm;
    /* the replica the engine updates in place: nmat matrices, owned by the
     * caller and alive until close */
    struct sfb_matrix *mats;
    uint32_t nmat;
    /* the wire matrix id of mats[i] (NULL: i): an engine of a per-matrix
     * job carries some of the job's matrices under their job-wide ids */
    const uint32_t *ids;
    /* the per-matrix engine only (sfb__permatrix_ops): mats[i]'s engine */
    const struct sfb__sync_desc *const *engine_of;
    struct sfb__ssp *ssp;
    int apply_early; /* apply updates before SSP requires them */
    int ordered;     /* a clock's updates of a matrix applied together, in rank order,
                        own included (sfb_job_attach.ordered) */
    int64_t staleness;    /* SSP s (-1: asynchronous) */
    const char *topology; /* overlay ("full" when NULL) */
    uint32_t degree;      /* overlay out-degree, 0 = default */
    int flush_clock;      /* relays forward at clock boundaries only */
    int64_t start_clock;  /* first clock computed (> 0 when resumed from a checkpoint) */
    /* SFB: per matrix (nmat entries, in mats' order) the precision its
     * factors travel in (enum sfb__wire_prec, src/wire/wire.h): SFB_WIRE_F32
     * or SFB_WIRE_BF16 (sfb_job_attach's factor_dtype: half the bytes, every
     * replica applying the rounded factors, its own update's too); NULL:
     * float32 for all. FMS ignores it. */
    const uint8_t *factor_prec;
    /* FMS: per matrix the precision its rows travel in (dense_dtype; the
     * same values); NULL: float32. SFB ignores it. */
    const uint8_t *dense_prec;
    /* managed communication (sfb/parts.h, docs/design.md): */
    int priority;         /* enum sfb__priority: the order of parts waiting to leave */
    size_t part_bytes;    /* SFB sends each update in parts of about this size (0: whole) */
    size_t msg_cap;       /* the largest message a relay forms (0: no cap) */
    /* Frames received while an engine's own send waits for queue space
     * (FMS pushes from the compute thread): handed here, so that peers'
     * frames keep flowing (every rank publishing thousands of FMS matrices
     * at once would otherwise fill every receiver and block every sender).
     * The per-matrix engine routes them to their sub-engine; NULL: the
     * engine's own take. */
    void (*absorb)(void *user, struct sfb__frame *f);
    void *absorb_user;
};

/* Live counters of an engine (any time; monotonic). */
struct sfb__sync_report {
    /* Every engine: data messages it sent (SFB: bare SF frames and bundles;
     * FMS: row-block pushes and sums), never the comm layer's control frames
     * (heartbeats, bye, abort), and their bytes as handed to the transport
     * (sfb wire header + payload), counted when the transport accepts them. */
    uint64_t data_msgs;
    uint64_t data_bytes;
    uint64_t queued_bytes; /* data waiting to be sent now (behind a budget or a busy link) */
    /* seconds publish blocked waiting for peers' frames (SFB under --flush
     * clock: the frames this rank forwards at the clock's boundary) */
    double publish_wait_s;
    /* Overlay engines only (relays = 1): the fields below and the "relay"
     * metrics event. */
    int relays;
    uint64_t bundles;     /* of which bundles of two or more frames */
    uint64_t forwarded;   /* others' frames this rank relayed */
    double mean_hops;     /* hops from the other origins to this rank */
    uint32_t max_hops;
    const uint64_t *per_origin; /* updates applied per origin (world entries) or NULL */
};

/* Per-clock accounting an engine fills (added to, never reset by it). */
struct sfb__sync_clock {
    double wait_s;        /* blocked waiting for peers */
    double budget_wait_s; /* of which while this rank's bandwidth budget held its sends */
    double apply_s;       /* reconstructing received updates */
    int64_t staleness;    /* max over updates applied: own clock − update clock − 1 */
    uint64_t applied;     /* peer updates applied */
    uint64_t applied_early; /* of which before SSP required them */
};

#define SFB_STALENESS_BINS 17 /* 0..15, and 16+ */

/* What an engine's wait loop does with its own state (sfb__sync_wait), and
 * what the per-matrix engine runs several engines' waits in one loop with,
 * each taking its own frames (sfb__sync_ops.waiter). */
struct sfb__sync_waiter {
    void *priv;
    /* Takes one received frame (owns its buffer reference). */
    void (*take)(void *priv, struct sfb__frame *f);
    /* After every receive: forms and applies what is ready (updates up to
     * `limit`, counted against `required` in `acct`); 0 or a negative code. */
    int (*progress)(void *priv, int64_t limit, int64_t now_clock, int64_t required,
                    struct sfb__sync_clock *acct);
    /* 1: after progress, every origin still behind `required` lacks at
     * least one frame not yet received (the engine applies whatever it
     * holds up to `limit`), so the wait can sleep until that many updates
     * have arrived instead of waking per frame. */
    int one_frame_per_origin;
    /* 1: an update a peer published stall_timeout_s ago and not received is
     * lost, and fails the wait (src/comm/comm_stall.c). 0 where forwards
     * wait on other ranks' progress (--flush clock relays: a straggler holds
     * everyone's frames at the relays whose boundary waits on it). */
    int stall_check;
    /* Between a rank's publishes, outside its waits (NULL: nothing to do
     * there): what the frames taken so far let it do for its peers without
     * touching a replica (an FMS owner's sums, which every peer's wait needs
     * and which would otherwise wait for this rank's next wait); 0 or a
     * negative code. */
    int (*serve)(void *priv);
};

/* An engine's operations, on its state of priv_size bytes. */
struct sfb__sync_ops {
    size_t priv_size;
    int (*open)(void *priv, const struct sfb__sync_env *env);
    void (*close)(void *priv);
    /* Blocks until SSP allows computing `clock`, applying what arrived. */
    int (*wait)(void *priv, int64_t clock, struct sfb__sync_clock *acct);
    /* The own SFs of `clock`, one per matrix: sends them and applies them to
     * the own replica at once (read-my-writes). */
    int (*publish)(void *priv, int64_t clock, const struct sfb_sf *sf, uint32_t n);
    /* One matrix's own update of `clock` (m: its index among the engine's
     * matrices): leaves for the peers within the call and is applied to the
     * own replica; the clock counts as published (SSP marks the own clock,
     * clock mode's boundary) once every matrix's is. The caller publishes
     * each matrix once a clock, in any order, and all of a clock before
     * the next wait. bad non-NULL (only for an engine that forms the
     * product, one with publish_dense): the engine checks scale · BᵀC
     * instead of the caller checking the factors (the cheaper pass where
     * the factors outnumber the product; it catches an overflowing product
     * too): a number not finite → *bad = its index, -ERANGE, nothing
     * published. */
    int (*publish_one)(void *priv, int64_t clock, uint32_t m, const struct sfb_sf *sf,
                       size_t *bad);
    /* As publish_one with the update given dense: ΔA_m = scale · delta
     * (rows × cols, row-major; scale finite). The engine checks the
     * numbers in the pass it makes over them anyway: bad non-NULL and a
     * number of scale · delta not finite → *bad = its index, -ERANGE,
     * nothing published (bad NULL: unchecked). staged non-NULL: a comm
     * buffer whose data is delta (sfb_job_dense_buffer's) that the engine
     * may keep, with a reference of its own, and send from instead of
     * copying delta (its numbers scaled in place); the caller's reference
     * stays the caller's. NULL: the engine carries factors only. */
    int (*publish_dense)(void *priv, int64_t clock, uint32_t m, float scale, const float *delta,
                         struct sfb__buf *staged, size_t *bad);
    /* After the last clock: waits for and applies every update ≤ last. Also
     * called mid-run before a checkpoint (with a barrier after it, so no
     * update of a later clock exists yet); the engine then continues. */
    int (*drain)(void *priv, int64_t last, struct sfb__sync_clock *acct);
    /* Histogram of observed staleness over the run (SFB_STALENESS_BINS). */
    const uint64_t *(*staleness_hist)(void *priv);
    /* Counters for metrics (may be NULL). */
    void (*report)(void *priv, struct sfb__sync_report *rep);
    /* The open engine's waiter (what its own wait runs sfb__sync_wait
     * with): how the per-matrix engine runs several engines in one wait. */
    void (*waiter)(void *priv, struct sfb__sync_waiter *w);
    /* The newest clock through which everything this rank owes its peers
     * has left: an FMS owner's sums, formed only in this rank's own calls
     * (NULL: all of it leaves at publish). What a rank in a collective call
     * tells its peers (sfb__comm_enter_call). */
    int64_t (*served)(void *priv);
};

/* A registered engine as the registry, --help and the metrics' summary see
 * it: its --sync name, what it is, and its operations. */
struct sfb__sync_desc {
    const char *name;
    const char *summary; /* one line for --help */
    int overlays;        /* 1: its updates may travel over an overlay topology */
    /* Bytes a rank sends per clock by the engine's textbook formula, for a
     * model of one rows x cols matrix, `world` ranks and `batch` samples
     * per rank per clock (the summary event's formula_bytes_per_clock). */
    double (*formula_bytes)(uint64_t rows, uint64_t cols, uint32_t world, uint32_t batch);
    const struct sfb__sync_ops *ops;
};

/* The engine registered under `name` (--sync), or NULL. */
const struct sfb__sync_desc *sfb__sync_find(const char *name);
/* The registered engines in registry order (the first is the default);
 * NULL past the end. */
const struct sfb__sync_desc *sfb__sync_registry(size_t i);
/* A --sync value: one engine name for every matrix, or one per matrix,
 * comma separated ("sfb,fms"): writes *n (<= max) engines to out. An entry
 * "auto" (per matrix by the cost model) is written as NULL. Returns 0 or
 * -SFB_EUSAGE naming the bad part. */
int sfb__sync_parse(const char *spec, const struct sfb__sync_desc **out, uint32_t max,
                    uint32_t *n);
/* Whether a --sync value has an "auto" entry ("auto" for every matrix, or
 * in a list: "auto,fms"): those matrices go by the cost model. */
int sfb__sync_is_auto(const char *spec);

/* Accounts one peer update of `clock` applied while computing `now_clock`
 * (SSP required every update <= `required`): its staleness into `hist`
 * (SFB_STALENESS_BINS) and `acct`. */
void sfb__sync_count_applied(uint64_t *hist, struct sfb__sync_clock *acct, int64_t now_clock,
                             int64_t clock, int64_t required);
/* Takes every frame received so far, without waiting: take(priv, frame)
 * each (engine.c; the wait's receive, and an engine's between its sends). */
void sfb__sync_take_arrived(struct sfb__comm *c, void (*take)(void *priv, struct sfb__frame *f),
                            void *priv);
/* The engines' wait (engine.c): receives (taking every frame), lets the
 * engine progress, until SSP's minimum applied clock reaches `required`;
 * each round ends in a receive of at most 50 ms, and the comm layer's check ends the wait when a
 * peer failed or finished (sfb__comm_check_wait). A job of one worker cannot
 * wait: -EDEADLK. Adds the time not spent applying to acct->wait_s. */
int sfb__sync_wait(struct sfb__comm *c, struct sfb__ssp *ssp, const struct sfb__sync_waiter *w,
                   int64_t required, int64_t limit, int64_t now_clock,
                   struct sfb__sync_clock *acct);

/* The registered engines (sync.c lists them) and their operations. */
extern const struct sfb__sync_desc sfb__broadcast_desc;
extern const struct sfb__sync_desc sfb__fms_desc;
extern const struct sfb__sync_ops sfb__broadcast_ops;
extern const struct sfb__sync_ops sfb__fms_ops;
/* FMS's message size: the bytes of a chunk of rows at most (4 MiB; unit
 * tests set less to cut small matrices into several chunks). Read when a
 * job opens. */
extern size_t sfb__fms_chunk_bytes;
/* The rows of a chunk of a K x D float32 matrix among P blocks: about
 * sfb__fms_chunk_bytes, at least a quarter of it where the largest block
 * would be fewer than 4 chunks, at least one row; every block is cut into
 * chunks of this many rows (its last one maybe shorter). */
uint32_t sfb__fms_chunk_rows(uint32_t K, uint32_t D, uint32_t P);
/* Whether factors (n samples) are fewer bytes than `rows` rows of D
 * numbers: the prefix and n·(rows + D) numbers against rows·D. */
int sfb__fms_factors_smaller(uint64_t rows, uint64_t D, uint64_t n);
/* One engine per matrix (env.engine_of), several in one job under one SSP
 * table: sfb/permatrix.c. Not in the registry (--sync names one engine for
 * all matrices, or per matrix: src/job/job.c). */
extern const struct sfb__sync_ops sfb__permatrix_ops;

#endif
