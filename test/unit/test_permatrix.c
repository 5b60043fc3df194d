/* Several matrices in one job on an in-process loopback (src/comm/comm_loopback.h):
 * each by its own engine (sfb/permatrix.c) or all by SFB (sfb/broadcast.c
 * carrying several). Factors are small integers, so every sum is exact in
 * float whatever its order: at the end every replica of every matrix equals
 * the sum of every origin's every clock, whichever engine carried it; at
 * s = 0 it does after every wait too; and the job's clock table keeps the SSP
 * guarantee (the minimum applied clock when clock t began is ≥ t − s − 1). */
#include "engine_util.h"
#include "sfb/codec.h"
#include "src/wire/wire.h"

#define PM_NMAT 3

/* Shapes: an SFB-shaped, an FMS-shaped (few rows, fewer than some worlds'
 * ranks: empty blocks) and a square matrix. */
static const uint32_t rows_of[PM_NMAT] = {6, 2, 5}, cols_of[PM_NMAT] = {4, 7, 5};

struct pm_cfg {
    const struct sfb__sync_ops *ops; /* the job's engine */
    const struct sfb__sync_desc *engine_of[PM_NMAT];
    uint32_t world, s;
    int64_t clocks, staleness;
    int apply_early;
    const char *topology;
    int slow_rank;
    uint8_t prec[PM_NMAT]; /* env.factor_prec (the factors are bfloat16's too) */
};

struct pm_rank {
    struct sfb_matrix m[PM_NMAT];
    struct sfb__ssp ssp;
    struct sfb_sf sf[PM_NMAT];
    uint64_t data_msgs, data_bytes;
};

struct pm_run {
    struct pm_cfg cfg;
    double *ref[PM_NMAT]; /* (clocks + 1) matrices each: Σ of every origin's clocks < t */
    struct pm_rank r[ENG_MAX_RANKS];
    int bad_wait; /* s = 0: a replica that differed after a wait */
};

static int replica_is(const struct pm_run *run, uint32_t r, int64_t t)
{
    for (uint32_t m = 0; m < PM_NMAT; m++) {
        size_t n = (size_t)rows_of[m] * cols_of[m];
        const double *ref = run->ref[m] + (size_t)t * n;
        for (size_t i = 0; i < n; i++)
            if ((double)run->r[r].m[m].data[i] != ref[i]) {
                fprintf(stderr, "  rank %u clock %lld matrix %u element %zu: %g, reference %g\n",
                        r, (long long)t, m, i, (double)run->r[r].m[m].data[i], ref[i]);
                return 0;
            }
    }
    return 1;
}

/* A loopback of `world` ranks whose frames have the three shapes. */
static int open_loopback(struct sfb__loopback **lb, uint32_t world, uint32_t max_s)
{
    struct sfb__comm_settings cs;
    sfb__comm_default_settings(&cs);
    struct sfb__wire_shape shapes[PM_NMAT];
    for (uint32_t m = 0; m < PM_NMAT; m++) shapes[m] = (struct sfb__wire_shape){rows_of[m], cols_of[m]};
    cs.shapes = shapes;
    cs.nshapes = PM_NMAT;
    cs.max_s = max_s;
    return sfb__loopback_open(lb, world, &cs);
}

static int rank_main(struct sfb__comm *c, uint32_t r, void *arg)
{
    struct pm_run *run = arg;
    const struct pm_cfg *cfg = &run->cfg;
    struct pm_rank *pr = &run->r[r];
    struct sfb__sync_env env = {.comm = c,
                                .mats = pr->m,
                                .nmat = PM_NMAT,
                                .ssp = &pr->ssp,
                                .apply_early = cfg->apply_early,
                                .staleness = cfg->staleness,
                                .topology = cfg->topology,
                                .engine_of = cfg->engine_of,
                                .factor_prec = cfg->prec};
    void *priv = calloc(1, cfg->ops->priv_size);
    if (!priv) return -ENOMEM;
    int ret = cfg->ops->open(priv, &env);
    if (ret) {
        free(priv);
        return ret;
    }
    for (int64_t t = 0; t < cfg->clocks && !ret; t++) {
        if ((int)r == cfg->slow_rank)
            for (int y = 0; y < 3; y++) sfb__loopback_yield(c);
        struct sfb__sync_clock acct = {0};
        if ((ret = cfg->ops->wait(priv, t, &acct))) break;
        if ((ret = sfb__ssp_record(&pr->ssp, t))) break;
        if (cfg->staleness == 0 && !replica_is(run, r, t)) run->bad_wait = 1;
        for (uint32_t m = 0; m < PM_NMAT && !ret; m++) {
            ret = eng_make_sf(&pr->sf[m], rows_of[m], cols_of[m], cfg->s, r, t + 40 * m);
            pr->sf[m].matrix = m;
            pr->sf[m].clock = t;
        }
        if (!ret) ret = cfg->ops->publish(priv, t, pr->sf, PM_NMAT);
    }
    struct sfb__sync_clock acct = {0};
    if (!ret) ret = cfg->ops->drain(priv, cfg->clocks - 1, &acct);
    if (!ret) ret = sfb__comm_barrier(c);
    struct sfb__sync_report rep;
    cfg->ops->report(priv, &rep);
    pr->data_msgs = rep.data_msgs;
    pr->data_bytes = rep.data_bytes;
    cfg->ops->close(priv);
    free(priv);
    return ret;
}

