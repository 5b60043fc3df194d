/* Replica health: fingerprints, repair from the majority, the end-of-run
 * drift (src/train/replicas.h). */
#include "config.h"
#include "src/train/replicas.h"
#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/train/worker.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int sfb__replicas_open(struct sfb__replicas *rc)
{
    memset(rc, 0, sizeof *rc);
    rc->drift_matrix = -1;
    const char *v = getenv("SFB_DEBUG_FLIP");
    if (!v || !*v) return 0;
    unsigned long long f[5] = {0, 0, 0, 0, 30};
    char tail = 0;
    int n = sscanf(v, "%llu:%llu:%llu:%llu:%llu%c", &f[0], &f[1], &f[2], &f[3], &f[4], &tail);
    if (n < 2 || n > 5 || f[0] > UINT32_MAX || f[2] > UINT32_MAX || f[4] > 31)
        return sfb__error(-SFB_EUSAGE, "SFB_DEBUG_FLIP=%s: expected RANK:CLOCK[:MATRIX[:INDEX"
                          "[:BIT]]] (bit 0..31, default matrix 0, index 0, bit 30)", v);
    rc->flip_on = 1;
    rc->flip_rank = (uint32_t)f[0];
    rc->flip_clock = f[1];
    rc->flip_matrix = (uint32_t)f[2];
    rc->flip_index = f[3];
    rc->flip_bit = (uint32_t)f[4];
    return 0;
}

static int debug_flip(struct worker *w, struct sfb__replicas *rc, int64_t clock)
{
    if (!rc->flip_on || w->rank != rc->flip_rank || (uint64_t)clock != rc->flip_clock) return 0;
    uint32_t nm = sfb_model_n_matrices(w->model);
    if (rc->flip_matrix >= nm)
        return sfb__error(-SFB_EUSAGE, "SFB_DEBUG_FLIP: matrix %u, the model has %u",
                          rc->flip_matrix, nm);
    struct sfb_matrix *a = sfb_model_matrix(w->model, rc->flip_matrix);
    uint64_t size = (uint64_t)a->rows * a->cols;
    if (rc->flip_index >= size)
        return sfb__error(-SFB_EUSAGE, "SFB_DEBUG_FLIP: index %" PRIu64 ", matrix %u has %" PRIu64
                          " elements", rc->flip_index, rc->flip_matrix, size);
    uint32_t bits;
    memcpy(&bits, &a->data[rc->flip_index], 4);
    bits ^= 1u << rc->flip_bit;
    memcpy(&a->data[rc->flip_index], &bits, 4);
    SFB_LOG_W("SFB_DEBUG_FLIP: clock %lld, matrix %u, element %" PRIu64 ": bit %u flipped",
              (long long)clock, rc->flip_matrix, rc->flip_index, rc->flip_bit);
    return 0;
}

/* The rank whose hash most ranks share (ties: the lowest such rank), and
 * how many share it. */
static uint32_t majority(const uint64_t *all, uint32_t P, uint32_t n, uint32_t m, uint32_t *count)
{
    uint32_t best = 0, most = 0;
    for (uint32_t r = 0; r < P; r++) {
        uint32_t c = 0;
        for (uint32_t q = 0; q < P; q++) c += all[(size_t)q * n + m] == all[(size_t)r * n + m];
        if (c > most) {
            most = c;
            best = r;
        }
    }
    *count = most;
    return best;
}

/* "rank 1" or "ranks 1, 3": the ranks whose hash of m is (same = 1) or is
 * not (0) h. */
static void ranks_with(char *buf, size_t cap, const uint64_t *all, uint32_t P, uint32_t n,
                       uint32_t m, uint64_t h, int same)
{
    uint32_t k = 0;
    for (uint32_t r = 0; r < P; r++) k += (all[(size_t)r * n + m] == h) == same;
    size_t off = (size_t)snprintf(buf, cap, "rank%s ", k > 1 ? "s" : "");
    for (uint32_t r = 0, i = 0; r < P && off < cap; r++)
        if ((all[(size_t)r * n + m] == h) == same)
            off += (size_t)snprintf(buf + off, cap - off, "%s%u", i++ ? ", " : "", r);
}

