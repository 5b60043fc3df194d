/* What the bootstrap's front end (src/boot/bootstrap.c) and its two back ends
 * share: the handle, and each back end's open and allgather.
 *   src/boot/boot_env.c   environment rendezvous over TCP (rank 0 serves)
 *   src/boot/boot_wire.c  its message header codec and checks
 *   src/boot/boot_pmix.c  PMIx (mpirun, srun --mpi=pmix)
 *   src/boot/boot_common.c  job keys, the gather of a world of one
 * Only these files include it. */
#ifndef SFB_SRC_BOOTSTRAP_IMPL_H
#define SFB_SRC_BOOTSTRAP_IMPL_H

#include "config.h"
#include "src/boot/bootstrap.h"

#include <stddef.h>
#include <stdint.h>

#if HAVE_PMIX
#include <pmix.h>
#endif

struct sfb__boot_ops;

struct sfb__bootstrap {
    const struct sfb__boot_ops *ops; /* the back end that took the process */
    enum sfb__bootstrap_kind kind;
    int rank, size;
    uint64_t key;
    uint32_t seq;
    double timeout_s;
    int broken; /* a collective failed half-way: the sockets are out of step */
    const char *label; /* the name the next collectives carry (sfb__bootstrap_label) */
    int *fds;   /* env: rank 0 holds fds[1..size-1]; a joiner holds fds[0] */
#if HAVE_PMIX
    pmix_proc_t me;
#endif
};

/* Checks the fields every env-rendezvous message shares (magic, version,
 * type, world). Returns 0 or -code with the reason in why[why_len]. */
int sfb__boot_check_common(const struct sfb__boot_hdr *h, uint16_t type, uint32_t world, char *why,
                           size_t why_len);

/* A random non-zero job key (rank 0 of an env job without SFB_JOB_KEY, a
 * single process). */
uint64_t sfb__boot_random_key(void);

/* An integer in [lo, hi] from the environment variable `name` (value s);
 * -SFB_EUSAGE naming the variable when unset or out of range. */
int sfb__boot_parse_int_env(const char *name, const char *s, long lo, long hi, int *out);

/* ---- the env rendezvous's sockets (boot_sock.c) ----
 * All on non-blocking sockets, bounded by `deadline` (sfb__now() seconds). */
struct addrinfo;
struct sockaddr_storage;
/* Milliseconds from now until `deadline` for poll(): never negative, rounded
 * up by one so poll does not wake just before it. */
int sfb__boot_poll_ms(double deadline, double now);
/* Waits until fd is ready for `events` (poll); -ETIMEDOUT past deadline. */
int sfb__boot_wait_fd(int fd, short events, double deadline);
/* The bootstrap's clock, for every deadline of its own: sfb__now() less the
 * time sfb__boot_wait_fd found the process stopped (Ctrl-Z and fg, Slurm's
 * suspend, a paused VM: a look at the socket seconds after the last), so
 * that a job stopped and continued loses none of an operation's time. */
double sfb__boot_now(void);
/* Reads or writes exactly len bytes: partial transfers, EINTR and EAGAIN
 * are retried; a peer that closes gives -ECONNRESET. */
int sfb__boot_fd_io(int fd, void *buf, size_t len, double deadline, int writing);
/* A header and its payload (h->len bytes). */
int sfb__boot_send_msg(int fd, const struct sfb__boot_hdr *h, const void *payload, double deadline);
int sfb__boot_recv_hdr(int fd, struct sfb__boot_hdr *h, double deadline);
/* Names a failed step with rank `peer` (`bound`: the seconds it was
 * allowed, named in a timeout); returns the code to pass on. */
int sfb__boot_io_error(int r, const char *what, int peer, double bound);
/* Splits "host:port" / "[v6]:port" (SFB_RENDEZVOUS) and resolves it. */
int sfb__boot_resolve(const char *spec, int passive, struct addrinfo **res);
/* "host:port" of a peer address. */
void sfb__boot_addr_name(const struct sockaddr_storage *ss, char *out, size_t n);
/* A connected TCP_NODELAY socket to ai, or a negative errno. */
int sfb__boot_try_connect(const struct addrinfo *ai, double deadline);

/* The allgather of a world of one: a copy of `mine` (boot_common.c). */
int sfb__boot_gather_self(struct sfb__bootstrap *bs, const void *mine, uint32_t len, void **all,
                          size_t *lens);

/* A back end. The front end (bootstrap.c) calls open on each in turn until
 * one takes the process, then runs everything through the taken one.
 * Every function runs on the caller's thread and blocks up to the bootstrap's
 * bounds (settings, bs->timeout_s). */
struct sfb__boot_ops {
    enum sfb__bootstrap_kind kind;
    /* 0 with *taken = 1: the process is this back end's and bs holds rank,
     * size and key; 0 with *taken = 0: not started for this back end (the
     * next is tried); a negative code: it is this back end's but failed
     * (having released what it took). NULL for the single-process one. */
    int (*open)(struct sfb__bootstrap *bs, const struct sfb__bootstrap_settings *s, int *taken);
    /* One allgatherv (bs->seq already advanced); 0 or a negative code, after
     * which the front end marks the handle broken. */
    int (*allgatherv)(struct sfb__bootstrap *bs, const void *mine, uint32_t len, void **all,
                      size_t *lens);
    /* A barrier; NULL: an allgather of nothing serves. */
    int (*barrier)(struct sfb__bootstrap *bs);
    /* Releases what open took. */
    void (*close)(struct sfb__bootstrap *bs);
};

/* Environment rendezvous: taken when SFB_RANK is set. */
extern const struct sfb__boot_ops sfb__boot_env_ops;
#if HAVE_PMIX
/* PMIx: taken when use_pmix and the process was started by a PMIx launcher. */
extern const struct sfb__boot_ops sfb__boot_pmix_ops;
#endif

#endif