static void pm_fini(struct pm_run *run)
{
    for (uint32_t r = 0; r < run->cfg.world; r++) {
        for (uint32_t m = 0; m < PM_NMAT; m++) {
            free(run->r[r].m[m].data);
            sfb_sf_free(&run->r[r].sf[m]);
        }
        sfb__ssp_fini(&run->r[r].ssp);
    }
    for (uint32_t m = 0; m < PM_NMAT; m++) free(run->ref[m]);
}

/* ΔA of matrix m, origin o, clock t added to `out`, from the definition. */
static void add_delta(double *out, uint32_t m, uint32_t s, uint32_t o, int64_t t)
{
    struct sfb_sf sf = {0};
    if (eng_make_sf(&sf, rows_of[m], cols_of[m], s, o, t + 40 * m)) abort();
    for (uint32_t i = 0; i < s; i++)
        for (uint32_t j = 0; j < rows_of[m]; j++)
            for (uint32_t l = 0; l < cols_of[m]; l++)
                out[(size_t)j * cols_of[m] + l] +=
                    (double)sf.b[(size_t)i * rows_of[m] + j] * sf.c[(size_t)i * cols_of[m] + l];
    sfb_sf_free(&sf);
}

static uint64_t last_bytes; /* run_pm: the data bytes rank 0 sent */

static int run_pm(const struct pm_cfg *cfg)
{
    struct pm_run *run = calloc(1, sizeof *run);
    ASSERT(run);
    run->cfg = *cfg;
    int ok = 1;
    for (uint32_t r = 0; r < cfg->world && ok; r++) {
        for (uint32_t m = 0; m < PM_NMAT; m++) {
            run->r[r].m[m] = (struct sfb_matrix){rows_of[m], cols_of[m],
                                                 calloc((size_t)rows_of[m] * cols_of[m], 4)};
            ok &= run->r[r].m[m].data != NULL;
        }
        ok &= sfb__ssp_init(&run->r[r].ssp, cfg->world, cfg->staleness, 0) == 0;
    }
    for (uint32_t m = 0; m < PM_NMAT && ok; m++) {
        size_t n = (size_t)rows_of[m] * cols_of[m];
        run->ref[m] = calloc((size_t)(cfg->clocks + 1) * n, sizeof(double));
        if (!(ok = run->ref[m] != NULL)) break;
        for (int64_t t = 1; t <= cfg->clocks; t++) {
            double *a = run->ref[m] + (size_t)t * n;
            memcpy(a, a - n, n * sizeof *a);
            for (uint32_t o = 0; o < cfg->world; o++) add_delta(a, m, cfg->s, o, t - 1);
        }
    }
    struct sfb__loopback *lb = NULL;
    int ret = ok ? open_loopback(&lb, cfg->world, cfg->s) : -ENOMEM;
    int rets[ENG_MAX_RANKS] = {0};
    if (!ret) ret = sfb__loopback_run(lb, rank_main, run, rets);
    int fails = 0;
    if (ret) {
        fprintf(stderr, "  run: %s\n", sfb_last_error());
        fails++;
    }
    for (uint32_t r = 0; r < cfg->world && !ret; r++) {
        if (!replica_is(run, r, cfg->clocks)) fails++;
        /* the job's table: the SSP guarantee at every clock */
        for (int64_t t = 0; t < cfg->clocks; t++)
            if (cfg->staleness >= 0 && run->r[r].ssp.record[t] < t - cfg->staleness - 1) {
                fprintf(stderr, "  rank %u began clock %lld with min applied %lld\n", r,
                        (long long)t, (long long)run->r[r].ssp.record[t]);
                fails++;
            }
        if (sfb__ssp_min_applied(&run->r[r].ssp) != cfg->clocks - 1) fails++;
        if (run->r[r].data_msgs == 0) fails++;
    }
    if (run->bad_wait) fails++;
    last_bytes = run->r[0].data_bytes;
    sfb__loopback_close(&lb);
    pm_fini(run);
    free(run);
    ASSERT_EQ(fails, 0);
    return 0;
}

