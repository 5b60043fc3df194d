/* Reconstruction benchmark: sfb_reconstruct_apply on the SFs of S samples
 * split into several batches (so stacking happens) vs one plain cblas_sgemm
 * of the same shape vs a loop of S cblas_sger rank-1 updates.
 *
 *   bench_reconstruct [--quick] [--k K] [--d D] [--s S1,S2,...] [--batches N]
 *                     [--threads N] [--min-time SEC]
 *
 * Defaults: K = D = 4096, S = 256 and 32, 4 batches, 1 OpenBLAS thread.
 * --quick uses tiny shapes (the bench-smoke test). A fourth line measures the
 * sparse path (CSR c with 1% of the columns; GFLOP/s counts 2·K·nnz). One line per measurement:
 *   name  size  iters  us/op  GFLOP/s
 * (us/op is the median of individually timed iterations after one warm-up
 * call; reconstruct and sgemm iterations are interleaved so both see the same
 * machine load), then `reconstruct/sgemm = R` per S. Exits 1 if a result is
 * wrong, or, at full size, if R < 0.85. */
#include <sfb/sf.h>
#include "src/base/util.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_S 16
#define MAX_ITERS 200

struct cfg {
    int quick, threads, batches;
    uint32_t k, d;
    uint32_t s[MAX_S];
    int ns;
    double min_time;
};

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* flops_per_sample: 2·K·D for dense c, 2·K·nnz/S for sparse c. */
static void report(const char *name, const struct cfg *c, uint32_t s, int iters, double sec,
                   double flops)
{
    printf("%-22s %ux%ux%u  %4d  %12.1f  %8.2f\n", name, c->k, c->d, s, iters, sec * 1e6,
           flops / sec * 1e-9);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_reconstruct [--quick] [--k K] [--d D] [--s S1,S2,...] "
                    "[--batches N] [--threads N] [--min-time SEC]\n");
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v == 0 || v > (1u << 20)) return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_args(int argc, char **argv, struct cfg *c)
{
    *c = (struct cfg){.threads = 1, .batches = 4, .k = 4096, .d = 4096, .s = {256, 32},
                      .ns = 2, .min_time = 1.0};
    int set_k = 0, set_d = 0, set_s = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint32_t u;
        if (!strcmp(a, "--quick")) {
            c->quick = 1;
            continue;
        }
        if (!v) return -1;
        i++;
        if (!strcmp(a, "--k") && !parse_u32(v, &c->k)) set_k = 1;
        else if (!strcmp(a, "--d") && !parse_u32(v, &c->d)) set_d = 1;
        else if (!strcmp(a, "--threads") && !parse_u32(v, &u) && u <= 1024) c->threads = (int)u;
        else if (!strcmp(a, "--batches") && !parse_u32(v, &u) && u <= 64) c->batches = (int)u;
        else if (!strcmp(a, "--min-time")) {
            char *end;
            c->min_time = strtod(v, &end);
            if (*end || !(c->min_time > 0)) return -1;
        } else if (!strcmp(a, "--s")) {
            char buf[256];
            snprintf(buf, sizeof(buf), "%s", v);
            c->ns = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                if (c->ns == MAX_S || parse_u32(t, &c->s[c->ns])) return -1;
                c->ns++;
            }
            if (!c->ns) return -1;
            set_s = 1;
        } else
            return -1;
    }
    if (c->quick) {
        if (!set_k) c->k = 96;
        if (!set_d) c->d = 80;
        if (!set_s) c->s[0] = 16, c->s[1] = 5, c->ns = 2;
        c->min_time = 0.01;
    }
    return 0;
}

/* Everything for one S. */
struct run {
    uint32_t k, d, s;
    int nb;
    struct sfb_sf sf[64];
    const struct sfb_sf *ptr[64];
    float *bp, *cp; /* the same SFs as one plain batch, b pre-scaled */
    float *a;
    struct sfb_reconstruct *r;
    struct sfb_sf sp[64]; /* the same b with CSR c of density SPARSE_DENSITY */
    const struct sfb_sf *sptr[64];
    uint64_t nnz;
};

#define SPARSE_DENSITY 0.01

