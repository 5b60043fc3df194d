/* Runs a sync engine (sfb/sync.h) on every rank of an in-process loopback
 * (src/comm/comm_loopback.h): the training loop's shape (wait → publish, then
 * drain) with sufficient factors made of small integers, so that every sum
 * is exact in float whatever its order and replicas can be compared with a
 * reference bit for bit. Shared by test_relay, test_broadcast and test_fms. */
#ifndef SFB_TEST_ENGINE_UTIL_H
#define SFB_TEST_ENGINE_UTIL_H

#include <sfb/model.h>
#include <sfb/sf.h>
#include "sfb/codec.h"
#include "sfb/sync.h"
#include "src/base/util.h"
#include "src/comm/comm_loopback.h"
#include "src/comm/comm_impl.h"
#include "src/ssp/ssp.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENG_MAX_RANKS  16
#define ENG_MAX_CLOCKS 24

struct eng_cfg {
    const struct sfb__sync_ops *ops;
    uint32_t world;
    uint32_t k, d; /* mlr classes and features: the matrix is k × (d + 1) */
    uint32_t s;    /* samples per SF */
    int64_t clocks, staleness;
    int apply_early, flush_clock;
    int ordered; /* sfb_job_attach.ordered: a clock's updates together, in rank order */
    const char *topology;
    uint32_t degree;
    int slow_rank; /* -1: none; else this rank yields slow_yields times per clock */
    int slow_yields;
    int check_each_wait; /* s = 0: after every wait the replica equals the reference */
    int priority;        /* managed communication (sfb/parts.h): the policy, */
    size_t part_bytes, msg_cap; /* the parts' size and the relay's message cap */
    /* a hostile or broken rank: 1 puts a NaN into b, 2 makes the scale
     * infinite, of rank poison_rank's factors of clock poison_clock (0: none);
     * 3 (with dense): that rank first publishes the update with a NaN in its
     * last number, then with its first number overflowing scale · delta,
     * each of which must be refused (-ERANGE, the index, nothing sent),
     * then the true one; 4 (FMS, factors): every rank publishes through
     * ops->publish_one with the product checked (bad non-NULL), and that
     * rank first with a NaN in its last sample's last row, then with
     * factors whose product overflows in its first number, each refused
     * (-ERANGE, the index of the product's first bad number, nothing
     * sent), then the true one (one worker: the NaN only, refused as the
     * factors' check, *bad 0) */
    int poison;
    uint32_t poison_rank;
    int64_t poison_clock;
    /* SFB's factor precision (sfb__sync_env.factor_prec): SFB_WIRE_F32 (0)
     * or SFB_WIRE_BF16; other_prec_rank r + 1: rank r runs the other one
     * (0: none) */
    unsigned factor_prec;
    uint32_t other_prec_rank;
    /* 1: factors bfloat16 cannot hold (eng_inexact), whose rounded sums
     * are still exact in float */
    int inexact;
    /* FMS's rows' precision (sfb__sync_env.dense_prec), every rank's */
    unsigned dense_prec;
    /* 1: every rank publishes its update dense (ops->publish_dense: the
     * factors' product, exact in float) instead of its factors */
    int dense;
    /* with dense: each update written into a comm buffer handed to the
     * engine as `staged` (sfb_job_dense_buffer's), which FMS keeps and sends
     * from (float32, more than one rank: the test checks it holds a
     * reference after the publish, and that a refused one wrote nothing) */
    int staged;
};

struct eng_rank {
    struct sfb_model *model;
    struct sfb__ssp ssp;
    struct sfb_sf sf;
    struct sfb__sync_report rep;
    uint64_t per_origin[ENG_MAX_RANKS];
    uint64_t data_msgs[ENG_MAX_CLOCKS], data_bytes[ENG_MAX_CLOCKS]; /* after publish(t) */
    int64_t slow_pub_at_entry[ENG_MAX_CLOCKS], slow_pub_at_return[ENG_MAX_CLOCKS];
    int64_t slow_applied[ENG_MAX_CLOCKS]; /* the slow rank's applied clock, after wait(t) */
    char why[512]; /* sfb_error_message of its failure, if it failed */
};

struct eng_run {
    struct eng_cfg cfg;
    uint32_t rows, cols;
    double *ref; /* (clocks + 1) matrices: ref[t] = Σ over every origin's clocks < t */
    int64_t pub[ENG_MAX_RANKS]; /* last clock each rank published */
    struct eng_rank r[ENG_MAX_RANKS];
};

