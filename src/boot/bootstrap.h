/* Bootstrap: who am I, how many are we, and an out-of-band allgather used to
 * exchange transport endpoint names before the fabric is up.
 *
 * sfb__bootstrap_open() detects how the process was started, in this order
 * (unless the settings give rank, world and rendezvous explicitly):
 *
 * 1. Environment rendezvous (the torchrun convention), when SFB_RANK is set:
 *      SFB_RANK        this process's rank, 0 <= rank < SFB_WORLD_SIZE
 *      SFB_WORLD_SIZE  number of processes (1 .. SFB__BOOTSTRAP_MAX_WORLD)
 *      SFB_RENDEZVOUS  host:port ([v6addr]:port too) where rank 0 listens;
 *                      optional when SFB_WORLD_SIZE is 1
 *      SFB_JOB_KEY     optional 64-bit key, "0x" hex, decimal or bare hex;
 *                      0 is not a valid key. Without it rank 0 draws a random
 *                      key and hands it to the others; then no joiner may
 *                      carry one.
 *      SFB_RENDEZVOUS_HELLO_TIMEOUT, SFB_RENDEZVOUS_MAX_PENDING  optional,
 *                      override hello_timeout_s and max_pending (below)
 *    or, with neither SFB_RANK nor PMIX_RANK set, torchrun's RANK and
 *    WORLD_SIZE: rank 0 listens at MASTER_ADDR on MASTER_PORT + 1 (torchrun's
 *    agent holds MASTER_PORT) unless SFB_RENDEZVOUS says otherwise.
 *    Rank 0 serves the collectives over TCP; every joiner keeps one socket to
 *    rank 0 until close. Joiners retry connecting (rank 0 may start later)
 *    until connect_timeout_s. Every wait has an absolute deadline:
 *      joiner connecting        connect_timeout_s from its start
 *      rank 0 awaiting hellos   max(connect_timeout_s, timeout_s) from its start
 *      one connection's hello   hello_timeout_s from its accept
 *      joiner awaiting WELCOME  connect_timeout_s + timeout_s after connecting
 *      each collective/barrier  timeout_s from its call, on every rank
 * 2. PMIx (mpirun of Open MPI / PRRTE, srun --mpi=pmix): PMIx_Init succeeds.
 *    The job key is XXH3-64 of the PMIx namespace. PMIx_Init returning
 *    PMIX_ERR_UNREACH means "no launcher" (a PMIx singleton): finalised again
 *    and treated as case 3.
 * 3. Nothing: a single process, rank 0 of world 1; the key comes from
 *    SFB_JOB_KEY or is random.
 *
 * Only one bootstrap may be open per process (PMIx is process-global).
 * Not thread-safe: one thread at a time per handle; every rank must call the
 * collectives in the same order.
 */
#ifndef SFB_SRC_BOOTSTRAP_H
#define SFB_SRC_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#define SFB__BOOTSTRAP_MAX_WORLD (1 << 20)
/* Largest contribution of one rank to one collective (endpoint names are
 * tens of bytes; this bounds what a peer can make us allocate). */
#define SFB__BOOTSTRAP_MAX_BLOB (1u << 20)
/* The name a collective carries (sfb__bootstrap_label): at most this many
 * bytes. Every contribution on the wire is one byte (the name's length),
 * the name, then the caller's blob, so a contribution on the wire is up to
 * SFB__BOOTSTRAP_WIRE_BLOB bytes. */
#define SFB__BOOTSTRAP_LABEL_MAX 31u
#define SFB__BOOTSTRAP_WIRE_BLOB (SFB__BOOTSTRAP_MAX_BLOB + 1u + SFB__BOOTSTRAP_LABEL_MAX)
/* Largest whole table (all ranks' blobs of one collective). */
#define SFB__BOOTSTRAP_MAX_TABLE ((size_t)1 << 30)

enum sfb__bootstrap_kind {
    SFB__BOOTSTRAP_SINGLE = 0,
    SFB__BOOTSTRAP_ENV = 1,
    SFB__BOOTSTRAP_PMIX = 2,
};

struct sfb__bootstrap_settings {
    /* Joiners retry connecting to rank 0 this long (seconds; default 60). */
    double connect_timeout_s;
    /* Bound on each later step: rank 0 waiting for all hellos, and each
     * collective (seconds; default 60). */
    double timeout_s;
    /* Env rendezvous, rank 0: a connection that has not sent a whole valid
     * HELLO this long after it was accepted is dropped (seconds; default 3;
     * SFB_RENDEZVOUS_HELLO_TIMEOUT overrides). */
    double hello_timeout_s;
    /* Env rendezvous, rank 0: at most this many connections waiting for
     * their HELLO; when full, the oldest is dropped once it has waited
     * 0.25 s, so a flood of idle connections cannot lock real joiners out
     * (default 64; SFB_RENDEZVOUS_MAX_PENDING overrides). */
    int max_pending;
    /* 0 skips PMIx detection (tests); default 1. */
    int use_pmix;
    /* Explicit rendezvous: world > 0 makes this an environment rendezvous
     * with these values in place of SFB_RANK, SFB_WORLD_SIZE,
     * SFB_RENDEZVOUS and SFB_JOB_KEY (job_key NULL: none), whatever the
     * environment holds. Default world 0: detect as above. */
    int rank, world;
    const char *rendezvous, *job_key;
};