static int setup(struct run *u, const struct cfg *c, uint32_t s)
{
    memset(u, 0, sizeof(*u));
    u->k = c->k;
    u->d = c->d;
    u->s = s;
    u->nb = (int)SFB_MIN((uint32_t)c->batches, s);
    size_t nk = (size_t)s * c->k, nd = (size_t)s * c->d;
    u->bp = malloc(nk * sizeof(float));
    u->cp = malloc(nd * sizeof(float));
    u->a = calloc((size_t)c->k * c->d, sizeof(float));
    if (!u->bp || !u->cp || !u->a || sfb_reconstruct_open(&u->r)) return -ENOMEM;
    uint32_t off = 0;
    for (int j = 0; j < u->nb; j++) {
        uint32_t sj = s / (uint32_t)u->nb + ((uint32_t)j < s % (uint32_t)u->nb);
        struct sfb_sf *sf = &u->sf[j];
        int ret = sfb_sf_reserve(sf, c->k, c->d, sj, 0, 0);
        if (ret) return ret;
        sf->scale = -1e-3f * (float)(j + 1); /* different scales: stacking must fold them */
        for (size_t q = 0; q < (size_t)sj * c->k; q++) {
            sf->b[q] = frand();
            u->bp[(size_t)off * c->k + q] = sf->scale * sf->b[q];
        }
        for (size_t q = 0; q < (size_t)sj * c->d; q++)
            u->cp[(size_t)off * c->d + q] = sf->c[q] = frand();
        u->ptr[j] = sf;
        off += sj;
        /* Sparse twin: ~1% of the columns, chosen by striding. */
        uint32_t per = (uint32_t)fmax(1.0, SPARSE_DENSITY * c->d), step = c->d / per;
        struct sfb_sf *sp = &u->sp[j];
        if ((ret = sfb_sf_reserve(sp, c->k, c->d, sj, 1, (uint64_t)sj * per))) return ret;
        memcpy(sp->b, sf->b, (size_t)sj * c->k * sizeof(float));
        sp->scale = sf->scale;
        for (uint32_t i = 0; i < sj; i++) {
            for (uint32_t q = 0; q < per; q++) {
                sp->c_col[i * per + q] = (q * step + i) % step + q * step;
                sp->c_val[i * per + q] = frand();
            }
            sp->c_row_ptr[i + 1] = (i + 1) * per;
        }
        u->nnz += (uint64_t)sj * per;
        u->sptr[j] = sp;
    }
    return 0;
}

static void teardown(struct run *u)
{
    for (int j = 0; j < u->nb; j++) sfb_sf_free(&u->sf[j]), sfb_sf_free(&u->sp[j]);
    sfb_reconstruct_close(&u->r);
    free(u->bp);
    free(u->cp);
    free(u->a);
}

static int do_reconstruct(struct run *u)
{
    struct sfb_matrix m = {u->k, u->d, u->a};
    return sfb_reconstruct_apply(u->r, &m, u->ptr, (size_t)u->nb);
}

static int do_sparse(struct run *u)
{
    struct sfb_matrix m = {u->k, u->d, u->a};
    return sfb_reconstruct_apply(u->r, &m, u->sptr, (size_t)u->nb);
}

static void do_sgemm(struct run *u)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)u->k, (int)u->d, (int)u->s, 1.0f,
                u->bp, (int)u->k, u->cp, (int)u->d, 1.0f, u->a, (int)u->d);
}

static void do_sger(struct run *u)
{
    for (uint32_t i = 0; i < u->s; i++)
        cblas_sger(CblasRowMajor, (int)u->k, (int)u->d, 1.0f, u->bp + (size_t)i * u->k, 1,
                   u->cp + (size_t)i * u->d, 1, u->a, (int)u->d);
}

/* The three methods must compute the same update (from A = 0). */
static int verify(struct run *u)
{
    size_t n = (size_t)u->k * u->d;
    float *ref = malloc(n * sizeof(float));
    if (!ref) return -ENOMEM;
    memset(u->a, 0, n * sizeof(float));
    do_sgemm(u);
    memcpy(ref, u->a, n * sizeof(float));
    double scale = 0, e1 = 0, e2 = 0;
    memset(u->a, 0, n * sizeof(float));
    int ret = do_reconstruct(u);
    for (size_t q = 0; q < n && !ret; q++) {
        scale = fmax(scale, fabs(ref[q]));
        e1 = fmax(e1, fabs(u->a[q] - ref[q]));
    }
    memset(u->a, 0, n * sizeof(float));
    do_sger(u);
    for (size_t q = 0; q < n && !ret; q++) e2 = fmax(e2, fabs(u->a[q] - ref[q]));
    free(ref);
    if (ret) return ret;
    if (!(scale > 0) || e1 > 1e-4 * scale || e2 > 1e-4 * scale) {
        fprintf(stderr, "verify failed: max |ΔA| %g, reconstruct error %g, sger error %g\n",
                scale, e1, e2);
        return -1;
    }
    return 0;
}

