/* Bootstrap back end: PMIx (mpirun of Open MPI / PRRTE, srun --mpi=pmix).
 * Rank and size come from the launcher, the job key is XXH3-64 of the PMIx
 * namespace, and a collective is PMIx_Put + PMIx_Fence(collect) + PMIx_Get. */
#include "config.h"
#include "src/boot/bootstrap_impl.h"

#if HAVE_PMIX
#include "src/base/bytes.h"
#include "src/base/util.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* Debian's libev.so also exports libevent's API (event_add, ...). When libev
 * comes before libevent_core in the process's symbol lookup order, PMIx's
 * progress thread calls libev's event_add and PMIx_Init crashes. Detect that
 * instead of crashing; the cure is linking libevent_core before libev. */
static int libevent_shadowed(char *lib, size_t n)
{
    void *f = dlsym(RTLD_DEFAULT, "event_add");
    Dl_info di;
    if (!f || !dladdr(f, &di) || !di.dli_fname) return 0;
    const char *base = strrchr(di.dli_fname, '/');
    base = base ? base + 1 : di.dli_fname;
    snprintf(lib, n, "%s", di.dli_fname);
    return strncmp(base, "libev.so", 8) == 0;
}

static int pmix_open_world(struct sfb__bootstrap *bs, int *fallback)
{
    char lib[256];
    if (libevent_shadowed(lib, sizeof lib)) {
        if (!getenv("PMIX_RANK")) {
            SFB_LOG_D("bootstrap: PMIx skipped: event_add resolves to %s", lib);
            *fallback = 1;
            return 0;
        }
        return sfb__error(-SFB_ECONFIG, "bootstrap: started by a PMIx launcher, but libevent's event_add "
                          "resolves to %s: PMIx would crash; link libevent_core before libev", lib);
    }
    pmix_status_t rc = PMIx_Init(&bs->me, NULL, 0);
    if (rc == PMIX_ERR_UNREACH || (rc != PMIX_SUCCESS && !getenv("PMIX_RANK"))) {
        /* A singleton: PMIx initialised itself without a server. */
        SFB_LOG_D("bootstrap: PMIx_Init: %s; not started by a PMIx launcher", PMIx_Error_string(rc));
        if (rc == PMIX_ERR_UNREACH) PMIx_Finalize(NULL, 0);
        *fallback = 1;
        return 0;
    }
    if (rc != PMIX_SUCCESS)
        return sfb__error(-SFB_EPEER, "bootstrap: PMIx_Init failed: %s", PMIx_Error_string(rc));
    bs->kind = SFB__BOOTSTRAP_PMIX;
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, bs->me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *v = NULL;
    rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &v);
    if (rc != PMIX_SUCCESS || !v || v->type != PMIX_UINT32) {
        if (v) PMIX_VALUE_RELEASE(v);
        return sfb__error(-SFB_EPEER, "bootstrap: PMIx_Get(PMIX_JOB_SIZE): %s", PMIx_Error_string(rc));
    }
    uint32_t size = v->data.uint32;
    PMIX_VALUE_RELEASE(v);
    if (size < 1 || size > SFB__BOOTSTRAP_MAX_WORLD || bs->me.rank >= size)
        return sfb__error(-SFB_ECONFIG, "bootstrap: PMIx rank %u of job size %u out of range",
                          bs->me.rank, size);
    bs->size = (int)size;
    bs->rank = (int)bs->me.rank;
    const char *ks = getenv("SFB_JOB_KEY");
    if (ks && *ks) return sfb__bootstrap_parse_key(ks, &bs->key);
    bs->key = XXH3_64bits(bs->me.nspace, strnlen(bs->me.nspace, sizeof bs->me.nspace));
    if (bs->key == 0) bs->key = 1;
    return 0;
}

/* PMIx_Fence over the whole job, bounded by bs->timeout_s (PMIx counts
 * whole seconds and takes 0 as "forever", hence at least 1). */
