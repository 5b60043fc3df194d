/* The cost model of `--sync auto` (sfb/cost.h): predictions against values
 * worked out by hand from the formulas in docs/design.md, the choices of
 * the shapes, the plan's one-line description, and the link probe
 * over the in-process loopback (same result on every rank; a missing rank
 * fails it instead of hanging). */
#include "sfb/cost.h"
#include "src/base/util.h"
#include "src/comm/comm_loopback.h"
#include "src/wire/wire.h"
#include "test.h"

#include <errno.h>

/* α 50 µs, 1 Gbit/s, sgemm 20 GFLOP/s, 1 G adds/s. */
static struct sfb__cost_env env4(void)
{
    return (struct sfb__cost_env){.world = 4, .batch = 32, .topology = "full",
                                  .link = {.alpha_s = 50e-6, .beta_s_per_byte = 8e-9, .measured = 1}, .gemm_flops_per_s = 20e9,
                                  .add_flops_per_s = 1e9};
}

/* MLP 784→1024→10 (biases as an extra column) at P = 4, S = 32, full.
 * Layer 1, 1024 × 785: B = 64 + 8 + 4·32·(1024 + 785) = 231624.
 *   SFB: 3·50e-6 + 3·231624·8e-9 + 2·1024·785·32·4 / 20e9
 *      = 0.15 + 5.558976 + 10.289152 = 15.998128 ms
 *   FMS: 7·50e-6 + 6·(1024·785 + 64)·8e-9 + 2·1024·785·32 / 20e9
 *        + 1024·785·3.75 / 1e9
 *      = 0.35 + 38.587392 + 2.572288 + 3.0144 = 44.52408 ms  → sfb
 * Layer 2, 10 × 1025: B = 72 + 128·1035 = 132552.
 *   SFB: 0.15 + 3.181248 + 0.1312 = 3.462448 ms
 *   FMS: 0.35 + 6·(10250 + 64)·8e-9 + 0.0328 + 0.0384375
 *      = 0.35 + 0.495072 + 0.0328 + 0.0384375 = 0.9163095 ms  → fms */
static int test_mlp_full(void)
{
    struct sfb__cost_env e = env4();
    struct sfb__cost_matrix m[2] = {{1024, 785, 0, 0, 0, 0, 0}, {10, 1025, 0, 0, 0, 0, 0}};
    int choice[2];
    double ms[2][2];
    ASSERT_OK(sfb__cost_plan(&e, m, 2, choice, ms));
    ASSERT_NEAR(ms[0][SFB__ENG_SFB], 15.998128, 1e-6);
    ASSERT_NEAR(ms[0][SFB__ENG_FMS], 44.52408, 1e-6);
    ASSERT_NEAR(ms[1][SFB__ENG_SFB], 3.462448, 1e-6);
    ASSERT_NEAR(ms[1][SFB__ENG_FMS], 0.9163095, 1e-6);
    ASSERT_EQ(choice[0], SFB__ENG_SFB);
    ASSERT_EQ(choice[1], SFB__ENG_FMS);
    char buf[256];
    int n = sfb__cost_describe(m, 2, choice, (const double(*)[2])ms, buf, sizeof buf);
    ASSERT_GT(n, 0);
    ASSERT_EQ(strcmp(buf, "matrix 0 1024x785: sfb 16 ms, fms 44.5 ms per clock -> sfb\n"
                          "matrix 1 10x1025: sfb 3.46 ms, fms 0.916 ms per clock -> fms\n"),
              0);
    ASSERT_EQ((size_t)n, strlen(buf));
    /* truncation reports the length needed, as snprintf */
    char small[8];
    ASSERT_EQ(sfb__cost_describe(m, 2, choice, (const double(*)[2])ms, small, sizeof small), n);
    ASSERT_EQ(strlen(small), 7u);
    return 0;
}

/* MLR 4096², P = 4, S = 32: SFB sends 3·(72 + 128·8192) = 3.1 MB, FMS
 * 6·(4096² + 64) = 100.7 MB per worker and clock. With the sgemm at 20
 * GFLOP/s SFB's reconstruction is 214.7 ms, still far below FMS's 805 ms of
 * link: the bytes decide. The SF frame the codec sends can be given
 * (sf_bytes), replacing the dense formula. */
