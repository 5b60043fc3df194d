/* Bootstrap front end: asks each back end in turn whether it takes this
 * process (env rendezvous in src/boot/boot_env.c, PMIx in src/boot/boot_pmix.c;
 * neither: a single process), and runs the collectives through the taken
 * one's ops table. The back ends never call back into this file; what they
 * share lives in src/boot/boot_common.c. See src/boot/bootstrap.h. */
#include "config.h"
#include "src/boot/bootstrap.h"
#include "src/boot/bootstrap_impl.h"
#include "src/base/bytes.h"
#include "src/base/util.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The back ends, tried in this order; the first that takes the process
 * serves it. Neither applies: a single process (below). */
static const struct sfb__boot_ops *const backends[] = {
    &sfb__boot_env_ops,
#if HAVE_PMIX
    &sfb__boot_pmix_ops,
#endif
};

static int single_allgatherv(struct sfb__bootstrap *bs, const void *mine, uint32_t len, void **all,
                             size_t *lens)
{
    return sfb__boot_gather_self(bs, mine, len, all, lens);
}

static void single_close(struct sfb__bootstrap *bs)
{
    (void)bs;
}

static const struct sfb__boot_ops single_ops = {
    .kind = SFB__BOOTSTRAP_SINGLE,
    .allgatherv = single_allgatherv,
    .close = single_close,
};

static int open_single(struct sfb__bootstrap *bs, const struct sfb__bootstrap_settings *s)
{
    /* Said once per process, at warning level: a worker that a launcher
     * failed to wire up (srun without --mpi=pmix, a build without PMIx
     * under mpirun) must not pass for a job of one in silence. */
    static atomic_int said;
    if (!atomic_exchange(&said, 1))
        SFB_LOG_W("bootstrap: neither PMIx%s nor the environment rendezvous (SFB_RANK is not "
                  "set) was found: running as a single worker, rank 0 of 1. For a job of P "
                  "workers start them with mpirun, srun --mpi=pmix, sfb run -n P or the SFB_* "
                  "variables (docs/getting-started.md, \"4. A cluster\")",
                  !HAVE_PMIX ? " (not built in)" : !s->use_pmix ? " (switched off)" : "");
    bs->ops = &single_ops;
    bs->kind = SFB__BOOTSTRAP_SINGLE;
    bs->rank = 0;
    bs->size = 1;
    const char *ks = getenv("SFB_JOB_KEY");
    if (ks && *ks) return sfb__bootstrap_parse_key(ks, &bs->key);
    bs->key = sfb__boot_random_key();
    return 0;
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
    int r = 0, taken = 0;
    for (size_t i = 0; i < SFB_ARRAY_LEN(backends) && !r && !taken; i++) {
        r = backends[i]->open(bs, s, &taken);
        if (!r && taken) {
            bs->ops = backends[i];
            bs->kind = backends[i]->kind;
        }
    }
    if (!r && !taken) r = open_single(bs, s);
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
    if (bs->ops) bs->ops->close(bs);
    free(bs);
    *pbs = NULL;
}

int sfb__bootstrap_rank(const struct sfb__bootstrap *bs) { return bs->rank; }
uint32_t sfb__bootstrap_seq(const struct sfb__bootstrap *bs) { return bs->seq; }
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


void sfb__bootstrap_label(struct sfb__bootstrap *bs, const char *label)
{
    bs->label = label;
}

/* A name as a verdict says it. */
static const char *called(const uint8_t *name, size_t n, char *out, size_t cap)
{
    if (n == 0) return "another of the job's calls (attach, finish, close, ...)";
    snprintf(out, cap, "%.*s", (int)n, (const char *)name);
    return out;
}

/* The gathered contributions (name length, name, blob) in place: each
 * rank's name checked against rank 0's, then the blobs moved back to back
 * and lens[] made theirs. The same verdict on every rank: every rank
 * holds the same table. */