static int fence(struct sfb__bootstrap *bs, bool collect, const char *what)
{
    pmix_info_t info[2];
    int tmo = bs->timeout_s >= 1 ? (bs->timeout_s < INT_MAX ? (int)bs->timeout_s : INT_MAX) : 1;
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &tmo, PMIX_INT);
    pmix_status_t rc = PMIx_Fence(NULL, 0, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc == PMIX_ERR_TIMEOUT)
        return sfb__error(-ETIMEDOUT, "bootstrap: %s: rank %d waited %d s in PMIx_Fence for every "
                          "rank of the job", what, bs->rank, tmo);
    if (rc != PMIX_SUCCESS)
        return sfb__error(-SFB_EPEER, "bootstrap: %s: PMIx_Fence: %s", what, PMIx_Error_string(rc));
    return 0;
}

static int pmix_allgatherv(struct sfb__bootstrap *bs, const void *mine, uint32_t len, void **all,
                           size_t *lens)
{
    char key[32];
    snprintf(key, sizeof key, "sfb.blob.%" PRIu32, bs->seq);
    /* The stored value is a 4-byte length then the blob, so an empty blob is
     * still a non-empty byte object. */
    uint8_t *buf = malloc(4 + (size_t)len);
    if (!buf) return -ENOMEM;
    sfb__put_u32(buf, len);
    if (len) memcpy(buf + 4, mine, len);
    pmix_value_t val;
    memset(&val, 0, sizeof val);
    val.type = PMIX_BYTE_OBJECT;
    val.data.bo.bytes = (char *)buf;
    val.data.bo.size = 4 + (size_t)len;
    int r;
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &val);
    free(buf);
    if (rc != PMIX_SUCCESS) return sfb__error(-SFB_EPEER, "bootstrap: PMIx_Put: %s", PMIx_Error_string(rc));
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
        return sfb__error(-SFB_EPEER, "bootstrap: PMIx_Commit: %s", PMIx_Error_string(rc));
    if ((r = fence(bs, 1, "allgather"))) return r;
    uint8_t *t = NULL;
    size_t cap = 0, used = 0;
    for (int i = 0; i < bs->size && !r; i++) {
        pmix_proc_t p;
        pmix_value_t *v = NULL;
        PMIX_LOAD_PROCID(&p, bs->me.nspace, (pmix_rank_t)i);
        rc = PMIx_Get(&p, key, NULL, 0, &v);
        if (rc != PMIX_SUCCESS || !v || v->type != PMIX_BYTE_OBJECT || v->data.bo.size < 4 ||
            v->data.bo.size - 4 != sfb__get_u32((const uint8_t *)v->data.bo.bytes) ||
            v->data.bo.size - 4 > SFB__BOOTSTRAP_WIRE_BLOB) {
            r = sfb__error(-SFB_EPEER, "bootstrap: PMIx_Get(%s) of rank %d: %s", key, i,
                           rc != PMIX_SUCCESS ? PMIx_Error_string(rc) : "malformed value");
        } else {
            lens[i] = v->data.bo.size - 4;
            r = sfb__reserve((void **)&t, &cap, used + lens[i] + 1);
            if (!r) memcpy(t + used, v->data.bo.bytes + 4, lens[i]);
            used += lens[i];
        }
        if (v) PMIX_VALUE_RELEASE(v);
    }
    if (r) {
        free(t);
        return r;
    }
    *all = t;
    return 0;
}

static int pmix_barrier(struct sfb__bootstrap *bs)
{
    return fence(bs, 0, "barrier");
}

static void pmix_close(struct sfb__bootstrap *bs)
{
    (void)bs;
    PMIx_Finalize(NULL, 0);
}

static int pmix_open(struct sfb__bootstrap *bs, const struct sfb__bootstrap_settings *s, int *taken)
{
    *taken = 0;
    if (!s->use_pmix) return 0;
    int fallback = 0;
    int r = pmix_open_world(bs, &fallback);
    *taken = r || !fallback;
    return r;
}

const struct sfb__boot_ops sfb__boot_pmix_ops = {
    .kind = SFB__BOOTSTRAP_PMIX,
    .open = pmix_open,
    .allgatherv = pmix_allgatherv,
    .barrier = pmix_barrier,
    .close = pmix_close,
};
#endif