static int test_mlr_bytes(void)
{
    struct sfb__cost_env e = env4();
    struct sfb__cost_matrix m = {4096, 4096, 0, 0, 0, 0, 0};
    int choice;
    double ms[1][2];
    ASSERT_OK(sfb__cost_plan(&e, &m, 1, &choice, ms));
    ASSERT_EQ(choice, SFB__ENG_SFB);
    /* 0.15 + 3·1048648·8e-9 s + 2·4096²·32·4/20e9 s */
    ASSERT_NEAR(ms[0][0], 0.15 + 25.167552 + 214.7483648, 1e-6);
    m.sf_bytes = 1000; /* a sparse frame: only the bytes term changes */
    double t[2];
    ASSERT_OK(sfb__cost_predict(&e, &m, t));
    ASSERT_NEAR(t[0], 0.15 + 0.024 + 214.7483648, 1e-6);
    ASSERT_NEAR(t[1], ms[0][1], 1e-9);
    /* an ordered job's FMS pushes factors where they are fewer bytes: each
     * block (1024 rows, 4 chunks of 256) gets 64 + 8 + 4·32·(1024 + 4096)
     * bytes from each other rank in one message, the sums go as before;
     * 2.25 element passes (3.75 less the pushes' and the others' adds) */
    struct sfb__cost_parts r;
    m.sf_bytes = 0;
    m.fms_factors = 1;
    ASSERT_OK(sfb__cost_parts(&e, &m, &r));
    ASSERT_NEAR(r.msgs[SFB__ENG_FMS], 3 * (1 + 4), 1e-9);
    ASSERT_NEAR(r.bytes[SFB__ENG_FMS], 3 * (4096.0 * 4096 + 4 * 64) + 3 * (72 + 655360.0), 1e-6);
    ASSERT_NEAR(r.ms[SFB__ENG_FMS], 0.75 + 418.389696 + 53.6870912 + 37.748736 + 0.05, 1e-6);
    return 0;
}

/* An embedding's rows (sparse rows): the replica 65 × 50000 (dimension + a
 * touch row, vocabulary), 32 samples each a one-hot c (nnz 32). The frame is
 * 64 + 8 + 4·32·65 + 4·33 + 8·32 = 8780 bytes, the apply the sparse pass
 * 2·65·32 multiply-adds at the add rate (P of them): SFB 3·50 µs + 3·8780·8
 * ns + 4·4160 ns = 0.37736 ms. FMS moves the whole table, each block of
 * 17 rows as 4 chunks of at most 5 rows (sfb__fms_chunk_rows: 4 to a block):
 * 24·50 µs + 50 µs + 6·(4·65·50000/4 + 4·64)·8 ns + 4160 ns + 65·50000·3.75
 * ns = 169.453948 ms. */
static int test_sparse_rows(void)
{
    struct sfb__cost_env e = env4();
    struct sfb__cost_matrix m = {65, 50000, 0, 32, 0, 0, 0};
    struct sfb__cost_parts r;
    ASSERT_OK(sfb__cost_parts(&e, &m, &r));
    ASSERT_NEAR(r.sf_bytes, 8780, 1e-9);
    ASSERT_NEAR(r.ms[SFB__ENG_SFB], 0.37736, 1e-9);
    ASSERT_NEAR(r.ms[SFB__ENG_FMS], 169.453948, 1e-6);
    char line[160];
    int choice = r.ms[1] < r.ms[0];
    ASSERT_EQ(choice, SFB__ENG_SFB);
    ASSERT_GT(sfb__cost_describe_one(3, &m, choice, r.ms, line, sizeof line), 0);
    ASSERT_STR_CONTAINS(line, "matrix 3 65x50000 (sparse c, 32 nnz): sfb 0.377 ms, fms 169 ms per "
                       "clock -> sfb\n");
    m.c_nnz = -1;
    ASSERT_EQ(sfb__cost_parts(&e, &m, &r), -EINVAL);
    return 0;
}