/* Rank o's factors of clock t: b ∈ {−2..2}, c ∈ ±{1, 2, 3} (never zero, so
 * every frame is dense and of one size), scale 1. */
static inline int eng_make_sf(struct sfb_sf *sf, uint32_t rows, uint32_t cols, uint32_t s,
                              uint32_t o, int64_t t)
{
    int ret = sfb_sf_reserve(sf, rows, cols, s, 0, 0);
    if (ret) return ret;
    sf->matrix = 0;
    sf->origin = o;
    sf->clock = t;
    sf->scale = 1.0f;
    uint32_t tt = (uint32_t)t;
    for (uint32_t i = 0; i < s; i++) {
        for (uint32_t j = 0; j < rows; j++)
            sf->b[(size_t)i * rows + j] = (float)((int)((o * 5 + tt * 3 + i * 7 + j * 11) % 5) - 2);
        for (uint32_t j = 0; j < cols; j++) {
            int v = (int)((o * 3 + tt * 7 + i * 5 + j * 13) % 3) + 1;
            sf->c[(size_t)i * cols + j] = (float)(((o + tt + i + j) & 1) ? -v : v);
        }
    }
    return 0;
}

/* cfg.dense: sf's update as a dense matrix (scale · BᵀC, exact: small
 * integers) through ops->publish_dense; cfg.poison 3 first tries the two
 * refused ones (see struct eng_cfg). */
static inline int eng_publish_dense(const struct eng_cfg *cfg, struct sfb__comm *c, void *priv,
                                    uint32_t r, int64_t t, const struct sfb_sf *sf)
{
    size_t n = (size_t)sf->rows * sf->cols, bad = 0;
    struct sfb__buf *sb = NULL;
    float *d = NULL;
    if (cfg->staged && !sfb__comm_buf_get(c, n * sizeof *d, &sb)) {
        d = (float *)(void *)sb->data;
        memset(d, 0, n * sizeof *d);
    } else if (!cfg->staged) {
        d = calloc(n, sizeof *d);
    }
    if (!d) return -ENOMEM;
    for (uint32_t i = 0; i < sf->rows; i++)
        for (uint32_t j = 0; j < sf->cols; j++)
            for (uint32_t k = 0; k < sf->s; k++)
                d[(size_t)i * sf->cols + j] +=
                    sf->scale * sf->b[(size_t)k * sf->rows + i] * sf->c[(size_t)k * sf->cols + j];
    int ret = 0;
    if (cfg->poison == 3 && r == cfg->poison_rank && t == cfg->poison_clock) {
        struct sfb__sync_report before, after;
        cfg->ops->report(priv, &before);
        float last = d[n - 1], first = d[0];
        d[n - 1] = NAN;
        float *keep = malloc(n * sizeof *d);
        if (!keep) return -ENOMEM;
        memcpy(keep, d, n * sizeof *d);
        int r1 = cfg->ops->publish_dense(priv, t, 0, 1.0f, d, sb, &bad);
        size_t bad1 = bad;
        int kept = memcmp(keep, d, n * sizeof *d) == 0 && (!sb || atomic_load(&sb->refs) == 1);
        free(keep);
        d[n - 1] = last;
        d[0] = 3e38f; /* × 2: beyond float32 */
        int r2 = cfg->ops->publish_dense(priv, t, 0, 2.0f, d, sb, &bad);
        d[0] = first;
        if (!kept)
            ret = sfb__error(-EPROTO, "rank %u: a refused dense update changed the staged buffer "
                             "or kept a reference to it", r);
        cfg->ops->report(priv, &after);
        if (!ret && (r1 != -ERANGE || bad1 != n - 1 || r2 != -ERANGE || bad != 0 ||
                     after.data_msgs != before.data_msgs))
            ret = sfb__error(-EPROTO, "rank %u: refused dense updates: %d at %zu (want %d at "
                             "%zu), %d at %zu (want at 0), %llu messages sent", r, r1, bad1,
                             -ERANGE, n - 1, r2, bad,
                             (unsigned long long)(after.data_msgs - before.data_msgs));
    }
    if (!ret) ret = cfg->ops->publish_dense(priv, t, 0, 1.0f, d, sb, &bad);
    if (!sb) {
        free(d);
        return ret;
    }
    /* float32 among several ranks: FMS sends from it, held until applied */
    int refs = atomic_load(&sb->refs), want = cfg->dense_prec == SFB_WIRE_F32 && cfg->world > 1;
    if (!ret && (want ? refs < 2 : refs != 1))
        ret = sfb__error(-EPROTO, "rank %u, clock %lld: the staged buffer has %d references "
                         "after the publish (want %s)", r, (long long)t, refs,
                         want ? "the engine's too" : "the caller's alone");
    sfb__buf_put(sb);
    return ret;
}