struct sfb__bootstrap;

void sfb__bootstrap_default_settings(struct sfb__bootstrap_settings *s);

/* Opens the bootstrap (see the top of this file). In env mode it returns only
 * once every rank has connected (open is itself a barrier). Returns 0 and
 * sets *out, or a negative code with sfb_last_error() naming the variable,
 * rank or field at fault: -SFB_EUSAGE (bad environment), -SFB_EJOBKEY,
 * -ETIMEDOUT, -SFB_EPEER, -ENOMEM, or a socket errno. `s` may be NULL. */
int sfb__bootstrap_open(struct sfb__bootstrap **out, const struct sfb__bootstrap_settings *s);

/* Closes sockets / finalises PMIx and sets *bs to NULL. NULL is fine. */
void sfb__bootstrap_close(struct sfb__bootstrap **bs);

int sfb__bootstrap_rank(const struct sfb__bootstrap *bs);
/* The collectives this rank has entered so far (the next is number seq + 1). */
uint32_t sfb__bootstrap_seq(const struct sfb__bootstrap *bs);
int sfb__bootstrap_size(const struct sfb__bootstrap *bs);
uint64_t sfb__bootstrap_job_key(const struct sfb__bootstrap *bs);
enum sfb__bootstrap_kind sfb__bootstrap_kind(const struct sfb__bootstrap *bs);
const char *sfb__bootstrap_kind_name(enum sfb__bootstrap_kind kind);

/* Allgather of equal-length blobs: `all` (size * len bytes) receives rank r's
 * blob at all + r * len. Every rank must pass the same len (<=
 * SFB__BOOTSTRAP_MAX_BLOB); a rank that passed another length makes every
 * rank fail with -SFB_ESHAPE naming it. */
int sfb__bootstrap_allgather(struct sfb__bootstrap *bs, const void *mine, size_t len, void *all);

/* Allgather of blobs of any lengths (each <= SFB__BOOTSTRAP_MAX_BLOB). On
 * success *all is a malloc'd buffer (caller frees) holding the blobs in rank
 * order, back to back, and lens[r] (caller's array of size entries) is rank
 * r's length, so rank r starts at the sum of lens[0..r-1]. On failure *all is
 * NULL. */
int sfb__bootstrap_allgatherv(struct sfb__bootstrap *bs, const void *mine, size_t len,
                              void **all, size_t *lens);

/* Root's len bytes at data land at data on every rank, in chunks of
 * SFB__BOOTSTRAP_MAX_BLOB (each an allgatherv to which only the root
 * contributes). Every rank passes the same root and len: checked first (an
 * allgather), else -SFB_EUSAGE on every rank naming a differing rank;
 * -SFB_EUSAGE too for a root outside the world. */
int sfb__bootstrap_broadcast(struct sfb__bootstrap *bs, uint32_t root, void *data, size_t len);

/* Returns once every rank has entered the barrier. Under PMIx an unnamed
 * barrier is a fence (its name is not compared); a named one an allgather. */
int sfb__bootstrap_barrier(struct sfb__bootstrap *bs);

/* Names the collectives that follow, until the next call (NULL: none; a
 * string that outlives them, of up to SFB__BOOTSTRAP_LABEL_MAX bytes): the
 * job's API call they belong to ("allgather", "replan", ...). Every
 * contribution carries its name, and a collective whose ranks gave different
 * names fails on every rank with -SFB_ECONFIG naming the first rank that
 * differs from rank 0 and both names: the ranks made different calls (one
 * in an allgather, another in a barrier), which would otherwise pair the
 * wrong contributions, or fail later on a length. */
void sfb__bootstrap_label(struct sfb__bootstrap *bs, const char *label);

/* Elastic jobs (env rendezvous only, else -SFB_EUSAGE): reserves a TCP
 * port for a later rendezvous this rank may serve as the survivors' rank 0
 * (a socket bound with SO_REUSEADDR, not listening: the rendezvous binds
 * the same port, nobody else can) and writes "host:port" (v6: "[h]:port")
 * to addr[n], host being the address this rank's bootstrap connection
 * uses. *fd: the reservation (the caller closes it). */
