/* libfabric transport: buffer pool and the op / reassembly-record free
 * lists (src/transport/transport_impl.h). */
#include "config.h"
#include "src/transport/transport_impl.h"

#include "src/base/util.h"
#include "src/loop/loop.h"

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---------------- buffer pool ---------------- */

/* Size classes: the powers of two from 4 KiB to 1 MiB, then eight to a
 * doubling (2^k · (8 + q) / 8), so that a big buffer is at most 1/8 larger
 * than asked: with powers of two a 4096 × 4097 float32 matrix (64 MiB and
 * 16 KiB, FMS's own update of it) took 128 MiB, all of it registered (and
 * pinned, on providers that pin) for RMA. Sizes recur (a matrix's, a
 * chunk's), so eight classes a doubling still pool well. */
size_t sfb__tp_class_bytes(unsigned c)
{
    if (c <= FINE_FROM) return (size_t)1 << c;
    unsigned j = c - FINE_FROM, k = FINE_FROM + j / FINE_STEPS, q = j % FINE_STEPS;
    return ((size_t)1 << k) + q * ((size_t)1 << (k - 3));
}

unsigned sfb__tp_size_class(size_t size)
{
    if (size <= (size_t)1 << MIN_CLASS) return MIN_CLASS;
    unsigned k = 64u - (unsigned)__builtin_clzll((unsigned long long)(size - 1)); /* 2^k ≥ size */
    if (k <= FINE_FROM) return k;
    /* size in (2^o, 2^(o + 1)]: steps of 2^(o - 3), q of them past 2^o */
    unsigned o = k - 1, step = o - 3;
    size_t q = (size - ((size_t)1 << o) + ((size_t)1 << step) - 1) >> step; /* 1 .. 8 */
    size_t c = FINE_FROM + (size_t)(o - FINE_FROM) * FINE_STEPS + q;
    return c < NCLASS ? (unsigned)c : NCLASS - 1;
}

struct reg_op {
    struct sfb__transport *t;
    struct sfb__buf *b;
    int rc;
};

static void reg_in_loop(void *arg)
{
    struct reg_op *r = arg;
    struct sfb__transport *t = r->t;
    struct fid_mr *mr;
    uint64_t acc = FI_SEND | FI_RECV | (t->rma ? FI_READ | FI_REMOTE_READ : 0);
    r->rc = fi_mr_reg(t->domain, r->b->data, r->b->cap, acc, 0, t->mr_key++, 0, &mr, NULL);
    if (r->rc == 0) {
        r->b->mr = mr;
        r->b->desc = fi_mr_desc(mr);
    }
}

/* Loop thread. A buffer is registered once (at creation for FI_MR_LOCAL
 * providers, with remote-read access; else here, on its first RMA send) and
 * keeps its region until it is freed (sfb__transport_trim, or close). */
int sfb__tp_buf_rma(struct sfb__transport *t, struct sfb__buf *b)
{
    if (b->mr) return 0;
    struct reg_op r = {t, b, 0};
    reg_in_loop(&r);
    return r.rc;
}

/* Buffers of HUGE_MIN_CLASS and up live in 2 MiB-aligned regions advised
 * for transparent huge pages: the provider's copy of a frame above shm's
 * 4 KiB inject size (CMA: the receiver's process_vm_readv pins the sender's
 * pages) costs per page, and a huge page is 512 small ones
 * (docs/performance.md, "Transport"): from 8 KiB to 128 KiB a shm hop
 * takes 10-30 % less (128 KiB: 18 -> 12.5 us), and a 4-worker quick-start
 * clock, whose 25 KB frames went by 7 pinned pages, ~7 % less. Except the
 * chunk-sized receive buffers: huge pages there made streaming 4 KiB frames
 * on shm 2.5x slower. Buffers of 4 KiB and less (inject-sized frames,
 * control frames) stay on small pages too. A region of REGION_BYTES is
 * carved into equal buffers of smaller classes (the rest go to the pool);
 * bigger classes get a region each. A region is freed with the last of its
 * buffers. */
#define HUGE_MIN_CLASS 13 /* 8 KiB */
#define REGION_BYTES ((size_t)2 << 20)

struct sfb__region {
    _Atomic int bufs;
    void *mem;
    size_t len;
};

/* len bytes aligned to REGION_BYTES, straight from the kernel (mmap, so
 * that a region freed by sfb__transport_trim leaves the process's memory:
 * malloc's arenas would keep it), or NULL. */