/* Matrix m differs on a minority: root's bytes to every rank (collective);
 * a rank whose replica differs names the rows and takes them. */
static int repair(struct worker *w, struct sfb__replicas *rc, int64_t clock, uint32_t m,
                  uint32_t root, const uint64_t *all, uint32_t n)
{
    struct sfb_matrix *a = sfb_model_matrix(w->model, m);
    size_t count = (size_t)a->rows * a->cols, bytes = count * sizeof(float);
    int bad = all[(size_t)w->rank * n + m] != all[(size_t)root * n + m];
    float *got = w->rank == root ? a->data : malloc(bytes ? bytes : 1);
    if (!got) return sfb__error(-ENOMEM, "replica check: out of memory");
    int ret = sfb_job_broadcast(w->job, root, got, bytes);
    if (!ret && bad) {
        uint32_t first = a->rows, rows = 0;
        for (uint32_t i = 0; i < a->rows; i++)
            if (memcmp(a->data + (size_t)i * a->cols, got + (size_t)i * a->cols,
                       a->cols * sizeof(float))) {
                if (first == a->rows) first = i;
                rows++;
            }
        memcpy(a->data, got, bytes);
        SFB_LOG_W("replica check, clock %lld: matrix %u (%ux%u) of this rank differed from the "
                  "majority's in %u row%s from row %u: repaired from rank %u",
                  (long long)clock, m, a->rows, a->cols, rows, rows == 1 ? "" : "s", first, root);
        sfb__metrics_event(&w->metrics, "replica_repair",
                           "\"clock\":%lld,\"matrix\":%u,\"first_row\":%u,\"rows\":%u,"
                           "\"from\":%u", (long long)clock, m, first, rows, root);
    }
    if (got != a->data) free(got);
    return ret;
}

/* Every matrix's hash on every rank: all[r·n + m]. */
static int gather(struct worker *w, uint64_t **all_out, uint32_t *n_out)
{
    uint32_t n = sfb_model_n_matrices(w->model), P = w->world;
    uint64_t *mine = malloc(n * sizeof *mine), *all = malloc((size_t)P * n * sizeof *all);
    if (!mine || !all) {
        free(mine);
        free(all);
        return sfb__error(-ENOMEM, "replica check: out of memory");
    }
    for (uint32_t m = 0; m < n; m++) {
        const struct sfb_matrix *a = sfb_model_matrix(w->model, m);
        uint64_t h = XXH3_64bits(a->data, (size_t)a->rows * a->cols * sizeof(float));
        sfb__put_u64((uint8_t *)&mine[m], h); /* little-endian on the wire */
    }
    int ret = w->world > 1 ? sfb_job_allgather(w->job, mine, n * sizeof *mine, all) : 0;
    if (w->world == 1) memcpy(all, mine, n * sizeof *mine);
    free(mine);
    if (ret) {
        free(all);
        return ret;
    }
    *all_out = all;
    *n_out = n;
    return 0;
}

/* Compares and repairs (BSP): *differed = matrices that differed. */
static int check(struct worker *w, struct sfb__replicas *rc, int64_t clock, uint32_t *differed)
{
    uint64_t *all;
    uint32_t n, P = w->world;
    int ret = gather(w, &all, &n);
    if (ret) return ret;
    rc->checks++;
    *differed = 0;
    for (uint32_t m = 0; m < n && !ret; m++) {
        uint32_t same;
        uint32_t root = majority(all, P, n, m, &same);
        if (same == P) continue;
        (*differed)++;
        uint64_t h = all[(size_t)root * n + m];
        if (2 * same <= P) {
            char yes[256], no[256];
            ranks_with(yes, sizeof yes, all, P, n, m, h, 1);
            ranks_with(no, sizeof no, all, P, n, m, h, 0);
            ret = sfb__error(-SFB_EPEER, "replica check, clock %lld: matrix %u differs between "
                             "ranks with no majority to repair it from (%s: one replica; %s: "
                             "another)", (long long)clock, m, yes, no);
            break;
        }
        if (w->rank == 0) {
            char no[256];
            ranks_with(no, sizeof no, all, P, n, m, h, 0);
            SFB_LOG_W("replica check, clock %lld: matrix %u differs on %s from the %u "
                      "others: repaired from rank %u", (long long)clock, m, no, same, root);
        }
        rc->repaired += P - same;
        ret = repair(w, rc, clock, m, root, all, n);
    }
    free(all);
    return ret;
}