/* bfloat16 factors (factor_dtype "bf16"), the MLP's layer 1 of mlp_full:
 * B = 64 + 8 + 2·32·(1024 + 785) = 115848, and each of the P SFs widened
 * first, 32·1809 = 57888 adds:
 *   SFB: 0.15 + 3·115848·8e-9 s + 10.289152 + 4·57888 / 1e9 s
 *      = 0.15 + 2.780352 + 10.289152 + 0.231552 = 13.451056 ms
 * FMS carries full matrices in float32: as before (44.52408 ms). A CSR c
 * of 32 non-zeros (the sparse rows above): 64 + 8 + 2·32·65 + 4·33 + 6·32
 * = 4556 bytes. */
static int test_bf16(void)
{
    struct sfb__cost_env e = env4();
    struct sfb__cost_matrix m = {1024, 785, 0, 0, SFB_WIRE_BF16, 0, 0};
    struct sfb__cost_parts r;
    ASSERT_OK(sfb__cost_parts(&e, &m, &r));
    ASSERT_NEAR(r.sf_bytes, 115848, 1e-9);
    ASSERT_NEAR(r.ms[SFB__ENG_SFB], 13.451056, 1e-6);
    ASSERT_NEAR(r.ms[SFB__ENG_FMS], 44.52408, 1e-6);
    struct sfb__cost_matrix rows = {65, 50000, 0, 32, SFB_WIRE_BF16, 0, 0};
    ASSERT_OK(sfb__cost_parts(&e, &rows, &r));
    ASSERT_NEAR(r.sf_bytes, 4556, 1e-9);
    /* a given frame size is taken as it is */
    m.sf_bytes = 1000;
    ASSERT_OK(sfb__cost_parts(&e, &m, &r));
    ASSERT_NEAR(r.sf_bytes, 1000, 1e-9);
    /* FMS's rows in bf16 (dense_dtype): half its payload bytes, the same
     * headers and messages */
    struct sfb__cost_parts f32, bf16;
    struct sfb__cost_matrix dense = {1024, 785, 0, 0, SFB_WIRE_F32, SFB_WIRE_F32, 0};
    ASSERT_OK(sfb__cost_parts(&e, &dense, &f32));
    dense.dense_prec = SFB_WIRE_BF16;
    ASSERT_OK(sfb__cost_parts(&e, &dense, &bf16));
    ASSERT_NEAR(bf16.msgs[SFB__ENG_FMS], f32.msgs[SFB__ENG_FMS], 1e-9);
    double hdrs = f32.msgs[SFB__ENG_FMS] * 64;
    ASSERT_NEAR(bf16.bytes[SFB__ENG_FMS] - hdrs, (f32.bytes[SFB__ENG_FMS] - hdrs) / 2, 1e-6);
    ASSERT_NEAR(bf16.ms[SFB__ENG_SFB], f32.ms[SFB__ENG_SFB], 1e-12);
    return 0;
}

/* P = 16, K = D = 100, S = 1, a 1000-byte frame, α 10 µs, β 1e-9 s/byte,
 * 1 GFLOP/s, 1 G adds/s. halton (offsets 1 3 4 11) with clock flush sends
 * one bundle per out-link: 4 messages, 15·1000 + 4·64 = 15256 bytes;
 * full sends 15 frames of 1000 bytes.
 *   SFB halton: 4·10 + 15.256 + 2·100·100·16/1e9 s = 40 + 15.256 + 320 = 375.256 µs
 *   SFB full:  15·10 + 15 + 320 = 485 µs
 *   FMS: 31·10 + 30·(4·10000/16 + 64)·1e-9 s + 2·10000/1e9 s + 10000·(3 + 15/16)/1e9 s
 *      = 310 + 76.92 + 20 + 39.375 = 446.295 µs
 * The overlay's fewer messages turn the answer from fms to sfb. */
