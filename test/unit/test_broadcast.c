/* The SFB engine (sfb/broadcast.c) on an in-process loopback of several
 * ranks: replicas equal a reference computed directly from the factors
 * after every clock at s = 0, and the SSP wait holds a rank that is more
 * than s clocks ahead exactly until the slow rank's clock arrives. */
#include "engine_util.h"
#include "sfb/codec.h"
#include "sfb/parts.h"

/* The replica tests' job: 6 clocks of a 3 x 4 matrix, 2 samples a rank,
 * s = 0, every wait checked. */
static struct eng_cfg replicas_cfg(uint32_t world, const char *topology, int ordered,
                                   size_t part_bytes)
{
    return (struct eng_cfg){.ops = &sfb__broadcast_ops,
                            .world = world,
                            .k = 3,
                            .d = 4,
                            .s = 2,
                            .clocks = 6,
                            .staleness = 0,
                            .topology = topology,
                            .slow_rank = -1,
                            .check_each_wait = 1,
                            .ordered = ordered,
                            .priority = part_bytes ? SFB__PRIORITY_MAGNITUDE : SFB__PRIORITY_FIFO,
                            .part_bytes = part_bytes};
}

static int run_replicas_as(uint32_t world, const char *topology, int ordered, size_t part_bytes)
{
    struct eng_cfg cfg = replicas_cfg(world, topology, ordered, part_bytes);
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    int rets[ENG_MAX_RANKS];
    int ret = sfb__loopback_run(lb, eng_rank_main, &run, rets);
    ASSERT_OK(ret);
    for (uint32_t r = 0; r < world; r++)
        ASSERT_EQ(rets[r], 0);
    for (uint32_t r = 0; r < world; r++) {
        /* after the drain: every update of every clock, once */
        ASSERT(eng_replica_is(&run, r, cfg.clocks, "after draining"));
        for (uint32_t o = 0; o < world; o++)
            ASSERT_EQ(run.r[r].per_origin[o], o == r ? 0 : (uint64_t)cfg.clocks);
    }
    eng_fini(&run);
    sfb__loopback_close(&lb);
    return 0;
}

static int run_replicas(uint32_t world, const char *topology)
{
    return run_replicas_as(world, topology, 0, 0);
}

static int test_replicas_full(void)
{
    return run_replicas(4, "full");
}

static int test_replicas_halton(void)
{
    return run_replicas(8, "halton");
}

/* Ordered: the own update waits among the peers' and a clock's updates are
 * applied together once all ranks' have come (every part of them), so at
 * s = 0 each wait still finds exactly the clocks before it applied. */
static int test_ordered_full(void)
{
    return run_replicas_as(4, "full", 1, 0);
}

static int test_ordered_halton(void)
{
    return run_replicas_as(8, "halton", 1, 0);
}

static int test_ordered_parts(void)
{
    return run_replicas_as(4, "full", 1, 16); /* each update in parts of one sample */
}

/* s = 1, rank 2 yields three turns before each clock: the others run ahead
 * until SSP stops them. Every wait(t) may return only once rank 2's clock
 * t − s − 1 is applied (never earlier), and a wait that began before rank 2
 * published that clock returns with exactly that clock applied, as soon as
 * it arrived (the clock table says so, and so does what rank 2 had
 * published when the wait returned). */
static int test_ssp_wait(void)
{
    const int64_t s = 1;
    struct eng_cfg cfg = {.ops = &sfb__broadcast_ops,
                          .world = 3,
                          .k = 2,
                          .d = 3,
                          .s = 1,
                          .clocks = 8,
                          .staleness = s,
                          .topology = "full",
                          .slow_rank = 2,
                          .slow_yields = 3};
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    ASSERT_OK(sfb__loopback_run(lb, eng_rank_main, &run, NULL));
    int blocked = 0;
    for (uint32_t r = 0; r < 2; r++) {
        struct eng_rank *er = &run.r[r];
        for (int64_t t = 0; t < cfg.clocks; t++) {
            int64_t need = t - s - 1;
            ASSERT_GE(er->slow_applied[t], need);
            ASSERT_GE(er->slow_pub_at_return[t], need);
            ASSERT_GE(er->ssp.record[t], need);
            if (er->slow_pub_at_entry[t] < need) {
                blocked++;
                ASSERT_EQ(er->slow_pub_at_return[t], need);
                ASSERT_EQ(er->slow_applied[t], need);
                ASSERT_EQ(er->ssp.record[t], need);
            }
        }
        ASSERT(eng_replica_is(&run, r, cfg.clocks, "after draining"));
    }
    /* ranks 0 and 1 ran ahead and were stopped at every clock from s + 1 */
    ASSERT_EQ(blocked, 2 * (cfg.clocks - s - 1));
    eng_fini(&run);
    sfb__loopback_close(&lb);
    return 0;
}