static void *region_map(size_t len)
{
    size_t span = len + REGION_BYTES;
    uint8_t *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    uint8_t *mem = (uint8_t *)(((uintptr_t)p + REGION_BYTES - 1) & ~(uintptr_t)(REGION_BYTES - 1));
    if (mem > p) munmap(p, (size_t)(mem - p));
    if (p + span > mem + len) munmap(mem + len, (size_t)(p + span - (mem + len)));
    return mem;
}

static void region_free(struct sfb__region *r)
{
    munmap(r->mem, r->len);
    free(r);
}

void sfb__tp_buf_free(struct sfb__buf *b)
{
    if (b->mr) fi_close(&((struct fid_mr *)b->mr)->fid);
    atomic_fetch_sub(&b->t->bufs.bufs_live, 1);
    struct sfb__region *r = b->region;
    if (r && atomic_fetch_sub(&r->bufs, 1) == 1) region_free(r);
    free(b);
}

/* Registers b for local use when the provider requires it (FI_MR_LOCAL). */
static int buf_register(struct sfb__transport *t, struct sfb__buf *b)
{
    if (!t->mr_local) return 0;
    struct reg_op r = {t, b, 0};
    int rc = sfb__loop_call(t->loop, reg_in_loop, &r);
    if (rc || r.rc)
        return sfb__error(rc ? rc : r.rc, "transport: fi_mr_reg of %zu bytes: %s", b->cap,
                          fi_strerror(-(rc ? rc : r.rc)));
    return 0;
}