/* --ordered, or implied by --elastic: replicas meant to be bit-identical */
static int ordered(const struct worker *w)
{
    return w->s->ordered || w->s->elastic;
}

int sfb__replicas_at_clock(struct worker *w, struct sfb__replicas *rc, int64_t clock)
{
    int ret = debug_flip(w, rc, clock);
    uint64_t every = w->s->check_every;
    if (ret || !ordered(w) || !every || clock == w->start || clock % (int64_t)every)
        return ret;
    uint32_t differed;
    return check(w, rc, clock, &differed);
}

/* Under SSP: per matrix whose bytes differ, the largest |a − b| / max |b|
 * over the ranks against rank 0's replica. */
static int drift(struct worker *w, struct sfb__replicas *rc, const uint64_t *all, uint32_t n)
{
    int ret = 0;
    for (uint32_t m = 0; m < n && !ret; m++) {
        int differs = 0;
        for (uint32_t r = 1; r < w->world; r++) differs |= all[(size_t)r * n + m] != all[m];
        if (!differs) continue;
        struct sfb_matrix *a = sfb_model_matrix(w->model, m);
        size_t count = (size_t)a->rows * a->cols;
        float *ref = w->rank == 0 ? a->data : malloc(count ? count * sizeof(float) : 1);
        if (!ref) return sfb__error(-ENOMEM, "replica check: out of memory");
        ret = sfb_job_broadcast(w->job, 0, ref, count * sizeof(float));
        double num = 0, den = 0;
        for (size_t i = 0; i < count && !ret; i++) {
            num = fmax(num, fabs((double)a->data[i] - ref[i]));
            den = fmax(den, fabs((double)ref[i]));
        }
        if (ref != a->data) free(ref);
        double mine = den > 0 ? num / den : num, *every = malloc(w->world * sizeof *every);
        if (!every) return sfb__error(-ENOMEM, "replica check: out of memory");
        if (!ret) ret = sfb_job_allgather(w->job, &mine, sizeof mine, every);
        for (uint32_t r = 0; r < w->world && !ret; r++)
            if (every[r] > rc->drift) {
                rc->drift = every[r];
                rc->drift_matrix = (int)m;
                rc->drift_rank = r;
            }
        free(every);
    }
    return ret;
}

int sfb__replicas_final(struct worker *w, struct sfb__replicas *rc, int64_t clock)
{
    int ret = 0;
    uint32_t differed = 0;
    if (ordered(w)) {
        ret = check(w, rc, clock, &differed);
    } else {
        uint64_t *all;
        uint32_t n;
        if ((ret = gather(w, &all, &n))) return ret;
        rc->checks++;
        ret = drift(w, rc, all, n);
        free(all);
    }
    if (ret) return ret;
    if (w->rank == 0) {
        if (rc->drift_matrix >= 0)
            SFB_LOG_I("replicas: the same updates, added in another order on each rank (%s): "
                      "drift %.3g at most (matrix %d, rank %u against rank 0; %" PRIu64
                      " check%s)",
                      w->s->staleness ? "stale synchronous" : "--ordered would make them the same bits",
                      rc->drift, rc->drift_matrix, rc->drift_rank, rc->checks,
                      rc->checks == 1 ? "" : "s");
        else if (rc->repaired)
            SFB_LOG_I("replicas: identical, after %" PRIu64 " repair%s (%" PRIu64 " checks)",
                      rc->repaired, rc->repaired == 1 ? "" : "s", rc->checks);
        else
            SFB_LOG_I("replicas: identical (%" PRIu64 " check%s)", rc->checks,
                      rc->checks == 1 ? "" : "s");
    }
    sfb__metrics_event(&w->metrics, "replicas",
                       "\"checks\":%" PRIu64 ",\"repaired\":%" PRIu64 ",\"drift\":%.6g,"
                       "\"drift_matrix\":%d", rc->checks, rc->repaired, rc->drift,
                       rc->drift_matrix);
    return 0;
}