#define BC &sfb__broadcast_ops
#define FM &sfb__fms_ops
#define PM &sfb__permatrix_ops
#define BD &sfb__broadcast_desc
#define FD &sfb__fms_desc

static int test_mixed_bsp(void)
{
    struct pm_cfg c = {PM, {BD, FD, BD}, 3, 2, 6, 0, 0, NULL, -1, {0}};
    return run_pm(&c);
}

static int test_mixed_other_way(void)
{
    struct pm_cfg c = {PM, {FD, BD, FD}, 4, 3, 5, 0, 0, NULL, -1, {0}};
    return run_pm(&c);
}

static int test_all_fms(void)
{
    struct pm_cfg c = {PM, {FD, FD, FD}, 3, 2, 5, 0, 0, NULL, -1, {0}};
    return run_pm(&c);
}

/* the SFB engine alone with several matrices: a clock counts as applied
 * only once every matrix of it is */
static int test_sfb_several(void)
{
    struct pm_cfg c = {BC, {0}, 4, 2, 6, 0, 0, NULL, -1, {0}};
    return run_pm(&c);
}

static int test_mixed_ssp_slow(void)
{
    struct pm_cfg c = {PM, {BD, FD, FD}, 4, 2, 8, 2, 1, NULL, 2, {0}};
    return run_pm(&c);
}

static int test_mixed_halton(void)
{
    struct pm_cfg c = {PM, {BD, FD, BD}, 7, 2, 5, 1, 1, "halton", 3, {0}};
    return run_pm(&c);
}

/* Factors in bfloat16 for some matrices, float32 for others, in one SFB
 * engine and across the per-matrix one (which hands each sub-engine its
 * matrices' precisions; FMS ignores them): a precision given to the wrong
 * matrix would fail the job (a frame of another precision is refused). */
static int test_bf16_some(void)
{
    const uint8_t B = SFB_WIRE_BF16;
    struct pm_cfg cfgs[] = {{BC, {0}, 4, 2, 6, 0, 0, NULL, -1, {B, 0, B}},
                            {PM, {FD, BD, BD}, 4, 2, 6, 0, 0, NULL, -1, {B, 0, B}},
                            {PM, {BD, FD, BD}, 7, 2, 5, 1, 1, "halton", 3, {0, B, B}}};
    for (size_t i = 0; i < SFB_ARRAY_LEN(cfgs); i++) {
        struct pm_cfg f32 = cfgs[i];
        memset(f32.prec, 0, sizeof f32.prec);
        ASSERT_OK(run_pm(&f32));
        uint64_t bytes = last_bytes;
        ASSERT_OK(run_pm(&cfgs[i]));
        ASSERT_LT(last_bytes, bytes); /* the bf16 matrices went in fewer bytes */
    }
    return 0;
}

/* Rank 1 of 2 gets origin 0's clock-0 frames of matrices 0 and 2 straight
 * into the SFB engine (no network), then a replay, then matrix 1's: the
 * clock counts as applied only after the last matrix, and the replay is not
 * applied twice. */
struct split {
    struct sfb_matrix m[PM_NMAT];
    struct sfb__ssp ssp;
    int64_t applied_after[3];
    float first[3];
};

static int give(struct sfb__comm *c, void *priv, uint32_t m)
{
    struct sfb_sf sf = {0};
    int ret = eng_make_sf(&sf, rows_of[m], cols_of[m], 2, 0, 40 * m);
    int sparse = 0;
    uint64_t nnz;
    size_t size = ret ? 0 : sfb__sf_choose(&sf, SFB_WIRE_F32, &sparse, &nnz);
    struct sfb__buf *buf = NULL;
    if (!ret) ret = sfb__comm_buf_get(c, SFB_WIRE_HDR_SIZE + size, &buf);
    if (!ret)
        ret = sfb__sf_encode(&sf, sparse, nnz, SFB_WIRE_F32, buf->data + SFB_WIRE_HDR_SIZE, size);
    struct sfb__wire_hdr h = {.type = SFB_WIRE_SF, .flags = sparse ? SFB_WIRE_F_SPARSE : 0,
                              .origin = 0, .sender = 0, .clock = 0, .matrix = m,
                              .k = rows_of[m], .d = cols_of[m], .s = 2, .payload_len = size};
    struct sfb__wire_piece piece = {buf ? buf->data + SFB_WIRE_HDR_SIZE : NULL, size};
    if (!ret) ret = sfb__comm_header(c, &h, &piece, 1, buf->data);
    sfb_sf_free(&sf);
    if (ret) {
        if (buf) sfb__buf_put(buf);
        return ret;
    }
    struct sfb__frame f = {buf, buf->data, SFB_WIRE_HDR_SIZE + size, 0, 1};
    struct sfb__sync_waiter w;
    sfb__broadcast_ops.waiter(priv, &w);
    w.take(w.priv, &f); /* takes the reference */
    struct sfb__sync_clock acct = {0};
    return w.progress(w.priv, INT64_MAX, 1, 0, &acct);
}