static int buf_new(struct sfb__transport *t, unsigned c, uint8_t *data, struct sfb__region *region,
                   struct sfb__buf **out)
{
    size_t cap = sfb__tp_class_bytes(c);
    struct sfb__buf *b = malloc(sizeof *b + (data ? 0 : 64 + cap));
    if (!b) return sfb__error(-ENOMEM, "transport: out of memory for a %zu-byte buffer", cap);
    memset(b, 0, sizeof *b);
    b->data = data ? data : (uint8_t *)(((uintptr_t)(b + 1) + 63) & ~(uintptr_t)63);
    b->cap = cap;
    b->cls = c;
    b->t = t;
    b->region = region;
    atomic_fetch_add(&t->bufs.bufs_live, 1);
    int rc = buf_register(t, b);
    if (rc) {
        b->region = NULL; /* the caller accounts for the region */
        sfb__tp_buf_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

/* A new region for class c: its first buffer in *out, the others pooled. */
static int region_new(struct sfb__transport *t, unsigned c, struct sfb__buf **out)
{
    size_t cap = sfb__tp_class_bytes(c), len = SFB_MAX(cap, REGION_BYTES);
    unsigned n = (unsigned)(len / cap);
    struct sfb__region *r = malloc(sizeof *r);
    void *mem = r ? region_map(len) : NULL;
    if (!mem) {
        free(r);
        return sfb__error(-ENOMEM, "transport: out of memory for a %zu-byte buffer region", len);
    }
    /* Advice only: without THP (or with it off) these are ordinary pages. */
    (void)madvise(mem, len, MADV_HUGEPAGE);
    r->mem = mem;
    r->len = len;
    atomic_init(&r->bufs, (int)n);
    *out = NULL;
    for (unsigned i = 0; i < n; i++) {
        struct sfb__buf *b;
        int rc = buf_new(t, c, (uint8_t *)mem + (size_t)i * cap, r, &b);
        if (rc) {
            /* The region goes with its last buffer: count off those never made. */
            if (atomic_fetch_sub(&r->bufs, (int)(n - i)) == (int)(n - i)) region_free(r);
            return *out ? 0 : rc;
        }
        if (!*out) {
            *out = b;
            continue;
        }
        pthread_mutex_lock(&t->bufs.pool_mu);
        b->next = t->bufs.pool[c];
        t->bufs.pool[c] = b;
        pthread_mutex_unlock(&t->bufs.pool_mu);
    }
    return 0;
}

int sfb__transport_buf_get(struct sfb__transport *t, size_t size, struct sfb__buf **out)
{
    unsigned c = sfb__tp_size_class(size);
    if (sfb__tp_class_bytes(c) < size)
        return sfb__error(-ENOMEM, "transport: buffer of %zu bytes", size);
    pthread_mutex_lock(&t->bufs.pool_mu);
    struct sfb__buf *b = t->bufs.pool[c];
    if (b) t->bufs.pool[c] = b->next;
    pthread_mutex_unlock(&t->bufs.pool_mu);
    if (!b) {
        int huge = c >= HUGE_MIN_CLASS && c != sfb__tp_size_class(t->chunk);
        int rc = huge ? region_new(t, c, &b) : buf_new(t, c, NULL, NULL, &b);
        if (rc) return rc;
    }
    atomic_store(&b->refs, 1);
    b->next = NULL;
    b->len = 0;
    b->off = 0;
    *out = b;
    return 0;
}

/* Loop thread (a buffer's memory region is the domain's, and the loop
 * thread is the one that uses the domain): every pooled buffer freed. */
static void trim_in_loop(void *arg)
{
    struct sfb__transport *t = arg;
    struct sfb__buf *all = NULL;
    pthread_mutex_lock(&t->bufs.pool_mu);
    for (int c = 0; c < NCLASS; c++)
        while (t->bufs.pool[c]) {
            struct sfb__buf *b = t->bufs.pool[c];
            t->bufs.pool[c] = b->next;
            b->next = all;
            all = b;
        }
    pthread_mutex_unlock(&t->bufs.pool_mu);
    while (all) {
        struct sfb__buf *b = all;
        all = b->next;
        sfb__tp_buf_free(b);
    }
}

int sfb__transport_trim(struct sfb__transport *t)
{
    return sfb__loop_call(t->loop, trim_in_loop, t);
}

void sfb__buf_ref(struct sfb__buf *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

int sfb__buf_shared(struct sfb__buf *b)
{
    return atomic_load_explicit(&b->refs, memory_order_acquire) > 1;
}

void sfb__buf_put(struct sfb__buf *b)
{
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
    struct sfb__transport *t = b->t;
    if (!t) { /* not pooled: one allocation (the in-process loopback's, comm_loopback.c) */
        free(b);
        return;
    }
    pthread_mutex_lock(&t->bufs.pool_mu);
    b->next = t->bufs.pool[b->cls];
    t->bufs.pool[b->cls] = b;
    pthread_mutex_unlock(&t->bufs.pool_mu);
}

/* ---------------- ops and reassembly records (loop thread) ---------------- */

/* NULL when max_ops operations are outstanding: every posted operation owns
 * one CQ slot, and providers may drop completions that find the CQ full
 * (libfabric 1.17 shm does, measured), so posting stops there. */
struct op *sfb__tp_op_get(struct sfb__transport *t)
{
    if (t->ops_out >= t->max_ops) return NULL;
    if (!t->bufs.free_ops) {
        /* Grows in slabs until the steady state is reached; never shrinks.
         * Registered when the provider needs it: pieces send op->thdr. */
        enum { N = 256 };
        struct slab *sl = calloc(1, sizeof *sl + N * sizeof(struct op));
        if (!sl) return NULL;
        struct op *ops = (struct op *)(sl + 1);
        void *desc = NULL;
        if (t->mr_local) {
            int rc = fi_mr_reg(t->domain, ops, N * sizeof(struct op), FI_SEND, 0, t->mr_key++, 0,
                               &sl->mr, NULL);
            if (rc) {
                free(sl);
                return NULL;
            }
            desc = fi_mr_desc(sl->mr);
        }
        sl->next = t->bufs.op_slabs;
        t->bufs.op_slabs = sl;
        for (int i = 0; i < N; i++) {
            ops[i].desc = desc;
            ops[i].next = t->bufs.free_ops;
            t->bufs.free_ops = &ops[i];
        }
    }
    struct op *o = t->bufs.free_ops;
    t->bufs.free_ops = o->next;
    o->kind = 0;
    o->req = NULL;
    o->rbuf = NULL;
    o->in_use = 1;
    t->ops_out++;
    return o;
}

void sfb__tp_op_put(struct sfb__transport *t, struct op *o)
{
    o->in_use = 0;
    o->next = t->bufs.free_ops;
    t->bufs.free_ops = o;
    t->ops_out--;
}

struct asm_rec *sfb__tp_asm_get(struct sfb__transport *t)
{
    if (!t->bufs.free_asm) {
        enum { N = 64 };
        struct slab *sl = calloc(1, sizeof *sl + N * sizeof(struct asm_rec));
        if (!sl) return NULL;
        sl->next = t->bufs.asm_slabs;
        t->bufs.asm_slabs = sl;
        struct asm_rec *a = (struct asm_rec *)(sl + 1);
        for (int i = 0; i < N; i++) {
            a[i].next = t->bufs.free_asm;
            t->bufs.free_asm = &a[i];
        }
    }
    struct asm_rec *a = t->bufs.free_asm;
    t->bufs.free_asm = a->next;
    memset(a, 0, sizeof *a);
    a->in_use = 1;
    return a;
}

void sfb__tp_asm_put(struct sfb__transport *t, struct asm_rec *a)
{
    a->in_use = 0;
    a->next = t->bufs.free_asm;
    t->bufs.free_asm = a;
}