/* cfg.poison 4: sf through ops->publish_one, the engine checking the
 * product (see struct eng_cfg). */
static inline int eng_publish_checked(const struct eng_cfg *cfg, void *priv, uint32_t r,
                                      int64_t t, struct sfb_sf *sf)
{
    size_t bad = SIZE_MAX;
    int ret = 0;
    if (r == cfg->poison_rank && t == cfg->poison_clock) {
        struct sfb__sync_report before, after;
        cfg->ops->report(priv, &before);
        size_t last = (size_t)(sf->s - 1) * sf->rows + sf->rows - 1;
        float keep_b = sf->b[last], b0 = sf->b[0], c0 = sf->c[0], scale = sf->scale;
        sf->b[last] = NAN; /* the product's last row */
        int r1 = cfg->ops->publish_one(priv, t, 0, sf, &bad);
        size_t bad1 = bad;
        sf->b[last] = keep_b;
        int r2 = -ERANGE;
        bad = 0;
        if (cfg->world > 1) { /* (one worker: its own product, unchecked) */
            sf->b[0] = 3e38f; /* × 1 × 2 and more: beyond float32 at [0][0] */
            sf->c[0] = 1;
            sf->scale = 2;
            bad = SIZE_MAX;
            r2 = cfg->ops->publish_one(priv, t, 0, sf, &bad);
            sf->b[0] = b0;
            sf->c[0] = c0;
            sf->scale = scale;
        }
        cfg->ops->report(priv, &after);
        /* one worker: the factors checked, any index */
        size_t row = cfg->world > 1 ? (size_t)(sf->rows - 1) * sf->cols : 0;
        if (r1 != -ERANGE || bad1 != row || r2 != -ERANGE || bad != 0 ||
            after.data_msgs != before.data_msgs)
            ret = sfb__error(-EPROTO, "rank %u: refused factors: %d at %zu (want %d at %zu), "
                             "%d at %zu (want at 0), %llu messages sent", r, r1, bad1, -ERANGE,
                             row, r2, bad,
                             (unsigned long long)(after.data_msgs - before.data_msgs));
    }
    return ret ? ret : cfg->ops->publish_one(priv, t, 0, sf, &bad);
}

/* cfg.inexact: every non-zero b and every c moved away from zero by 1, 2
 * or 3 · 2^-9, which bfloat16 (8 significant bits) rounds: down, to even
 * (a tie) or up at |v| = 1, down at 2 and 3. The rounded factors are
 * multiples of 2^-7 under 3.1 in magnitude, so every sum of a few hundred
 * of their products is exact in float, in any order. */
static inline void eng_inexact(struct sfb_sf *sf, uint32_t o, int64_t t)
{
    uint32_t tt = (uint32_t)t;
    for (uint32_t i = 0; i < sf->s; i++) {
        for (uint32_t j = 0; j < sf->rows; j++) {
            float *v = &sf->b[(size_t)i * sf->rows + j];
            float k = (float)(1 + (o + tt * 3 + i + j * 5) % 3) / 512.0f;
            if (*v != 0.0f) *v += *v > 0 ? k : -k;
        }
        for (uint32_t j = 0; j < sf->cols; j++) {
            float *v = &sf->c[(size_t)i * sf->cols + j];
            float k = (float)(1 + (o * 2 + tt + i * 3 + j) % 3) / 512.0f;
            *v += *v > 0 ? k : -k;
        }
    }
}

/* Rank r's factor precision. */
static inline unsigned eng_prec(const struct eng_cfg *cfg, uint32_t r)
{
    if (cfg->other_prec_rank != r + 1) return cfg->factor_prec;
    return cfg->factor_prec == SFB_WIRE_BF16 ? SFB_WIRE_F32 : SFB_WIRE_BF16;
}

/* Rank o's factors of clock t as its frames carry them (cfg.inexact,
 * cfg.factor_prec): what every replica must add. */
static inline void eng_as_sent(const struct eng_cfg *cfg, struct sfb_sf *sf, uint32_t o, int64_t t)
{
    if (cfg->inexact) eng_inexact(sf, o, t);
    if (eng_prec(cfg, o) != SFB_WIRE_BF16) return;
    for (size_t i = 0; i < (size_t)sf->s * sf->rows; i++)
        sf->b[i] = sfb__bf16_to_f32(sfb__bf16_from_f32(sf->b[i]));
    for (size_t i = 0; i < (size_t)sf->s * sf->cols; i++)
        sf->c[i] = sfb__bf16_to_f32(sfb__bf16_from_f32(sf->c[i]));
}