static int test_halton_changes_answer(void)
{
    struct sfb__cost_env e = {.world = 16, .batch = 1, .topology = "halton", .flush_clock = 1,
                              .link = {.alpha_s = 10e-6, .beta_s_per_byte = 1e-9, .measured = 1}, .gemm_flops_per_s = 1e9,
                              .add_flops_per_s = 1e9};
    struct sfb__cost_matrix m = {100, 100, 1000, 0, 0, 0, 0};
    double t[2];
    ASSERT_OK(sfb__cost_predict(&e, &m, t));
    ASSERT_NEAR(t[0], 0.375256, 1e-9);
    ASSERT_NEAR(t[1], 0.446295, 1e-9);
    int choice;
    ASSERT_OK(sfb__cost_plan(&e, &m, 1, &choice, NULL));
    ASSERT_EQ(choice, SFB__ENG_SFB);
    e.topology = "full";
    e.flush_clock = 0;
    ASSERT_OK(sfb__cost_predict(&e, &m, t));
    ASSERT_NEAR(t[0], 0.485, 1e-9);
    ASSERT_NEAR(t[1], 0.446295, 1e-9);
    ASSERT_OK(sfb__cost_plan(&e, &m, 1, &choice, NULL));
    ASSERT_EQ(choice, SFB__ENG_FMS);
    /* 4 ranks on 2 cores: every compute term doubles */
    e.host_cores = 2;
    e.ranks_per_host = 4;
    ASSERT_OK(sfb__cost_predict(&e, &m, t));
    ASSERT_NEAR(t[0], 0.165 + 0.640, 1e-9);
    ASSERT_NEAR(t[1], 0.38692 + 2 * 0.059375, 1e-9);
    return 0;
}

/* Nothing given (α = β = 0, not measured): 10 µs and 1 Gbit/s. One worker
 * sends nothing: both engines are their compute. */
static int test_defaults_and_world1(void)
{
    struct sfb__cost_env e = {.world = 2, .batch = 1, .gemm_flops_per_s = 1e9,
                              .add_flops_per_s = 1e9};
    struct sfb__cost_matrix m = {100, 100, 1000, 0, 0, 0, 0};
    double t[2];
    ASSERT_OK(sfb__cost_predict(&e, &m, t)); /* topology NULL = full */
    /* 10 + 1000·8e-3 + 2·100·100·2/1e9 s = 10 + 8 + 40 µs */
    ASSERT_NEAR(t[0], 0.058, 1e-9);
    /* 3·10 + 2·(20000 + 64)·8e-9 s + 20 µs + 10000·3.5/1e9 s = 30 + 321.024 + 20 + 35 µs */
    ASSERT_NEAR(t[1], 0.406024, 1e-9);
    e.world = 1;
    ASSERT_OK(sfb__cost_predict(&e, &m, t));
    ASSERT_NEAR(t[0], 0.020, 1e-9);
    ASSERT_NEAR(t[1], 0.020 + 0.030, 1e-9);
    return 0;
}

static int test_bad_input(void)
{
    struct sfb__cost_env e = env4();
    struct sfb__cost_matrix m = {10, 10, 0, 0, 0, 0, 0};
    double t[2];
    ASSERT_EQ(sfb__cost_predict(NULL, &m, t), -EINVAL);
    e.batch = 0;
    ASSERT_EQ(sfb__cost_predict(&e, &m, t), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "batch 0");
    e = env4();
    e.gemm_flops_per_s = 0;
    ASSERT_EQ(sfb__cost_predict(&e, &m, t), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "gemm rate");
    e = env4();
    e.link.beta_s_per_byte = -1;
    ASSERT_EQ(sfb__cost_predict(&e, &m, t), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "beta");
    e = env4();
    e.topology = "ring";
    struct sfb__cost_matrix two[2] = {{10, 10, 0, 0, 0, 0, 0}, {0, 10, 0, 0, 0, 0, 0}};
    int choice[2];
    ASSERT_EQ(sfb__cost_plan(&e, two, 2, choice, NULL), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "matrix 0");
    e = env4();
    ASSERT_EQ(sfb__cost_plan(&e, two, 2, choice, NULL), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "matrix 1");
    return 0;
}

