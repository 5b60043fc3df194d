/* Bootstrap front end: picks the back end (env rendezvous in
 * src/net/boot_env.c, PMIx in src/net/boot_pmix.c, or a single process), and
 * dispatches the collectives to it. See src/net/bootstrap.h. */
#include "config.h"
#include "src/net/bootstrap.h"
#include "src/net/bootstrap_impl.h"
#include "src/base/common.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

int sfb__bootstrap_parse_key(const char *s, uint64_t *key)
{
    if (!s || !*s) return sfb__error(-SFB_EUSAGE, "SFB_JOB_KEY: empty");
    int base = 10;
    const char *p = s;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
    } else {
        for (const char *q = p; *q; q++)
            if (!isdigit((unsigned char)*q)) base = 16;
    }
    if (!*p || strlen(p) > (base == 16 ? 16u : 20u))
        return sfb__error(-SFB_EUSAGE, "SFB_JOB_KEY '%s': not a 64-bit number", s);
    for (const char *q = p; *q; q++)
        if (!isxdigit((unsigned char)*q) || (base == 10 && !isdigit((unsigned char)*q)))
            return sfb__error(-SFB_EUSAGE, "SFB_JOB_KEY '%s': bad character '%c'", s, *q);
    errno = 0;
    unsigned long long v = strtoull(p, NULL, base);
    if (errno) return sfb__error(-SFB_EUSAGE, "SFB_JOB_KEY '%s': out of range", s);
    if (v == 0) return sfb__error(-SFB_EUSAGE, "SFB_JOB_KEY '%s': 0 is not a valid key", s);
    *key = v;
    return 0;
}

uint64_t sfb__boot_random_key(void)
{
    uint64_t k = 0;
    while (k == 0) {
        if (getrandom(&k, sizeof k, 0) != (ssize_t)sizeof k)
            k = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(sfb__now() * 1e9);
    }
    return k;
}

void sfb__bootstrap_default_settings(struct sfb__bootstrap_settings *s)
{
    s->connect_timeout_s = 60;
    s->timeout_s = 60;
    s->hello_timeout_s = 3;
    s->max_pending = 64;
    s->use_pmix = 1;
    s->rank = 0;
    s->world = 0;
    s->rendezvous = NULL;
    s->job_key = NULL;
}

int sfb__bootstrap_open(struct sfb__bootstrap **out, const struct sfb__bootstrap_settings *s)
{
    struct sfb__bootstrap_settings def;
    if (!s) {
        sfb__bootstrap_default_settings(&def);
        s = &def;
    }
    *out = NULL;
    struct sfb__bootstrap *bs = calloc(1, sizeof *bs);
    if (!bs) return -ENOMEM;
    bs->timeout_s = s->timeout_s;
    int r = 0, fallback = 1;
    if (s->world > 0 || getenv("SFB_RANK")) {
        fallback = 0;
        r = sfb__boot_env_open(bs, s);
    }
#if HAVE_PMIX
    else if (s->use_pmix) {
        fallback = 0;
        r = sfb__boot_pmix_open(bs, &fallback);
    }
#endif
    if (!r && fallback) {
        /* Said once per process, at warning level: a worker that a launcher
         * failed to wire up (srun without --mpi=pmix, a build without PMIx
         * under mpirun) must not pass for a job of one in silence. */
        static atomic_int said;
        if (!atomic_exchange(&said, 1))
            SFB_LOG_W("bootstrap: neither PMIx%s nor the environment rendezvous (SFB_RANK is not "
                      "set) was found: running as a single worker, rank 0 of 1. For a job of P "
                      "workers start them with mpirun, srun --mpi=pmix, sfb run -n P or the SFB_* "
                      "variables (README: Running on a cluster)",
                      !HAVE_PMIX ? " (not built in)" : !s->use_pmix ? " (switched off)" : "");
        bs->kind = SFB__BOOTSTRAP_SINGLE;
        bs->rank = 0;
        bs->size = 1;
        const char *ks = getenv("SFB_JOB_KEY");
        if (ks && *ks)
            r = sfb__bootstrap_parse_key(ks, &bs->key);
        else
            bs->key = sfb__boot_random_key();
    }
    if (r) {
        sfb__bootstrap_close(&bs);
        return r;
    }
    SFB_LOG_D("bootstrap: %s, rank %d of %d, job key 0x%016" PRIx64, sfb__bootstrap_kind_name(bs->kind),
              bs->rank, bs->size, bs->key);
    *out = bs;
    return 0;
}