/* A rank that publishes a NaN (or an infinite scale) past the job API's
 * check, as a hostile or broken peer would: every other rank refuses the
 * update, whether it came straight from its origin or relayed over the
 * Halton overlay, and fails naming the origin and the clock; no replica
 * takes it. */
static int run_poisoned(uint32_t world, const char *topology, int poison)
{
    struct eng_cfg cfg = {.ops = &sfb__broadcast_ops,
                          .world = world,
                          .k = 3,
                          .d = 4,
                          .s = 2,
                          .clocks = 6,
                          .staleness = 0,
                          .topology = topology,
                          .slow_rank = -1,
                          .poison = poison,
                          .poison_rank = world - 2,
                          .poison_clock = 3};
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    int rets[ENG_MAX_RANKS];
    ASSERT_NE(sfb__loopback_run(lb, eng_rank_main, &run, rets), 0);
    char want[64];
    snprintf(want, sizeof want, "the update rank %u published at clock 3", world - 2);
    for (uint32_t r = 0; r < world; r++) {
        if (r == world - 2) {
            ASSERT_NE(rets[r], 0); /* its peers stopped */
            continue;
        }
        ASSERT_EQ(rets[r], -SFB_EPEER);
        ASSERT_STR_CONTAINS(run.r[r].why, want);
        ASSERT_STR_CONTAINS(run.r[r].why, poison == 1 ? "b[0][1] is nan" : "scale is inf");
        /* nothing of the origin's clock 3 or later reached the replica */
        ASSERT_EQ(run.r[r].per_origin[world - 2], 3);
        ASSERT(eng_replica_finite(&run, r));
    }
    eng_fini(&run);
    sfb__loopback_close(&lb);
    return 0;
}

static int test_nonfinite_full(void)
{
    return run_poisoned(3, "full", 1) || run_poisoned(3, "full", 2);
}

static int test_nonfinite_halton(void)
{
    return run_poisoned(8, "halton", 1) || run_poisoned(8, "halton", 2);
}


/* bfloat16 factors (--factor-dtype bf16): every replica, the origin's own
 * included, adds the factors as rounded for the wire, so that each ends
 * equal to the reference of the rounded factors, exactly (eng_inexact keeps
 * every sum exact), at every wait (s = 0) and after the drain; a world of
 * one rounds too. Whole updates and parts, ordered or not; each frame
 * carries 2 bytes a number. */
