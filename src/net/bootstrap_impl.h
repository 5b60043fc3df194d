/* What the bootstrap's front end (src/net/bootstrap.c) and its two back ends
 * share: the handle, and each back end's open and allgather.
 *   src/net/boot_env.c   environment rendezvous over TCP (rank 0 serves)
 *   src/net/boot_wire.c  its message header codec and checks
 *   src/net/boot_pmix.c  PMIx (mpirun, srun --mpi=pmix)
 * Only these three files include it. */
#ifndef SFB_SRC_BOOTSTRAP_IMPL_H
#define SFB_SRC_BOOTSTRAP_IMPL_H

#include "config.h"
#include "src/net/bootstrap.h"

#include <stddef.h>
#include <stdint.h>

#if HAVE_PMIX
#include <pmix.h>
#endif

struct sfb__bootstrap {
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

/* Env rendezvous: fills rank, size and key from SFB_* and connects (rank 0
 * waits for every joiner). */
int sfb__boot_env_open(struct sfb__bootstrap *bs, const struct sfb__bootstrap_settings *s);
/* One allgatherv over rank 0's sockets (world > 1; bs->seq already advanced).
 * On failure the sockets are closed and bs->broken is set. */
int sfb__boot_env_allgatherv(struct sfb__bootstrap *bs, const void *mine, uint32_t len, void **all,
                             size_t *lens);
/* Closes the sockets. */
void sfb__boot_env_close(struct sfb__bootstrap *bs);

#if HAVE_PMIX
/* PMIx_Init; *fallback = 1 when the process was not started by a PMIx
 * launcher (a singleton), so the caller goes on as a single process. */
int sfb__boot_pmix_open(struct sfb__bootstrap *bs, int *fallback);
int sfb__boot_pmix_allgatherv(struct sfb__bootstrap *bs, const void *mine, uint32_t len, void **all,
                              size_t *lens);
int sfb__boot_pmix_barrier(struct sfb__bootstrap *bs);
void sfb__boot_pmix_close(struct sfb__bootstrap *bs);
#endif

#endif