int sfb__bootstrap_reserve(struct sfb__bootstrap *bs, int *fd, char *addr, size_t n);

/* ---- joining a running elastic job (boot_join.c) ----
 * The job's rank 0 listens at SFB_JOIN (sfb__join_listen: SO_REUSEADDR,
 * non-blocking); at its clock-boundary checks it takes the pending joiners
 * (sfb__join_accept: each one's JOIN read within 0.5 s, its key and
 * settings text compared with the job's, a mismatch refused with the
 * reason; up to max accepted, their sockets in fds; 1 s in all, the rest
 * left for the next check) and answers each with
 * its place (sfb__join_assign). A process started later asks
 * (sfb__join_request: connects, retrying, until timeout_s; waits as long
 * for the answer) and gets its rank, the grown world, the clock it starts
 * at, two values of the job's (`extra`: max_s and the caller's) and the
 * survivors' rendezvous "host:port". */
int sfb__join_listen(const char *addr, int *fd);
/* A port reserved on `host` (bound with SO_REUSEADDR, not listening) for a
 * rendezvous rank 0 serves there: "host:port" to addr[n], *fd held until
 * the rendezvous is bound. */
int sfb__join_reserve(const char *host, int *fd, char *addr, size_t n);
int sfb__join_accept(int lfd, uint64_t key, const char *text, int *fds, uint32_t max,
                     uint32_t *n);
int sfb__join_assign(int fd, uint64_t key, uint32_t rank, uint32_t world, int64_t clock,
                     const uint64_t extra[2], const char *rendezvous);
int sfb__join_request(const char *addr, uint64_t key, const char *text, double timeout_s,
                      uint32_t *rank, uint32_t *world, int64_t *clock, uint64_t extra[2],
                      char *rdv, size_t rdv_len);

/* Parses a job key as SFB_JOB_KEY spells it. 0 or -SFB_EUSAGE. */
int sfb__bootstrap_parse_key(const char *s, uint64_t *key);

/* --- Env-rendezvous wire format (exposed for tests) -------------------------
 * Every message is a 32-byte little-endian header, then `len` payload bytes:
 *   u32 magic "SFBR", u16 version, u16 type, u64 job key,
 *   u32 rank (sender; 0 from rank 0), u32 world size, u32 seq, u32 len.
 * HELLO   joiner -> 0, seq 0, len 0 (a joiner without a key sends key 0).
 * WELCOME 0 -> joiner, seq 0, len 0: everyone is here; carries the job key.
 * CONTRIB joiner -> 0, seq n >= 1 (n-th collective), its blob: u8 name length,
 *         the collective's name (sfb__bootstrap_label), the caller's bytes.
 * TABLE   0 -> joiner, seq n: world u32 lengths, then the blobs in rank order.
 * An allgather and a barrier are the same exchange (a barrier has empty
 * blobs). */
#define SFB__BOOT_MAGIC 0x52424653u /* "SFBR" little-endian */
#define SFB__BOOT_VERSION 2 /* 2: contributions carry the collective's name */
#define SFB__BOOT_HDR_SIZE 32

enum sfb__boot_type {
    SFB__BOOT_HELLO = 1,
    SFB__BOOT_WELCOME = 2,
    SFB__BOOT_CONTRIB = 3,
    SFB__BOOT_TABLE = 4,
};

struct sfb__boot_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint64_t key;
    uint32_t rank;
    uint32_t world;
    uint32_t seq;
    uint32_t len;
};

void sfb__boot_hdr_encode(const struct sfb__boot_hdr *h, uint8_t out[SFB__BOOT_HDR_SIZE]);
void sfb__boot_hdr_decode(const uint8_t in[SFB__BOOT_HDR_SIZE], struct sfb__boot_hdr *h);

/* Rank 0's check of a HELLO: `key` is rank 0's key (`key_given` says whether
 * it came from SFB_JOB_KEY), `seen` is a world-sized array of flags of ranks
 * already joined. Returns 0, or a negative code and writes the reason (which
 * names the field) into why[why_len]. */
int sfb__boot_check_hello(const struct sfb__boot_hdr *h, uint64_t key, int key_given,
                          uint32_t world, const unsigned char *seen, char *why, size_t why_len);

/* Turns a TABLE payload t[0 .. tlen) of `world` ranks (world u32 lengths,
 * then the blobs) into the blobs at the front of t and lens[0 .. world),
 * checking each length (<= SFB__BOOTSTRAP_WIRE_BLOB) and that they add up to
 * exactly the payload. Takes ownership of the malloc'd t: on success *all
 * = t, on failure t is freed and -SFB_EFORMAT names `rank` (the caller's)
 * and the bad entry. */
int sfb__boot_unpack_table(int world, int rank, uint8_t *t, size_t tlen, void **all, size_t *lens);

#endif