/* ΔA of (o, t) added to m (rows × cols), straight from the definition. */
static inline void eng_add_delta(const struct eng_run *run, double *m, uint32_t o, int64_t t)
{
    struct sfb_sf sf = {0};
    if (eng_make_sf(&sf, run->rows, run->cols, run->cfg.s, o, t)) abort();
    eng_as_sent(&run->cfg, &sf, o, t);
    for (uint32_t i = 0; i < sf.s; i++)
        for (uint32_t j = 0; j < run->rows; j++)
            for (uint32_t l = 0; l < run->cols; l++)
                m[(size_t)j * run->cols + l] +=
                    (double)sf.b[(size_t)i * run->rows + j] * sf.c[(size_t)i * run->cols + l];
    sfb_sf_free(&sf);
}

/* Whether every number of rank r's replica is finite (no NaN reached it). */
static inline int eng_replica_finite(const struct eng_run *run, uint32_t r)
{
    const struct sfb_matrix *a = sfb_model_matrix(run->r[r].model, 0);
    for (size_t i = 0; i < (size_t)a->rows * a->cols; i++)
        if (!isfinite(a->data[i])) return 0;
    return 1;
}

/* Whether rank r's replica equals ref[t] exactly; prints the first difference. */
static inline int eng_replica_is(struct eng_run *run, uint32_t r, int64_t t, const char *when)
{
    const struct sfb_matrix *a = sfb_model_matrix(run->r[r].model, 0);
    const double *ref = run->ref + (size_t)t * run->rows * run->cols;
    for (size_t i = 0; i < (size_t)run->rows * run->cols; i++)
        if ((double)a->data[i] != ref[i]) {
            fprintf(stderr, "  rank %u %s clock %lld: element %zu is %g, the reference %g\n", r,
                    when, (long long)t, i, (double)a->data[i], ref[i]);
            return 0;
        }
    return 1;
}

static inline int eng_rank_main(struct sfb__comm *c, uint32_t r, void *arg)
{
    struct eng_run *run = arg;
    const struct eng_cfg *cfg = &run->cfg;
    struct eng_rank *er = &run->r[r];
    const uint8_t prec = (uint8_t)eng_prec(cfg, r), dense_prec = (uint8_t)cfg->dense_prec;
    struct sfb__sync_env env = {.comm = c,
                                .mats = sfb_model_matrix(er->model, 0),
                                .nmat = 1,
                                .ssp = &er->ssp,
                                .apply_early = cfg->apply_early,
                                .ordered = cfg->ordered,
                                .staleness = cfg->staleness,
                                .topology = cfg->topology,
                                .degree = cfg->degree,
                                .flush_clock = cfg->flush_clock,
                                .priority = cfg->priority,
                                .part_bytes = cfg->part_bytes,
                                .msg_cap = cfg->msg_cap,
                                .factor_prec = &prec,
                                .dense_prec = &dense_prec};
    void *priv = calloc(1, cfg->ops->priv_size);
    if (!priv) return -ENOMEM;
    int ret = cfg->ops->open(priv, &env);
    if (ret) {
        free(priv);
        return ret;
    }
    for (int64_t t = 0; t < cfg->clocks && !ret; t++) {
        if ((int)r == cfg->slow_rank)
            for (int y = 0; y < cfg->slow_yields; y++)
                sfb__loopback_yield(c);
        struct sfb__sync_clock acct = {0};
        int64_t slow = cfg->slow_rank;
        er->slow_pub_at_entry[t] = slow >= 0 ? run->pub[slow] : 0;
        if ((ret = cfg->ops->wait(priv, t, &acct))) break;
        er->slow_pub_at_return[t] = slow >= 0 ? run->pub[slow] : 0;
        er->slow_applied[t] = slow >= 0 ? sfb__ssp_applied(&er->ssp, (uint32_t)slow) : 0;
        if ((ret = sfb__ssp_record(&er->ssp, t))) break;
        if (cfg->check_each_wait && !eng_replica_is(run, r, t, "after waiting for")) {
            ret = sfb__error(-EPROTO, "the replica differs from the reference (above)");
            break;
        }
        if ((ret = eng_make_sf(&er->sf, run->rows, run->cols, cfg->s, r, t))) break;
        if (cfg->inexact) eng_inexact(&er->sf, r, t);
        if ((cfg->poison == 1 || cfg->poison == 2) && r == cfg->poison_rank &&
            t == cfg->poison_clock) {
            if (cfg->poison == 1) er->sf.b[1] = NAN;
            else er->sf.scale = INFINITY;
        }
        if (cfg->dense)
            ret = eng_publish_dense(cfg, c, priv, r, t, &er->sf);
        else if (cfg->poison == 4)
            ret = eng_publish_checked(cfg, priv, r, t, &er->sf);
        else
            ret = cfg->ops->publish(priv, t, &er->sf, 1);
        if (ret) break;
        run->pub[r] = t;
        struct sfb__sync_report rep;
        cfg->ops->report(priv, &rep);
        er->data_msgs[t] = rep.data_msgs;
        er->data_bytes[t] = rep.data_bytes;
    }
    struct sfb__sync_clock acct = {0};
    if (!ret) ret = cfg->ops->drain(priv, cfg->clocks - 1, &acct);
    /* as sfb__comm_finish: nobody closes (stops relaying) before all drained */
    if (!ret) ret = sfb__comm_barrier(c);
    cfg->ops->report(priv, &er->rep);
    for (uint32_t o = 0; o < cfg->world && er->rep.per_origin; o++)
        er->per_origin[o] = er->rep.per_origin[o];
    if (ret) snprintf(er->why, sizeof er->why, "%s", sfb_error_message(ret));
    cfg->ops->close(priv);
    free(priv);
    return ret;
}