static int split_main(struct sfb__comm *c, uint32_t r, void *arg)
{
    struct split *sp = arg;
    if (r != 1) return sfb__comm_barrier(c);
    struct sfb__sync_env env = {.comm = c, .mats = sp->m, .nmat = PM_NMAT, .ssp = &sp->ssp,
                                .apply_early = 1};
    void *priv = calloc(1, sfb__broadcast_ops.priv_size);
    int ret = priv ? sfb__broadcast_ops.open(priv, &env) : -ENOMEM;
    if (ret) {
        free(priv);
        return ret;
    }
    static const uint32_t order[4] = {0, 2, 0, 1};
    for (int i = 0; i < 4 && !ret; i++) {
        ret = give(c, priv, order[i]);
        if (i < 3) sp->applied_after[i] = sfb__ssp_applied(&sp->ssp, 0);
        if (i == 1) sp->first[0] = sp->m[0].data[0];
        if (i == 2) sp->first[1] = sp->m[0].data[0];
    }
    sp->first[2] = sfb__ssp_applied(&sp->ssp, 0);
    sfb__broadcast_ops.close(priv);
    free(priv);
    if (!ret) ret = sfb__comm_barrier(c);
    return ret;
}

static int test_sfb_split_arrival(void)
{
    struct split sp = {0};
    for (uint32_t m = 0; m < PM_NMAT; m++)
        sp.m[m] = (struct sfb_matrix){rows_of[m], cols_of[m],
                                      calloc((size_t)rows_of[m] * cols_of[m], 4)};
    ASSERT_OK(sfb__ssp_init(&sp.ssp, 2, 0, 0));
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(open_loopback(&lb, 2, 2));
    int ret = sfb__loopback_run(lb, split_main, &sp, NULL);
    sfb__loopback_close(&lb);
    /* the reference: origin 0's clock-0 update of each matrix, once */
    double ref[PM_NMAT][64] = {{0}};
    for (uint32_t m = 0; m < PM_NMAT; m++) add_delta(ref[m], m, 2, 0, 0);
    int same = 1;
    for (uint32_t m = 0; m < PM_NMAT; m++)
        for (size_t i = 0; i < (size_t)rows_of[m] * cols_of[m]; i++)
            same &= (double)sp.m[m].data[i] == ref[m][i];
    for (uint32_t m = 0; m < PM_NMAT; m++) free(sp.m[m].data);
    sfb__ssp_fini(&sp.ssp);
    ASSERT_OK(ret);
    ASSERT_EQ(sp.applied_after[0], -1); /* matrix 0 alone: clock 0 not yet applied */
    ASSERT_EQ(sp.applied_after[1], -1); /* 0 and 2 */
    ASSERT_EQ(sp.applied_after[2], -1); /* the replay of 0 changes nothing */
    ASSERT_EQ(sp.first[1], sp.first[0]); /* ... and is not applied again */
    ASSERT_EQ(sp.first[2], 0);           /* after matrix 1: clock 0 applied */
    ASSERT(same);
    return 0;
}

/* An FMS owner serves its peers between its publishes: every rank
 * publishes its two FMS matrices, lets the others run, then publishes its
 * SFB matrix; rank 0 then holds back its drain until every other rank's
 * drain has returned (or 50 turns have passed). Every other rank's drain
 * needs rank 0's sums of its blocks, which rank 0 formed and sent after
 * its SFB publish, not in its own drain: no drain saw rank 0 draining, and
 * every replica is the exact sum. */
struct serve_run {
    uint32_t world;
    struct sfb_matrix m[ENG_MAX_RANKS][PM_NMAT];
    struct sfb__ssp ssp[ENG_MAX_RANKS];
    int drained[ENG_MAX_RANKS], saw_rank0_draining[ENG_MAX_RANKS], rank0_draining;
};