static int test_rates(void)
{
    double g = sfb__gemm_rate(64, 48, 8);
    ASSERT_GT(g, 1e6); /* any machine does a MFLOP/s */
    ASSERT_EQ(sfb__gemm_rate(0, 48, 8), 0);
    ASSERT_EQ(sfb__gemm_rate(64, 48, 0), 0);
    ASSERT_GT(sfb__add_rate(1 << 16), 1e6);
    ASSERT_EQ(sfb__add_rate(0), 0);
    return 0;
}

struct probe_run {
    struct sfb__link link[4];
    int skip_rank; /* this rank never probes (a dead peer); -1: none */
};

static int probe_rank(struct sfb__comm *c, uint32_t r, void *arg)
{
    struct probe_run *pr = arg;
    if ((int)r == pr->skip_rank) return 0;
    return sfb__link_probe(c, &pr->link[r]);
}

/* Every rank ends with rank 0's fit, measured = 1, β > 0. */
static int test_probe_loopback(void)
{
    for (uint32_t world = 2; world <= 4; world++) {
        struct sfb__loopback *lb;
        ASSERT_OK(sfb__loopback_open(&lb, world, NULL));
        struct probe_run pr = {.skip_rank = -1};
        int rets[4];
        int ret = sfb__loopback_run(lb, probe_rank, &pr, rets);
        sfb__loopback_close(&lb);
        ASSERT_OK(ret);
        for (uint32_t r = 0; r < world; r++) {
            ASSERT_EQ(pr.link[r].measured, 1);
            ASSERT_GE(pr.link[r].alpha_s, 0);
            ASSERT_GT(pr.link[r].beta_s_per_byte, 0);
            ASSERT_EQ(memcmp(&pr.link[r], &pr.link[0], sizeof pr.link[0]), 0);
        }
    }
    return 0;
}

/* A rank that never takes part: a probed peer (rank 1) or one that only
 * waits for the result (rank 2 of 3). The others fail with a peer error
 * naming the cause instead of hanging. */
static int test_probe_missing_rank(void)
{
    for (int skip = 1; skip <= 2; skip++) {
        struct sfb__loopback *lb;
        ASSERT_OK(sfb__loopback_open(&lb, 3, NULL));
        struct probe_run pr = {.skip_rank = skip};
        int rets[3];
        double t0 = sfb__now();
        int ret = sfb__loopback_run(lb, probe_rank, &pr, rets);
        sfb__loopback_close(&lb);
        ASSERT_LT(sfb__now() - t0, 30.0);
        ASSERT_EQ(ret, -SFB_EPEER);
        ASSERT_STR_CONTAINS(sfb_last_error(), "rank 0: ");
        ASSERT_EQ(rets[0], -SFB_EPEER);
        ASSERT_EQ(rets[skip], 0);
    }
    return 0;
}

/* One process with no launcher around it: world 1, zeros, not measured. */
static int test_probe_world1(void)
{
    struct sfb__comm_settings cs;
    sfb__comm_default_settings(&cs);
    struct sfb__comm *c;
    ASSERT_OK(sfb__comm_open(&c, &cs));
    int world = (int)sfb__comm_world(c);
    struct sfb__link l = {1, 1, 1, 1};
    int ret = sfb__link_probe(c, &l);
    sfb__comm_close(&c);
    ASSERT_EQ(world, 1);
    ASSERT_OK(ret);
    ASSERT_EQ(l.alpha_s, 0);
    ASSERT_EQ(l.beta_s_per_byte, 0);
    ASSERT_EQ(l.measured, 0);
    ASSERT_EQ(l.peers, 0);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        {"mlp_full", test_mlp_full},
        {"mlr_bytes", test_mlr_bytes},
        {"sparse_rows", test_sparse_rows},
        {"bf16", test_bf16},
        {"halton_changes_answer", test_halton_changes_answer},
        {"defaults_and_world1", test_defaults_and_world1},
        {"bad_input", test_bad_input},
        {"rates", test_rates},
        {"probe_loopback", test_probe_loopback},
        {"probe_missing_rank", test_probe_missing_rank},
        {"probe_world1", test_probe_world1},
    };
    return test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
}
