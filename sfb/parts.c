/* Updates in parts, in priority order: see sfb/parts.h. */
#include "config.h"
#include "sfb/parts.h"
#include "src/factor/blas.h"
#include "src/base/util.h"
#include "sfb/codec.h"
#include "src/wire/wire.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"fifo", "magnitude", "relative"};

int sfb__priority_find(const char *name)
{
    for (int i = 0; name && i < (int)SFB_ARRAY_LEN(names); i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

const char *sfb__priority_name(int p)
{
    return p >= 0 && p < (int)SFB_ARRAY_LEN(names) ? names[p] : NULL;
}

const char *sfb__priority_names(void)
{
    return "fifo|magnitude|relative";
}

/* ‖c_i‖ and the non-zeros of sample i's c. */
static float c_norm(const struct sfb_sf *sf, uint32_t i, uint32_t *nnz)
{
    if (sf->sparse_c) {
        uint32_t a = sf->c_row_ptr[i], b = sf->c_row_ptr[i + 1];
        *nnz = b - a;
        return b > a ? sfb__blas_norm2((int)(b - a), sf->c_val + a) : 0.0f;
    }
    const float *c = sf->c + (size_t)i * sf->cols;
    uint32_t nz = 0;
    for (uint32_t j = 0; j < sf->cols; j++) nz += c[j] != 0.0f;
    *nnz = nz;
    return sfb__blas_norm2((int)sf->cols, c);
}

static int reserve(void *pp, size_t *cap, size_t bytes)
{
    return sfb__reserve((void **)pp, cap, bytes ? bytes : 1);
}

/* The relative score's row norms of a, floored (see sfb/parts.h). */
static int row_norms(struct sfb__parts *p, const struct sfb_matrix *a)
{
    if (reserve(&p->rownorm, &p->rownorm_cap, (size_t)a->rows * sizeof *p->rownorm)) return -ENOMEM;
    double ss = 0;
    for (uint32_t j = 0; j < a->rows; j++) {
        float n = sfb__blas_norm2((int)a->cols, a->data + (size_t)j * a->cols);
        p->rownorm[j] = n;
        ss += (double)n * n;
    }
    float floor = (float)fmax(1e-3 * sqrt(ss / (a->rows ? a->rows : 1)), 1e-30);
    for (uint32_t j = 0; j < a->rows; j++) p->rownorm[j] = fmaxf(p->rownorm[j], floor);
    return 0;
}

struct sfb__parts_key {
    float score;
    uint32_t i;
};

static int by_score(const void *x, const void *y)
{
    const struct sfb__parts_key *a = x, *b = y;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i; /* stable: equal scores keep computation order */
}

int sfb__parts_plan(struct sfb__parts *p, int policy, const struct sfb_sf *sf,
                    const struct sfb_matrix *a, size_t target, unsigned prec)
{
    size_t e = sfb__wire_elem_size((uint8_t)(prec << SFB_WIRE_F_PREC_SHIFT));
    uint32_t s = sf->s;
    if (reserve(&p->order, &p->order_cap, (size_t)s * sizeof *p->order) ||
        reserve(&p->score, &p->score_cap, (size_t)s * sizeof *p->score) ||
        reserve(&p->first, &p->first_cap, ((size_t)SFB_WIRE_MAX_PARTS + 1) * sizeof *p->first))
        return -ENOMEM;
    if (policy == SFB__PRIORITY_RELATIVE && row_norms(p, a)) return -ENOMEM;
    /* each sample's score and its bytes as the codec sends it (b dense; c
     * dense or CSR, whichever the whole update would pick: estimated per
     * sample as the smaller) */
    size_t total = 0;
    uint32_t nnz;
    for (uint32_t i = 0; i < s; i++) {
        p->order[i] = i;
        const float *b = sf->b + (size_t)i * sf->rows;
        float cn = c_norm(sf, i, &nnz);
        size_t bytes =
            (size_t)sf->rows * e + SFB_MIN((size_t)sf->cols * e, (size_t)nnz * (4 + e) + 4);
        total += bytes;
        float sc = 0;
        if (policy == SFB__PRIORITY_MAGNITUDE) {
            sc = fabsf(sf->scale) * sfb__blas_norm2((int)sf->rows, b) * cn;
        } else if (policy == SFB__PRIORITY_RELATIVE) {
            double r = 0;
            for (uint32_t j = 0; j < sf->rows; j++) {
                double q = b[j] / p->rownorm[j];
                r += q * q;
            }
            sc = (float)(fabsf(sf->scale) * cn * sqrt(r));
        }
        p->score[i] = isfinite(sc) ? sc : 0;
    }
    if (policy != SFB__PRIORITY_FIFO) {
        if (reserve(&p->keyed, &p->keyed_cap, (size_t)s * sizeof *p->keyed)) return -ENOMEM;
        for (uint32_t i = 0; i < s; i++) p->keyed[i] = (struct sfb__parts_key){p->score[i], i};
        qsort(p->keyed, s, sizeof *p->keyed, by_score);
        for (uint32_t i = 0; i < s; i++) p->order[i] = p->keyed[i].i;
    }
    /* cut into parts of about `target` bytes, never more than the wire's
     * limit: then larger parts */
    uint32_t n = target ? (uint32_t)SFB_MIN((total + target - 1) / target, (size_t)s) : 1;
    if (n < 1) n = 1;
    if (n > SFB_WIRE_MAX_PARTS) n = SFB_WIRE_MAX_PARTS;
    /* equal sample counts per part (samples of one update are alike in
     * size, and a fixed split keeps the parts' sizes predictable) */
    for (uint32_t k = 0; k <= n; k++) p->first[k] = (uint32_t)((uint64_t)s * k / n);
    p->n = n;
    return 0;
}

const struct sfb_sf *sfb__parts_gather(struct sfb__parts *p, const struct sfb_sf *sf, uint32_t k,
                                       float *priority)
{
    uint32_t lo = p->first[k], m = p->first[k + 1] - lo;
    const uint32_t *idx = p->order + lo;
    uint64_t nnz = 0;
    if (sf->sparse_c)
        for (uint32_t q = 0; q < m; q++) nnz += sf->c_row_ptr[idx[q] + 1] - sf->c_row_ptr[idx[q]];
    struct sfb_sf *o = &p->sub;
    if (sfb_sf_reserve(o, sf->rows, sf->cols, m, sf->sparse_c, nnz)) return NULL;
    o->scale = sf->scale;
    o->matrix = sf->matrix;
    o->origin = sf->origin;
    o->clock = sf->clock;
    float best = 0;
    uint64_t at = 0;
    if (sf->sparse_c) o->c_row_ptr[0] = 0;
    for (uint32_t q = 0; q < m; q++) {
        uint32_t i = idx[q];
        best = fmaxf(best, p->score[i]);
        memcpy(o->b + (size_t)q * sf->rows, sf->b + (size_t)i * sf->rows, sf->rows * sizeof(float));
        if (!sf->sparse_c) {
            memcpy(o->c + (size_t)q * sf->cols, sf->c + (size_t)i * sf->cols,
                   sf->cols * sizeof(float));
            continue;
        }
        uint32_t a = sf->c_row_ptr[i], b = sf->c_row_ptr[i + 1];
        memcpy(o->c_col + at, sf->c_col + a, (b - a) * sizeof *o->c_col);
        memcpy(o->c_val + at, sf->c_val + a, (b - a) * sizeof *o->c_val);
        at += b - a;
        o->c_row_ptr[q + 1] = (uint32_t)at;
    }
    *priority = best;
    return o;
}

void sfb__parts_free(struct sfb__parts *p)
{
    free(p->order);
    free(p->first);
    free(p->score);
    free(p->rownorm);
    free(p->keyed);
    sfb_sf_free(&p->sub);
    memset(p, 0, sizeof *p);
}

/* Under a budget of R bytes/s, updates travel in parts of about R · 2.5 ms
 * (4 KiB .. 1 MiB) and a relay's message carries at most as much (at least
 * one part): bytes leave in small steps, so the budget's 1-second windows
 * stay within a few percent (measured: bench/managed.py; 10 ms messages and
 * four in flight per link gave windows up to 11 % low, 2.5 ms and two 4 %). Without a
 * budget, a policy other than fifo still needs parts to order (16 KiB) and
 * messages are not capped. */
#define PART_S 0.0025
#define MSG_S 0.0025

int sfb__parts_settings(const char *priority, double rate, uint32_t world, double peer_timeout_s,
                        const struct sfb_matrix *mats, uint32_t n, uint32_t max_s, int *policy,
                        size_t *part_bytes, size_t *msg_cap)
{
    int p = sfb__priority_find(priority ? priority : "fifo");
    if (p < 0)
        return sfb__error(-SFB_EUSAGE, "priority \"%s\": expected %s", priority,
                          sfb__priority_names());
    *policy = p;
    *part_bytes = *msg_cap = 0;
    if (rate > 0) {
        double frame = 0; /* b (dense: s·rows floats) and the headers: a lower bound */
        for (uint32_t m = 0; m < n; m++)
            frame += SFB_WIRE_HDR_SIZE + SFB_SF_PREFIX + SFB_WIRE_PART_PREFIX +
                     4.0 * max_s * mats[m].rows;
        if (world > 1 && rate * peer_timeout_s < frame)
            return sfb__error(-SFB_EUSAGE,
                              "bandwidth budget of %.0f bytes/s: one clock's factors to one "
                              "peer (at least %.0f bytes) would take %.1f s, longer than the "
                              "peer timeout (%g s); give at least %.0f bytes/s (%.3g Mbit/s)",
                              rate, frame, frame / rate, peer_timeout_s,
                              ceil(frame / peer_timeout_s), 8 * frame / peer_timeout_s / 1e6);
        *part_bytes = (size_t)fmin(fmax(rate * PART_S, 4096), 1 << 20);
        *msg_cap = (size_t)fmax(rate * MSG_S, (double)*part_bytes);
    } else if (p != SFB__PRIORITY_FIFO) {
        *part_bytes = 16384;
    }
    return 0;
}