static int iters_for(double t_warm, double min_time, int lo, int hi)
{
    double n = t_warm > 0 ? ceil(min_time / t_warm) : hi;
    return (int)fmin(fmax(n, lo), hi);
}

static int bench_one(const struct cfg *c, uint32_t s, double *ratio)
{
    struct run u;
    static double tr[MAX_ITERS], tg[MAX_ITERS], tl[MAX_ITERS];
    int ret = setup(&u, c, s);
    if (!ret) ret = verify(&u);
    if (ret) goto out;

    /* Warm-up (excluded): page in A and the buffers, grow the stack. */
    double t0 = sfb__now();
    if ((ret = do_reconstruct(&u))) goto out;
    double t1 = sfb__now();
    do_sgemm(&u);
    double t2 = sfb__now();
    int n = iters_for(fmax(t1 - t0, t2 - t1), c->min_time, 5, MAX_ITERS);
    for (int i = 0; i < n; i++) {
        t0 = sfb__now();
        if ((ret = do_reconstruct(&u))) goto out;
        t1 = sfb__now();
        do_sgemm(&u);
        t2 = sfb__now();
        tr[i] = t1 - t0;
        tg[i] = t2 - t1;
    }
    double mr = median(tr, n), mg = median(tg, n);
    char name[64];
    snprintf(name, sizeof(name), "reconstruct_%dbatches", u.nb);
    report(name, c, s, n, mr, 2.0 * c->k * c->d * s);
    report("sgemm", c, s, n, mg, 2.0 * c->k * c->d * s);

    t0 = sfb__now();
    do_sger(&u);
    t1 = sfb__now();
    int nl = iters_for(t1 - t0, c->min_time, 3, MAX_ITERS);
    for (int i = 0; i < nl; i++) {
        t0 = sfb__now();
        do_sger(&u);
        tl[i] = sfb__now() - t0;
    }
    report("sger_loop", c, s, nl, median(tl, nl), 2.0 * c->k * c->d * s);

    /* Sparse c (K × nnz multiply-adds); GFLOP/s counts 2·K·nnz. */
    t0 = sfb__now();
    if ((ret = do_sparse(&u))) goto out;
    t1 = sfb__now();
    nl = iters_for(t1 - t0, c->min_time, 5, MAX_ITERS);
    for (int i = 0; i < nl; i++) {
        t0 = sfb__now();
        if ((ret = do_sparse(&u))) goto out;
        tl[i] = sfb__now() - t0;
    }
    report("reconstruct_sparse1%", c, s, nl, median(tl, nl), 2.0 * c->k * (double)u.nnz);
    *ratio = mg / mr;
    printf("reconstruct/sgemm = %.2f  (S=%u)\n", *ratio, s);
    fflush(stdout);
out:
    teardown(&u);
    return ret;
}

int main(int argc, char **argv)
{
    struct cfg c;
    if (parse_args(argc, argv, &c)) {
        usage();
        return 2;
    }
    openblas_set_num_threads(c.threads);
    printf("# reconstruct bench: %d OpenBLAS thread(s), %s kernels, %d batches, %s\n", c.threads,
           sfb_blas_core(), c.batches, c.quick ? "quick" : "full");
    const char *better = sfb_blas_better_core();
    if (better) printf("# (this processor runs OpenBLAS's %s kernels: OPENBLAS_CORETYPE)\n", better);
    printf("# %-20s %-12s %5s %12s %9s\n", "name", "size", "iters", "us/op", "GFLOP/s");
    int fail = 0;
    for (int i = 0; i < c.ns; i++) {
        double ratio = 0;
        int ret = bench_one(&c, c.s[i], &ratio);
        if (ret) {
            fprintf(stderr, "S=%u: failed (%d: %s) %s\n", c.s[i], ret, sfb_strerror(ret),
                    sfb_last_error());
            fail = 1;
        } else if (!c.quick && ratio < 0.85) {
            fprintf(stderr, "S=%u: stacked reconstruct is %.0f%% of plain sgemm (< 85%%)\n",
                    c.s[i], ratio * 100);
            fail = 1;
        }
    }
    return fail;
}