static int serve_main(struct sfb__comm *c, uint32_t r, void *arg)
{
    struct serve_run *sr = arg;
    static const struct sfb__sync_desc *const engine_of[PM_NMAT] = {BD, FD, FD};
    struct sfb__sync_env env = {.comm = c, .mats = sr->m[r], .nmat = PM_NMAT,
                                .ssp = &sr->ssp[r], .engine_of = engine_of};
    void *priv = calloc(1, sfb__permatrix_ops.priv_size);
    int ret = priv ? sfb__permatrix_ops.open(priv, &env) : -ENOMEM;
    if (ret) {
        free(priv);
        return ret;
    }
    struct sfb_sf sf[PM_NMAT] = {{0}};
    struct sfb__sync_clock acct = {0};
    ret = sfb__permatrix_ops.wait(priv, 0, &acct);
    for (uint32_t m = 0; m < PM_NMAT && !ret; m++) {
        ret = eng_make_sf(&sf[m], rows_of[m], cols_of[m], 2, r, 40 * m);
        sf[m].matrix = m;
    }
    for (uint32_t m = 1; m < PM_NMAT && !ret; m++)
        ret = sfb__permatrix_ops.publish_one(priv, 0, m, &sf[m], NULL);
    sfb__loopback_yield(c);
    if (!ret) ret = sfb__permatrix_ops.publish_one(priv, 0, 0, &sf[0], NULL);
    if (r == 0) {
        for (int turn = 0, all = 0; turn < 50 && !all; turn++) {
            sfb__loopback_yield(c);
            all = 1;
            for (uint32_t q = 1; q < sr->world; q++) all &= sr->drained[q];
        }
        sr->rank0_draining = 1;
    }
    if (!ret) ret = sfb__permatrix_ops.drain(priv, 0, &acct);
    sr->saw_rank0_draining[r] = sr->rank0_draining;
    sr->drained[r] = 1;
    if (!ret) ret = sfb__comm_barrier(c);
    for (uint32_t m = 0; m < PM_NMAT; m++) sfb_sf_free(&sf[m]);
    sfb__permatrix_ops.close(priv);
    free(priv);
    return ret;
}

static int test_fms_serves_between_publishes(void)
{
    for (uint32_t world = 2; world <= 4; world++) {
        struct serve_run *sr = calloc(1, sizeof *sr);
        ASSERT(sr);
        sr->world = world;
        int ok = 1;
        for (uint32_t r = 0; r < world; r++) {
            for (uint32_t m = 0; m < PM_NMAT; m++) {
                sr->m[r][m] = (struct sfb_matrix){rows_of[m], cols_of[m],
                                                  calloc((size_t)rows_of[m] * cols_of[m], 4)};
                ok &= sr->m[r][m].data != NULL;
            }
            ok &= sfb__ssp_init(&sr->ssp[r], world, 0, 0) == 0;
        }
        struct sfb__loopback *lb = NULL;
        int ret = ok ? open_loopback(&lb, world, 2) : -ENOMEM;
        if (!ret) ret = sfb__loopback_run(lb, serve_main, sr, NULL);
        if (ret) fprintf(stderr, "  world %u: %s\n", world, sfb_last_error());
        sfb__loopback_close(&lb);
        int same = 1, early = 1;
        for (uint32_t m = 0; m < PM_NMAT; m++) {
            double ref[64] = {0};
            for (uint32_t o = 0; o < world; o++) add_delta(ref, m, 2, o, 0);
            for (uint32_t r = 0; r < world; r++)
                for (size_t i = 0; i < (size_t)rows_of[m] * cols_of[m]; i++)
                    same &= (double)sr->m[r][m].data[i] == ref[i];
        }
        for (uint32_t r = 1; r < world; r++) {
            if (sr->saw_rank0_draining[r])
                fprintf(stderr, "  world %u: rank %u's drain returned only once rank 0 drained\n",
                        world, r);
            early &= !sr->saw_rank0_draining[r];
        }
        for (uint32_t r = 0; r < world; r++) {
            for (uint32_t m = 0; m < PM_NMAT; m++) free(sr->m[r][m].data);
            sfb__ssp_fini(&sr->ssp[r]);
        }
        free(sr);
        ASSERT_OK(ret);
        ASSERT(same);
        ASSERT(early);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        {"mixed_bsp", test_mixed_bsp},
        {"mixed_other_way", test_mixed_other_way},
        {"all_fms", test_all_fms},
        {"sfb_several", test_sfb_several},
        {"mixed_ssp_slow", test_mixed_ssp_slow},
        {"mixed_halton", test_mixed_halton},
        {"sfb_split_arrival", test_sfb_split_arrival},
        {"bf16_some", test_bf16_some},
        {"fms_serves_between_publishes", test_fms_serves_between_publishes},
    };
    return test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
}