static inline void eng_fini(struct eng_run *run)
{
    for (uint32_t r = 0; r < run->cfg.world; r++) {
        sfb_model_close(&run->r[r].model);
        sfb__ssp_fini(&run->r[r].ssp);
        sfb_sf_free(&run->r[r].sf);
    }
    free(run->ref);
    run->ref = NULL;
}

/* Models, clock tables and the reference; *lb with the frame shapes set. */
static inline int eng_init(struct eng_run *run, const struct eng_cfg *cfg,
                           struct sfb__loopback **lb)
{
    memset(run, 0, sizeof *run);
    run->cfg = *cfg;
    if (cfg->world > ENG_MAX_RANKS || cfg->clocks > ENG_MAX_CLOCKS) return -EINVAL;
    for (uint32_t r = 0; r < cfg->world; r++) {
        struct sfb_model_settings ms;
        sfb_model_default_settings(&ms);
        ms.kind = "mlr";
        ms.k = cfg->k;
        ms.d = cfg->d;
        int ret = sfb_model_open(&run->r[r].model, &ms);
        if (!ret) ret = sfb__ssp_init(&run->r[r].ssp, cfg->world, cfg->staleness, 0);
        if (ret) return ret;
        run->pub[r] = -1;
    }
    const struct sfb_matrix *a = sfb_model_matrix(run->r[0].model, 0);
    run->rows = a->rows;
    run->cols = a->cols;
    size_t mat = (size_t)run->rows * run->cols;
    run->ref = calloc((size_t)(cfg->clocks + 1) * mat, sizeof *run->ref);
    if (!run->ref) return -ENOMEM;
    for (int64_t t = 1; t <= cfg->clocks; t++) {
        double *m = run->ref + (size_t)t * mat;
        memcpy(m, m - mat, mat * sizeof *m);
        for (uint32_t o = 0; o < cfg->world; o++)
            eng_add_delta(run, m, o, t - 1);
    }
    *lb = NULL;
    if (cfg->world == 1) return 0; /* no loopback of one rank: eng_run_single */
    struct sfb__comm_settings cs;
    sfb__comm_default_settings(&cs);
    struct sfb__wire_shape shape = {run->rows, run->cols};
    cs.shapes = &shape;
    cs.nshapes = 1;
    cs.max_s = cfg->s;
    return sfb__loopback_open(lb, cfg->world, &cs);
}

/* A job of one worker (eng_init with world 1): its engine on a comm of
 * one rank, which has no peers (and no comm pool). */
static inline int eng_run_single(struct eng_run *run)
{
    struct sfb__comm_settings cs;
    sfb__comm_default_settings(&cs);
    cs.world = 1;
    cs.rank = 0;
    struct sfb__comm *c = NULL;
    int ret = sfb__comm_open(&c, &cs);
    if (!ret) ret = eng_rank_main(c, 0, run);
    sfb__comm_close(&c);
    return ret;
}

#endif
