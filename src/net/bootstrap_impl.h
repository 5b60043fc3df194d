/* What the bootstrap's front end (src/net/bootstrap.c) and its two back ends
 * share: the handle, and each back end's open and allgather.
 *   src/net/boot_env.c   environment rendezvous over TCP (rank 0 serves)
 *   src/net/boot_wire.c  its message header codec and checks
 *   src/net/boot_pmix.c  PMIx (mpirun, srun --mpi=pmix)
 *   src/net/boot_common.c  job keys, the gather of a world of one
 * Only these files include it. */
#ifndef SFB_SRC_BOOTSTRAP_IMPL_H
#define SFB_SRC_BOOTSTRAP_IMPL_H

#include "config.h"
#include "src/net/bootstrap.h"

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