void sfb__bootstrap_close(struct sfb__bootstrap **pbs)
{
    struct sfb__bootstrap *bs = *pbs;
    if (!bs) return;
    sfb__boot_env_close(bs);
#if HAVE_PMIX
    if (bs->kind == SFB__BOOTSTRAP_PMIX) sfb__boot_pmix_close(bs);
#endif
    free(bs);
    *pbs = NULL;
}

int sfb__bootstrap_rank(const struct sfb__bootstrap *bs) { return bs->rank; }
int sfb__bootstrap_size(const struct sfb__bootstrap *bs) { return bs->size; }
uint64_t sfb__bootstrap_job_key(const struct sfb__bootstrap *bs) { return bs->key; }
enum sfb__bootstrap_kind sfb__bootstrap_kind(const struct sfb__bootstrap *bs) { return bs->kind; }

const char *sfb__bootstrap_kind_name(enum sfb__bootstrap_kind kind)
{
    switch (kind) {
    case SFB__BOOTSTRAP_SINGLE: return "single process";
    case SFB__BOOTSTRAP_ENV: return "env rendezvous";
    case SFB__BOOTSTRAP_PMIX: return "PMIx";
    }
    return "?";
}


int sfb__bootstrap_allgatherv(struct sfb__bootstrap *bs, const void *mine, size_t len, void **all,
                              size_t *lens)
{
    *all = NULL;
    if (len > SFB__BOOTSTRAP_MAX_BLOB)
        return sfb__error(-SFB_EUSAGE, "bootstrap: allgather of %zu bytes exceeds the limit of %u",
                          len, SFB__BOOTSTRAP_MAX_BLOB);
    if (bs->broken)
        return sfb__error(-SFB_EPEER, "bootstrap: an earlier collective failed; the job cannot continue");
    bs->seq++;
    if (bs->kind == SFB__BOOTSTRAP_PMIX) {
#if HAVE_PMIX
        int r = sfb__boot_pmix_allgatherv(bs, mine, (uint32_t)len, all, lens);
        if (r) bs->broken = 1;
        return r;
#endif
    }
    if (bs->size == 1) {
        *all = malloc(len + 1);
        if (!*all) return -ENOMEM;
        if (len) memcpy(*all, mine, len);
        lens[0] = len;
        return 0;
    }
    return sfb__boot_env_allgatherv(bs, mine, (uint32_t)len, all, lens);
}

int sfb__bootstrap_allgather(struct sfb__bootstrap *bs, const void *mine, size_t len, void *all)
{
    size_t *lens = malloc(sizeof(size_t) * (size_t)bs->size);
    if (!lens) return -ENOMEM;
    void *v = NULL;
    int r = sfb__bootstrap_allgatherv(bs, mine, len, &v, lens);
    /* Name the same culprit on every rank: the first that differs from rank 0. */
    for (int i = 1; i < bs->size && !r; i++)
        if (lens[i] != lens[0])
            r = sfb__error(-SFB_ESHAPE, "bootstrap: allgather: rank %d contributed %zu bytes, rank 0 %zu",
                           i, lens[i], lens[0]);
    if (!r && len) memcpy(all, v, len * (size_t)bs->size);
    free(v);
    free(lens);
    return r;
}

int sfb__bootstrap_barrier(struct sfb__bootstrap *bs)
{
    if (bs->kind == SFB__BOOTSTRAP_PMIX) {
#if HAVE_PMIX
        if (bs->broken) return sfb__error(-SFB_EPEER, "bootstrap: an earlier collective failed");
        int r = sfb__boot_pmix_barrier(bs);
        if (r) bs->broken = 1;
        return r;
#endif
    }
    return sfb__bootstrap_allgather(bs, NULL, 0, NULL);
}