static int strip_labels(struct sfb__bootstrap *bs, uint8_t *t, size_t *lens)
{
    size_t off = 0, out = 0, n0 = 0;
    const uint8_t *name0 = NULL;
    for (int i = 0; i < bs->size; i++) {
        size_t n = lens[i] ? t[off] : 0;
        if (lens[i] == 0 || n > SFB__BOOTSTRAP_LABEL_MAX || 1 + n > lens[i])
            return sfb__error(-SFB_EFORMAT, "bootstrap: collective %" PRIu32 ": rank %d's "
                              "contribution of %zu bytes has no whole name", bs->seq, i, lens[i]);
        const uint8_t *name = t + off + 1;
        if (i == 0) {
            name0 = name;
            n0 = n;
        } else if (n != n0 || memcmp(name, name0, n) != 0) {
            char a[SFB__BOOTSTRAP_LABEL_MAX + 1], b[SFB__BOOTSTRAP_LABEL_MAX + 1];
            return sfb__error(-SFB_ECONFIG, "ranks made different calls: rank %d is in %s where "
                              "rank 0 is in %s (collective %" PRIu32 "; every rank of a job "
                              "makes the job's collective calls in the same order)", i,
                              called(name, n, a, sizeof a), called(name0, n0, b, sizeof b),
                              bs->seq);
        }
        off += lens[i];
    }
    off = 0;
    for (int i = 0; i < bs->size; i++) {
        size_t skip = 1 + (size_t)t[off];
        memmove(t + out, t + off + skip, lens[i] - skip);
        off += lens[i];
        lens[i] -= skip;
        out += lens[i];
    }
    return 0;
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
    size_t n = bs->label ? SFB_MIN(strlen(bs->label), (size_t)SFB__BOOTSTRAP_LABEL_MAX) : 0;
    uint8_t *wire = malloc(1 + n + len);
    if (!wire)
        return sfb__error(-ENOMEM, "bootstrap: out of memory for a %zu-byte contribution", len);
    wire[0] = (uint8_t)n;
    if (n) memcpy(wire + 1, bs->label, n);
    if (len) memcpy(wire + 1 + n, mine, len);
    bs->seq++;
    int r = bs->ops->allgatherv(bs, wire, (uint32_t)(1 + n + len), all, lens);
    free(wire);
    if (r) {
        bs->broken = 1;
        return r;
    }
    if ((r = strip_labels(bs, *all, lens))) {
        free(*all);
        *all = NULL;
    }
    return r;
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

/* Every rank's (root, len), so that a rank that passed others fails every
 * rank alike instead of leaving the chunks out of step. */
static int broadcast_agree(struct sfb__bootstrap *bs, uint32_t root, size_t len)
{
    uint8_t mine[12], *all = malloc(12 * (size_t)bs->size);
    if (!all) return sfb__error(-ENOMEM, "bootstrap: broadcast: out of memory");
    sfb__put_u64(mine, len);
    sfb__put_u32(mine + 8, root);
    int r = sfb__bootstrap_allgather(bs, mine, sizeof mine, all);
    uint64_t len0 = r ? 0 : sfb__get_u64(all);
    uint32_t root0 = r ? 0 : sfb__get_u32(all + 8);
    for (int i = 1; i < bs->size && !r; i++) {
        uint64_t li = sfb__get_u64(all + 12 * i);
        uint32_t ri = sfb__get_u32(all + 12 * i + 8);
        if (li != len0 || ri != root0)
            r = sfb__error(-SFB_EUSAGE, "broadcast: rank %d passed %llu bytes from root %u, rank "
                           "0 passed %llu bytes from root %u (every rank passes the same)", i,
                           (unsigned long long)li, ri, (unsigned long long)len0, root0);
    }
    free(all);
    if (!r && root0 >= (uint32_t)bs->size)
        r = sfb__error(-SFB_EUSAGE, "broadcast: root %u is not a rank of this job of %d", root0,
                       bs->size);
    return r;
}

int sfb__bootstrap_broadcast(struct sfb__bootstrap *bs, uint32_t root, void *data, size_t len)
{
    int r = broadcast_agree(bs, root, len);
    if (r || bs->size == 1) return r;
    size_t *lens = malloc(sizeof(size_t) * (size_t)bs->size);
    if (!lens) return sfb__error(-ENOMEM, "bootstrap: broadcast: out of memory");
    int me_root = (uint32_t)bs->rank == root;
    for (size_t off = 0; off < len && !r; off += SFB__BOOTSTRAP_MAX_BLOB) {
        size_t chunk = SFB_MIN(len - off, (size_t)SFB__BOOTSTRAP_MAX_BLOB);
        uint8_t *at = (uint8_t *)data + off;
        void *all = NULL;
        /* only the root contributes: its chunk is the whole table */
        r = sfb__bootstrap_allgatherv(bs, me_root ? at : NULL, me_root ? chunk : 0, &all, lens);
        if (!r && lens[root] != chunk)
            r = sfb__error(-EPROTO, "broadcast: root %u sent %zu bytes at offset %zu, not "
                           "%zu", root, lens[root], off, chunk);
        if (!r && !me_root) memcpy(at, all, chunk);
        free(all);
    }
    free(lens);
    return r;
}

int sfb__bootstrap_barrier(struct sfb__bootstrap *bs)
{
    if (!bs->ops->barrier || bs->label) return sfb__bootstrap_allgather(bs, NULL, 0, NULL);
    if (bs->broken) return sfb__error(-SFB_EPEER, "bootstrap: an earlier collective failed");
    int r = bs->ops->barrier(bs);
    if (r) bs->broken = 1;
    return r;
}