static int run_bf16(uint32_t world, const char *topology, int ordered, size_t part_bytes,
                    int inexact)
{
    struct eng_cfg cfg = replicas_cfg(world, topology, ordered, part_bytes);
    cfg.factor_prec = SFB_WIRE_BF16;
    cfg.inexact = inexact;
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    int rets[ENG_MAX_RANKS];
    if (world == 1) rets[0] = eng_run_single(&run);
    else ASSERT_OK(sfb__loopback_run(lb, eng_rank_main, &run, rets));
    for (uint32_t r = 0; r < world; r++) {
        ASSERT_EQ(rets[r], 0);
        ASSERT(eng_replica_is(&run, r, cfg.clocks, "after draining"));
        for (uint32_t o = 0; o < world; o++)
            ASSERT_EQ(run.r[r].per_origin[o], o == r ? 0 : (uint64_t)cfg.clocks);
    }
    size_t mat = (size_t)run.rows * run.cols;
    if (inexact) { /* the rounding mattered: float32's factors sum to another matrix */
        struct eng_run f32 = run;
        f32.cfg.factor_prec = SFB_WIRE_F32;
        double *m = calloc(mat, sizeof *m);
        ASSERT(m);
        for (int64_t t = 0; t < cfg.clocks; t++)
            for (uint32_t o = 0; o < world; o++) eng_add_delta(&f32, m, o, t);
        size_t differ = 0;
        for (size_t i = 0; i < mat; i++) differ += m[i] != run.ref[(size_t)cfg.clocks * mat + i];
        ASSERT_GE(differ, mat / 2);
        free(m);
    }
    if (world > 1 && !part_bytes && !strcmp(topology, "full")) {
        /* P2P, whole updates: clocks × peers frames of 64 + 8 + 2·s·(K + D) */
        uint64_t frame = SFB_WIRE_HDR_SIZE + SFB_SF_PREFIX + 2ull * cfg.s * (run.rows + run.cols);
        for (uint32_t r = 0; r < world; r++)
            ASSERT_EQ(run.r[r].rep.data_bytes, (uint64_t)cfg.clocks * (world - 1) * frame);
    }
    eng_fini(&run);
    sfb__loopback_close(&lb);
    return 0;
}

static int test_bf16_full(void)
{
    return run_bf16(4, "full", 0, 0, 0) || run_bf16(4, "full", 0, 0, 1);
}

static int test_bf16_halton(void)
{
    return run_bf16(8, "halton", 0, 0, 1);
}

static int test_bf16_ordered(void)
{
    return run_bf16(4, "full", 1, 0, 1) || run_bf16(8, "halton", 1, 0, 1);
}

static int test_bf16_parts(void)
{
    return run_bf16(4, "full", 1, 16, 1) || run_bf16(4, "full", 0, 16, 1);
}

static int test_bf16_world1(void)
{
    return run_bf16(1, "full", 0, 0, 1) || run_bf16(1, "full", 1, 0, 1);
}

/* A rank whose factors travel in another precision than its peers': each
 * refuses the other's frames and the job fails saying why, rather than
 * waiting for updates that can never be applied. */
static int test_bf16_mismatch(void)
{
    struct eng_cfg cfg = {.ops = &sfb__broadcast_ops,
                          .world = 3,
                          .k = 3,
                          .d = 4,
                          .s = 2,
                          .clocks = 4,
                          .staleness = 0,
                          .topology = "full",
                          .slow_rank = -1,
                          .factor_prec = SFB_WIRE_BF16,
                          .other_prec_rank = 2};
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    int rets[ENG_MAX_RANKS];
    ASSERT_NE(sfb__loopback_run(lb, eng_rank_main, &run, rets), 0);
    int named = 0;
    for (uint32_t r = 0; r < cfg.world; r++) {
        ASSERT_NE(rets[r], 0);
        if (strstr(run.r[r].why, "is every worker running the same --factor-dtype?")) {
            named++;
            ASSERT_STR_CONTAINS(run.r[r].why, r == 1 ? "its factors are bfloat16, this rank's "
                                                       "float32"
                                                     : "its factors are float32, this rank's "
                                                       "bfloat16");
        }
    }
    ASSERT_GE(named, 1);
    eng_fini(&run);
    sfb__loopback_close(&lb);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        {"replicas_full", test_replicas_full},
        {"replicas_halton", test_replicas_halton},
        {"ordered_full", test_ordered_full},
        {"ordered_halton", test_ordered_halton},
        {"ordered_parts", test_ordered_parts},
        {"ssp_wait", test_ssp_wait},
        {"nonfinite_full", test_nonfinite_full},
        {"nonfinite_halton", test_nonfinite_halton},
        {"bf16_full", test_bf16_full},
        {"bf16_halton", test_bf16_halton},
        {"bf16_ordered", test_bf16_ordered},
        {"bf16_parts", test_bf16_parts},
        {"bf16_world1", test_bf16_world1},
        {"bf16_mismatch", test_bf16_mismatch},
    };
    return test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
}
