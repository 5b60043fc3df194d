/* The FMS engine (sfb/fms.c) on an in-process loopback of several ranks:
 * each owner's summed chunk is the sum of every rank's ΔA rows of that
 * chunk (checked on the wire), pushes carry the pusher's ΔA rows, or
 * (ordered, where fewer bytes) its factors of the owner's block, every
 * block goes as its chunks (one message each way per chunk; a push of
 * factors one message), and every replica equals the reference computed
 * from the factors after every clock at s = 0, including with an empty
 * block (K < P) and blocks of several chunks. */
#include "engine_util.h"
#include "src/wire/wire.h"

struct fms_tap {
    struct eng_run *run;
    uint32_t sums[ENG_MAX_RANKS][ENG_MAX_RANKS][ENG_MAX_CLOCKS];   /* [dst][owner][clock] */
    uint32_t pushes[ENG_MAX_RANKS][ENG_MAX_RANKS][ENG_MAX_CLOCKS]; /* [owner][pusher][clock]:
                                                                      chunks covered */
    uint64_t wrong, odd, factor_pushes;
};

static uint32_t block_start(uint32_t rows, uint32_t world, uint32_t b)
{
    return (uint32_t)((uint64_t)rows * b / world);
}

/* Most MLR matrices of the runs here have 4 columns; the chunk grid's rows
 * (test_chunk_rows checks the rule). */
#define COLS 4
#define DEFAULT_CHUNK_BYTES ((size_t)4 << 20)
static uint32_t chunk_rows(uint32_t rows, uint32_t cols, uint32_t world)
{
    return sfb__fms_chunk_rows(rows, cols, world);
}

static uint32_t chunks(uint32_t rows, uint32_t cols, uint32_t world, uint32_t b)
{
    uint32_t n = block_start(rows, world, b + 1) - block_start(rows, world, b);
    return (n + chunk_rows(rows, cols, world) - 1) / chunk_rows(rows, cols, world);
}

/* Block b's pushes carry factors: ordered float32 SFs (SFB_FMS_FACTORS not
 * 0) where scale, n, B's columns of the block and c are fewer bytes than
 * the block's rows. */
static int factor_block(const struct eng_run *run, uint32_t b)
{
    const char *env = getenv("SFB_FMS_FACTORS");
    uint64_t kb = block_start(run->rows, run->cfg.world, b + 1) -
                  block_start(run->rows, run->cfg.world, b);
    return run->cfg.ordered && !run->cfg.dense && !(env && !strcmp(env, "0")) && kb &&
           8 + (uint64_t)run->cfg.s * (kb + run->cols) * 4 < kb * run->cols * 4;
}

/* Whether a push of factors holds exactly origin o's factors of clock t
 * for rows [r0, r0 + k). */
static int factors_match(const struct eng_run *run, const uint8_t *payload, uint32_t r0,
                         uint32_t k, uint32_t o, int64_t t)
{
    struct sfb_sf sf = {0};
    uint32_t n;
    float scale;
    memcpy(&scale, payload, 4);
    memcpy(&n, payload + 4, 4);
    int ok = !eng_make_sf(&sf, run->rows, run->cols, run->cfg.s, o, t) && n == run->cfg.s &&
             scale == sf.scale;
    const uint8_t *b = payload + 8, *c = b + (size_t)n * k * 4;
    for (uint32_t i = 0; ok && i < n; i++)
        ok = !memcmp(b + (size_t)i * k * 4, sf.b + (size_t)i * run->rows + r0, (size_t)k * 4) &&
             !memcmp(c + (size_t)i * run->cols * 4, sf.c + (size_t)i * run->cols,
                     (size_t)run->cols * 4);
    sfb_sf_free(&sf);
    return ok;
}

/* Whether the frame's rows equal rows [r0, r0 + k) of Σ ΔA(o, clock) over
 * origins o in [o0, o1). */
static int rows_match(const struct eng_run *run, const uint8_t *payload, uint32_t r0, uint32_t k,
                      uint32_t o0, uint32_t o1, int64_t clock)
{
    size_t n = (size_t)run->rows * run->cols;
    double *m = calloc(n, sizeof *m);
    if (!m) return 0;
    for (uint32_t o = o0; o < o1; o++)
        eng_add_delta(run, m, o, clock);
    int ok = 1;
    for (size_t i = 0; i < (size_t)k * run->cols; i++) {
        float v;
        memcpy(&v, payload + 4 * i, 4);
        if ((double)v != m[(size_t)r0 * run->cols + i]) ok = 0;
    }
    free(m);
    return ok;
}

static void tap(void *user, uint32_t src, uint32_t dst, uint8_t *frame, size_t len)
{
    struct fms_tap *t = user;
    const struct eng_run *run = t->run;
    struct sfb__wire_hdr h;
    const uint8_t *payload;
    if (len < SFB_WIRE_HDR_SIZE) {
        t->odd++;
        return;
    }
    sfb__wire_trusted(frame, &h, &payload);
    uint32_t world = run->cfg.world, b = world;
    if (h.type == SFB_WIRE_DENSE_ROWS && (h.flags & SFB_WIRE_F_FACTORS)) {
        /* factors of a whole block, to its owner, where they are expected */
        for (uint32_t i = 0; i < world; i++)
            if (h.s == block_start(run->rows, world, i) &&
                h.k == block_start(run->rows, world, i + 1) - h.s)
                b = i;
        if (b != dst || b == src || h.origin != src || h.clock < 0 ||
            h.clock >= ENG_MAX_CLOCKS || !factor_block(run, b)) {
            t->odd++;
            return;
        }
        t->factor_pushes++;
        t->pushes[dst][src][h.clock] += chunks(run->rows, run->cols, world, b);
        if (!factors_match(run, payload, h.s, h.k, src, h.clock)) t->wrong++;
        return;
    }
    for (uint32_t i = 0; i < world; i++) {
        uint32_t b0 = block_start(run->rows, world, i), b1 = block_start(run->rows, world, i + 1);
        /* chunk (h.s - b0) / cr of block i, exactly */
        uint32_t cr = chunk_rows(run->rows, run->cols, world);
        if (h.s >= b0 && h.s < b1 && (h.s - b0) % cr == 0 &&
            h.k == (b1 - h.s < cr ? b1 - h.s : cr))
            b = i;
    }
    if (h.type != SFB_WIRE_DENSE_ROWS || h.origin != src || b == world || h.clock < 0 ||
        h.clock >= ENG_MAX_CLOCKS) {
        t->odd++;
        return;
    }
    if (b == src) { /* the owner's sum of block b: every rank's rows */
        t->sums[dst][b][h.clock]++;
        if (!rows_match(run, payload, h.s, h.k, 0, world, h.clock)) t->wrong++;
    } else if (b == dst && !factor_block(run, b)) { /* a push to the owner: the pusher's rows */
        t->pushes[dst][src][h.clock]++;
        if (!rows_match(run, payload, h.s, h.k, src, src + 1, h.clock)) t->wrong++;
    } else {
        t->odd++;
    }
}

/* ...; *factor_pushes (NULL: none) counts the pushes of factors. */
static int run_fms_cols(uint32_t world, uint32_t k, uint32_t d, int ordered, size_t chunk_bytes,
                        uint64_t *factor_pushes)
{
    sfb__fms_chunk_bytes = chunk_bytes;
    struct eng_cfg cfg = {.ops = &sfb__fms_ops,
                          .world = world,
                          .k = k,
                          .d = d,
                          .s = 2,
                          .clocks = 5,
                          .staleness = 0,
                          .slow_rank = -1,
                          .check_each_wait = 1,
                          .ordered = ordered};
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    ASSERT_EQ(run.cols, d + 1);
    struct fms_tap *t = calloc(1, sizeof *t);
    ASSERT(t);
    t->run = &run;
    sfb__loopback_set_tap(lb, tap, t);
    int rets[ENG_MAX_RANKS];
    int ret = sfb__loopback_run(lb, eng_rank_main, &run, rets);
    ASSERT_OK(ret);
    for (uint32_t r = 0; r < world; r++)
        ASSERT_EQ(rets[r], 0);
    ASSERT_EQ(t->odd, 0);
    ASSERT_EQ(t->wrong, 0);
    for (uint32_t r = 0; r < world; r++) {
        uint32_t mine = chunks(run.rows, run.cols, world, r);
        for (int64_t c = 0; c < cfg.clocks; c++)
            for (uint32_t o = 0; o < world; o++) {
                /* per clock the sum of each chunk of every other block, and
                 * a push of each chunk of the own block (or its factors)
                 * from every other rank */
                ASSERT_EQ(t->sums[r][o][c], o != r ? chunks(run.rows, run.cols, world, o) : 0);
                ASSERT_EQ(t->pushes[r][o][c], o != r ? mine : 0);
            }
        /* per clock: each chunk pushed to every other owner (or one push
         * of its factors), and as an owner each summed chunk to every peer */
        uint64_t per_clock = (uint64_t)mine * (world - 1);
        for (uint32_t b = 0; b < world; b++)
            if (b != r) per_clock += factor_block(&run, b) ? 1 : chunks(run.rows, run.cols, world, b);
        ASSERT_EQ(run.r[r].rep.data_msgs, per_clock * cfg.clocks);
        struct sfb__loopback_stats st;
        sfb__loopback_stats(lb, r, &st);
        ASSERT_EQ(st.sent_msgs, run.r[r].rep.data_msgs);
        ASSERT_EQ(st.sent_bytes, run.r[r].rep.data_bytes);
        ASSERT(eng_replica_is(&run, r, cfg.clocks, "after draining"));
    }
    if (factor_pushes) *factor_pushes = t->factor_pushes;
    free(t);
    eng_fini(&run);
    sfb__loopback_close(&lb);
    sfb__fms_chunk_bytes = DEFAULT_CHUNK_BYTES;
    return 0;
}

static int run_fms_as(uint32_t world, uint32_t k, int ordered, size_t chunk_bytes)
{
    return run_fms_cols(world, k, 3, ordered, chunk_bytes, NULL);
}

static int run_fms(uint32_t world, uint32_t k)
{
    return run_fms_as(world, k, 0, (size_t)1 << 20);
}

/* Ordered: no read-my-writes; each worker adds the owners' sums as they are. */
static int test_ordered_p4(void)
{
    return run_fms_as(4, 5, 1, (size_t)1 << 20) || run_fms_as(3, 2, 1, (size_t)1 << 20);
}

/* Rows in bfloat16 (dense_dtype): every frame bfloat16 of its padded length,
 * about half the bytes of float32's, every replica the same bits (ordered
 * or not), within bfloat16's rounding of the exact sum, and not float32's
 * result (the rounding happened). */
struct bf16_tap {
    uint64_t frames, odd;
};

static void tap_bf16(void *user, uint32_t src, uint32_t dst, uint8_t *frame, size_t len)
{
    struct bf16_tap *t = user;
    struct sfb__wire_hdr h;
    const uint8_t *payload;
    (void)src;
    (void)dst;
    if (len < SFB_WIRE_HDR_SIZE) {
        t->odd++;
        return;
    }
    sfb__wire_trusted(frame, &h, &payload);
    size_t n = (size_t)h.k * h.d * 2;
    if (h.type != SFB_WIRE_DENSE_ROWS ||
        (h.flags & SFB_WIRE_F_PREC_MASK) >> SFB_WIRE_F_PREC_SHIFT != SFB_WIRE_BF16 ||
        h.payload_len != n + (4 - n % 4) % 4)
        t->odd++;
    t->frames++;
}

static int run_rows(uint32_t world, int ordered, unsigned prec, float *out, uint64_t *bytes)
{
    struct eng_cfg cfg = {.ops = &sfb__fms_ops,
                          .world = world,
                          .k = 9,
                          .d = 2, /* 3 columns: a chunk of one row is 6 bytes, padded */
                          .s = 2,
                          .clocks = 5,
                          .slow_rank = -1,
                          .ordered = ordered,
                          .inexact = 1,
                          .dense_prec = prec};
    sfb__fms_chunk_bytes = 12; /* a row per chunk */
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    struct bf16_tap t = {0};
    if (prec == SFB_WIRE_BF16) sfb__loopback_set_tap(lb, tap_bf16, &t);
    int rets[ENG_MAX_RANKS];
    ASSERT_OK(sfb__loopback_run(lb, eng_rank_main, &run, rets));
    *bytes = 0;
    size_t n = (size_t)run.rows * run.cols;
    /* the updates' sizes bound the rounding: (their largest numbers, summed)
     * × 2^-6 (a rounding to bfloat16 moves a number by at most 2^-9 of it,
     * twice: the push and the sum); a lost update is larger */
    double tol = 0, *d = calloc(n, sizeof *d);
    ASSERT(d);
    for (int64_t c = 0; c < cfg.clocks; c++)
        for (uint32_t o = 0; o < world; o++) {
            memset(d, 0, n * sizeof *d);
            eng_add_delta(&run, d, o, c);
            double top = 0;
            for (size_t i = 0; i < n; i++) top = fmax(top, fabs(d[i]));
            tol += top;
        }
    free(d);
    tol *= 1.0 / 64;
    const double *ref = run.ref + (size_t)cfg.clocks * n;
    for (uint32_t r = 0; r < world; r++) {
        ASSERT_EQ(rets[r], 0);
        const struct sfb_matrix *a = sfb_model_matrix(run.r[r].model, 0);
        if (r == 0) memcpy(out, a->data, n * sizeof *out);
        ASSERT(!memcmp(out, a->data, n * sizeof *out)); /* every replica the same bits */
        for (size_t i = 0; i < n; i++) /* 8 bits of each update and each sum */
            if (!(fabs(a->data[i] - ref[i]) <= tol)) {
                fprintf(stderr, "  rank %u element %zu: %g, exactly %g\n", r, i, a->data[i],
                        ref[i]);
                return 1;
            }
        *bytes += run.r[r].rep.data_bytes;
    }
    if (prec == SFB_WIRE_BF16) {
        ASSERT(t.frames > 0);
        ASSERT_EQ(t.odd, 0);
    }
    eng_fini(&run);
    sfb__loopback_close(&lb);
    sfb__fms_chunk_bytes = DEFAULT_CHUNK_BYTES;
    return 0;
}

static int test_bf16_rows(void)
{
    float f32[64], bf16[64];
    for (int ordered = 0; ordered < 2; ordered++) {
        uint64_t b32, b16;
        ASSERT_OK(run_rows(4, ordered, SFB_WIRE_F32, f32, &b32));
        ASSERT_OK(run_rows(4, ordered, SFB_WIRE_BF16, bf16, &b16));
        ASSERT(memcmp(f32, bf16, 27 * sizeof *f32) != 0);
        /* payloads of 12 bytes a row become 8 (6 and the padding), headers
         * stay: (64 + 8) / (64 + 12) of the bytes */
        ASSERT_NEAR((double)b16 / (double)b32, 72.0 / 76.0, 1e-9);
    }
    return 0;
}

/* A rank whose update holds a NaN (or an infinite scale) past the job
 * API's check, as a hostile or broken peer's would: its pushes reach the
 * owners, whose sums come out non-finite; the owner of those rows fails
 * naming the origin and the clock (in a job, its ABORT then fails the
 * others; here they find the deadlock), every rank fails, and no replica
 * takes a non-finite number. In float32 and in bfloat16 rows, in chunks
 * of a row. */
static int run_poisoned_as(uint32_t world, int poison, unsigned prec, uint32_t k, int ordered,
                           const char *detail)
{
    struct eng_cfg cfg = {.ops = &sfb__fms_ops,
                          .world = world,
                          .ordered = ordered,
                          .k = k,
                          .d = 3,
                          .s = 2,
                          .clocks = 6,
                          .slow_rank = -1,
                          .poison = poison,
                          .poison_rank = world - 2,
                          .poison_clock = 3,
                          .dense_prec = prec};
    sfb__fms_chunk_bytes = 16; /* a row per chunk */
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    int rets[ENG_MAX_RANKS];
    ASSERT_NE(sfb__loopback_run(lb, eng_rank_main, &run, rets), 0);
    char want[64];
    snprintf(want, sizeof want, "the update rank %u published at clock 3", world - 2);
    uint32_t named = 0;
    for (uint32_t r = 0; r < world; r++) {
        ASSERT_NE(rets[r], 0);
        named += strstr(run.r[r].why, want) && strstr(run.r[r].why, detail);
        if (r == world - 2) continue; /* (its own update, read-my-writes) */
        ASSERT(eng_replica_finite(&run, r));
    }
    ASSERT(named >= 1);
    eng_fini(&run);
    sfb__loopback_close(&lb);
    sfb__fms_chunk_bytes = DEFAULT_CHUNK_BYTES;
    return 0;
}

static int run_poisoned(uint32_t world, int poison, unsigned prec)
{
    return run_poisoned_as(world, poison, prec, 7, 0, "is not a finite number");
}

static int test_nonfinite(void)
{
    return run_poisoned(3, 1, SFB_WIRE_F32) || run_poisoned(4, 2, SFB_WIRE_F32) ||
           run_poisoned(4, 1, SFB_WIRE_BF16);
}

/* Dense updates (publish_dense, sfb.torch's gradients): the same sums and
 * replicas as the factors give; an update with a NaN in its last chunk, or
 * whose scale · delta overflows in its first number, is refused before
 * anything leaves (the pushes' checksums are fed in the same pass), and
 * the true one then goes as usual. staged: each update in a comm buffer
 * the engine may send from (sfb_job_dense_buffer's), the same replicas. */
static int run_dense(uint32_t world, unsigned prec, int staged)
{
    sfb__fms_chunk_bytes = 16; /* a row per chunk: the NaN in the last */
    struct eng_cfg cfg = {.ops = &sfb__fms_ops,
                          .world = world,
                          .k = 7,
                          .d = 3,
                          .s = 2,
                          .clocks = 4,
                          .staleness = 0,
                          .slow_rank = -1,
                          .check_each_wait = prec == SFB_WIRE_F32,
                          .ordered = 1,
                          .poison = 3,
                          .poison_rank = 1,
                          .poison_clock = 2,
                          .dense_prec = prec,
                          .dense = 1,
                          .staged = staged};
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    struct fms_tap *t = calloc(1, sizeof *t);
    ASSERT(t);
    t->run = &run;
    if (prec == SFB_WIRE_F32) sfb__loopback_set_tap(lb, tap, t);
    int rets[ENG_MAX_RANKS], ret = sfb__loopback_run(lb, eng_rank_main, &run, rets);
    for (uint32_t r = 0; r < world; r++)
        if (ret || rets[r]) fprintf(stderr, "rank %u: %d %s\n", r, rets[r], run.r[r].why);
    ASSERT_OK(ret);
    for (uint32_t r = 0; r < world; r++) ASSERT_EQ(rets[r], 0);
    ASSERT_EQ(t->odd, 0);
    ASSERT_EQ(t->wrong, 0);
    /* every replica the same bytes, the reference's at f32 */
    const struct sfb_matrix *a0 = sfb_model_matrix(run.r[0].model, 0);
    size_t bytes = (size_t)a0->rows * a0->cols * sizeof(float);
    for (uint32_t r = 1; r < world; r++)
        ASSERT(memcmp(sfb_model_matrix(run.r[r].model, 0)->data, a0->data, bytes) == 0);
    if (prec == SFB_WIRE_F32) ASSERT(eng_replica_is(&run, 0, cfg.clocks, "after the run"));
    free(t);
    eng_fini(&run);
    sfb__loopback_close(&lb);
    sfb__fms_chunk_bytes = DEFAULT_CHUNK_BYTES;
    return 0;
}

/* A hostile or broken owner: its summed chunk of clock 2 reaches rank 1
 * with a NaN in it (and a checksum that matches): rank 1 refuses to apply
 * it and the job fails naming the owner's update, no replica holding a
 * NaN. The NaN at number `at` of the chunk (FMS adds a chunk in blocks of
 * 4096 numbers, each checked just before it is added: in the first block,
 * or in the second after the first was added), in float32 or bfloat16. */
struct hostile {
    size_t at;
    unsigned prec;
};

static void tap_hostile(void *user, uint32_t src, uint32_t dst, uint8_t *frame, size_t len)
{
    const struct hostile *ho = user;
    struct sfb__wire_hdr h;
    const uint8_t *payload;
    if (len < SFB_WIRE_HDR_SIZE) return;
    sfb__wire_trusted(frame, &h, &payload);
    size_t e = ho->prec == SFB_WIRE_BF16 ? 2 : 4;
    if (h.type != SFB_WIRE_DENSE_ROWS || src != 0 || dst != 1 || h.clock != 2 ||
        h.s >= 2 || h.payload_len < e * (ho->at + 1)) /* (rows 0 and 1: owner 0's block at K = 7, P = 3) */
        return;
    float nan = NAN;
    uint8_t *x = frame + SFB_WIRE_HDR_SIZE + e * ho->at;
    if (e == 2) memcpy(x, (const uint8_t *)&nan + 2, 2); /* (little-endian: the high half) */
    else memcpy(x, &nan, sizeof nan);
    struct sfb__wire_piece p = {frame + SFB_WIRE_HDR_SIZE, (size_t)h.payload_len};
    sfb__wire_encode(&h, &p, 1, frame);
}

static int run_hostile_owner(uint32_t d, size_t at, unsigned prec)
{
    sfb__fms_chunk_bytes = d < 100 ? 16 : (size_t)1 << 20; /* a row per chunk, or the block */
    struct eng_cfg cfg = {.ops = &sfb__fms_ops, .world = 3, .k = 7, .d = d, .s = 2,
                          .clocks = 4, .slow_rank = -1, .ordered = 1, .dense_prec = prec};
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    struct hostile ho = {at, prec};
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    sfb__loopback_set_tap(lb, tap_hostile, &ho);
    int rets[ENG_MAX_RANKS];
    ASSERT_NE(sfb__loopback_run(lb, eng_rank_main, &run, rets), 0);
    ASSERT_NE(rets[1], 0);
    ASSERT(strstr(run.r[1].why, "the update rank 0 published at clock 2"));
    char want[64];
    snprintf(want, sizeof want, "row %zu, column %zu of its rows is not a finite number",
             at / run.cols, at % run.cols); /* (MLR's matrix: d + 1 columns) */
    ASSERT(strstr(run.r[1].why, want));
    for (uint32_t r = 0; r < 3; r++) ASSERT(eng_replica_finite(&run, r));
    eng_fini(&run);
    sfb__loopback_close(&lb);
    sfb__fms_chunk_bytes = DEFAULT_CHUNK_BYTES;
    return 0;
}

static int test_hostile_owner(void)
{
    /* rows of 4 in chunks of a row; rows of 3001 in one chunk of 6002
     * numbers, the NaN in its first block or its second */
    return run_hostile_owner(3, 1, SFB_WIRE_F32) || run_hostile_owner(3000, 17, SFB_WIRE_F32) ||
           run_hostile_owner(3000, 5000, SFB_WIRE_F32) ||
           run_hostile_owner(3000, 5000, SFB_WIRE_BF16);
}

/* Factors whose product the engine checks (publish_one with bad, what
 * sfb_job_publish_one asks where the product is the smaller pass): a NaN
 * in a factor and a product that overflows float32 are refused before
 * anything leaves; the true factors then go as usual, every replica the
 * reference's. */
static int run_checked(uint32_t world, uint32_t k, uint32_t s)
{
    sfb__fms_chunk_bytes = 16; /* a row per chunk: the NaN in the last */
    struct eng_cfg cfg = {.ops = &sfb__fms_ops, .world = world, .k = k, .d = 3, .s = s,
                          .clocks = 4, .slow_rank = -1, .check_each_wait = 1, .ordered = 1,
                          .poison = 4, .poison_rank = world - 1, .poison_clock = 2};
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    int rets[ENG_MAX_RANKS] = {0}, ret;
    /* (one worker: the factors checked, the product going straight into
     * the replica; the same refusals) */
    ret = world == 1 ? eng_run_single(&run) : sfb__loopback_run(lb, eng_rank_main, &run, rets);
    for (uint32_t r = 0; r < world; r++)
        if (ret || rets[r]) fprintf(stderr, "rank %u: %d %s\n", r, rets[r], run.r[r].why);
    ASSERT_OK(ret);
    for (uint32_t r = 0; r < world; r++) ASSERT_EQ(rets[r], 0);
    for (uint32_t r = 0; r < world; r++)
        ASSERT(eng_replica_is(&run, r, cfg.clocks, "after the run"));
    eng_fini(&run);
    sfb__loopback_close(&lb);
    sfb__fms_chunk_bytes = DEFAULT_CHUNK_BYTES;
    return 0;
}

static int test_checked(void)
{
    return run_checked(3, 7, 2) || run_checked(4, 9, 5) || run_checked(1, 4, 3);
}

static int test_dense(void)
{
    return run_dense(4, SFB_WIRE_F32, 0) || run_dense(3, SFB_WIRE_BF16, 0) ||
           run_dense(4, SFB_WIRE_F32, 1) || run_dense(3, SFB_WIRE_BF16, 1);
}

/* Blocks of 10 and 11 rows in chunks of 2 rows (the 11-row block's last
 * one short), blocks of 2 and 3 rows cut to a row a chunk (fewer than 4
 * chunks of 2: a quarter of 2 rows is still one), and of 1 row per chunk:
 * every chunk summed and applied once. */
static int test_chunks(void)
{
    sfb__fms_chunk_bytes = 32;
    ASSERT_EQ(sfb__fms_chunk_rows(41, COLS, 4), 2);
    ASSERT_EQ(sfb__fms_chunk_rows(9, COLS, 4), 1);
    sfb__fms_chunk_bytes = DEFAULT_CHUNK_BYTES;
    return run_fms_as(4, 41, 0, 32) || run_fms_as(4, 41, 1, 32) || run_fms_as(4, 9, 0, 32) ||
           run_fms_as(4, 9, 1, 32) || run_fms_as(3, 7, 0, 16) || run_fms_as(3, 7, 1, 1);
}

/* The chunk grid: up to sfb__fms_chunk_bytes, at least 4 chunks to the
 * largest block while they stay above a quarter of it, the block split
 * evenly. */
static int test_chunk_rows(void)
{
    sfb__fms_chunk_bytes = DEFAULT_CHUNK_BYTES;
    /* a 4096 x 4097 layer (row 16388 bytes) among 4: 255 rows would leave
     * 4 rows for a fifth chunk; 5 chunks of 205 rows (3.4 MB) instead */
    ASSERT_EQ(sfb__fms_chunk_rows(4096, 4097, 4), 205);
    /* 16 MiB of 4096 columns among 4: blocks of 4 MiB in 4 chunks of 1 MiB */
    ASSERT_EQ(sfb__fms_chunk_rows(1024, 4096, 4), 64);
    /* 64 MiB: blocks of 16 MiB in 4 chunks of 4 MiB */
    ASSERT_EQ(sfb__fms_chunk_rows(4096, 4096, 4), 256);
    /* 4 MiB: a block of 1 MiB is one chunk (a quarter of 4 MiB) */
    ASSERT_EQ(sfb__fms_chunk_rows(256, 4096, 4), 64);
    /* 1.5 MiB blocks: two chunks of 0.75 MiB, not 1 MiB and a half */
    ASSERT_EQ(sfb__fms_chunk_rows(384, 4096, 4), 48);
    /* a row wider than the chunk: one row; one rank: the matrix is the block */
    ASSERT_EQ(sfb__fms_chunk_rows(10, 2u << 20, 4), 1);
    ASSERT_EQ(sfb__fms_chunk_rows(4096, 4096, 1), 256);
    ASSERT_EQ(sfb__fms_chunk_rows(0, 4096, 4), 1);
    sfb__fms_chunk_bytes = 16; /* a row of 4 columns */
    ASSERT_EQ(sfb__fms_chunk_rows(1000, 4, 2), 1);
    sfb__fms_chunk_bytes = DEFAULT_CHUNK_BYTES;
    return 0;
}

/* Ordered SFs whose factors are fewer bytes than an owner's rows: every
 * push carries factors (one message per owner and clock, the sums the
 * same bytes and the replicas the reference's), with blocks of one chunk
 * and of several (the owner's sgemm on its chunk's columns of B), and
 * where only the larger blocks qualify (7 rows among 3: blocks of 2 and 3
 * rows of 3001 columns, rows only for the 2-row ones); SFB_FMS_FACTORS=0
 * pushes rows as before. */
static int test_factors(void)
{
    uint64_t n = 0;
    ASSERT_OK(run_fms_cols(4, 41, 200, 1, (size_t)1 << 20, &n));
    ASSERT_EQ(n, 5 * 4 * 3); /* clocks × ranks × other owners */
    ASSERT_OK(run_fms_cols(4, 41, 200, 1, 201 * 4 * 3, &n)); /* chunks of 3 rows */
    ASSERT_EQ(n, 5 * 4 * 3);
    ASSERT_OK(run_fms_cols(3, 7, 3000, 1, (size_t)1 << 20, &n));
    ASSERT_EQ(n, 5 * 2); /* block 2 (3 rows), pushed by ranks 0 and 1 */
    ASSERT_OK(run_fms_cols(4, 41, 200, 0, (size_t)1 << 20, &n)); /* read-my-writes: rows */
    ASSERT_EQ(n, 0);
    setenv("SFB_FMS_FACTORS", "0", 1);
    int ret = run_fms_cols(4, 41, 200, 1, (size_t)1 << 20, &n);
    unsetenv("SFB_FMS_FACTORS");
    ASSERT_OK(ret);
    ASSERT_EQ(n, 0);
    return 0;
}

/* A NaN in a factor (sample 0, row 1: owner 0's block of 10 rows) or an
 * infinite scale, pushed as factors: the owner's sum comes out
 * non-finite and it fails naming the origin and what in its factors. */
static int test_factors_nonfinite(void)
{
    return run_poisoned_as(4, 1, SFB_WIRE_F32, 41, 1,
                           "its factors' B: sample 0, row 1 is not a finite number") ||
           run_poisoned_as(4, 2, SFB_WIRE_F32, 41, 1,
                           "its factors' scale is not a finite number");
}

/* A hostile or broken pusher's factors (rank 1's push of clock 1 to owner
 * 0, re-encoded with a valid checksum): a sample count that disagrees with
 * the length, or rows that are not the owner's block: owner 0 refuses the
 * frame naming why, forms no sum of block 0 of that clock, and no replica
 * takes a wrong number (the ranks then wait for the push that never
 * comes: the loopback's deadlock). */
struct hostile_push {
    int how, done;
    char seen[160];
};

static void tap_hostile_push(void *user, uint32_t src, uint32_t dst, uint8_t *frame, size_t len)
{
    struct hostile_push *hp = user;
    struct sfb__wire_hdr h;
    const uint8_t *payload;
    if (len < SFB_WIRE_HDR_SIZE || hp->done) return;
    sfb__wire_trusted(frame, &h, &payload);
    int factors = h.type == SFB_WIRE_DENSE_ROWS && (h.flags & SFB_WIRE_F_FACTORS);
    if (src != 1 || dst != 0 || h.clock != 1 || !factors) return;
    uint8_t *p = frame + SFB_WIRE_HDR_SIZE;
    if (hp->how == 1) { /* n + 1 */
        uint32_t n;
        memcpy(&n, p + 4, 4);
        n++;
        memcpy(p + 4, &n, 4);
    } else { /* a row later: not the block */
        h.s += 1;
    }
    struct sfb__wire_piece piece = {p, (size_t)h.payload_len};
    sfb__wire_encode(&h, &piece, 1, frame);
    hp->done = 1;
}

static struct hostile_push *log_hp;

static void log_rejected(void *user, enum sfb_log_level level, int rank, const char *msg)
{
    (void)user;
    (void)level;
    (void)rank;
    if (log_hp && strstr(msg, "fms: rejected a frame from rank 1") && !log_hp->seen[0])
        snprintf(log_hp->seen, sizeof log_hp->seen, "%s", msg);
}

static int run_hostile_push(int how, const char *why)
{
    struct eng_cfg cfg = {.ops = &sfb__fms_ops, .world = 4, .k = 41, .d = 200, .s = 2,
                          .clocks = 3, .slow_rank = -1, .ordered = 1};
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    struct hostile_push hp = {.how = how};
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    sfb__loopback_set_tap(lb, tap_hostile_push, &hp);
    log_hp = &hp;
    sfb_log_set(log_rejected, NULL, SFB_LOG_WARN);
    int rets[ENG_MAX_RANKS];
    int ret = sfb__loopback_run(lb, eng_rank_main, &run, rets);
    sfb_log_set(sfb_log_stderr, NULL, SFB_LOG_WARN);
    log_hp = NULL;
    ASSERT_NE(ret, 0);
    ASSERT(hp.done);
    ASSERT_STR_CONTAINS(hp.seen, why);
    /* block 0 (rows 0..9) holds clock 0's sums alone on every rank */
    size_t n = (size_t)run.rows * run.cols;
    for (uint32_t r = 0; r < 4; r++) {
        const float *a = sfb_model_matrix(run.r[r].model, 0)->data;
        for (size_t i = 0; i < 10 * (size_t)run.cols; i++) ASSERT_EQ((double)a[i], run.ref[n + i]);
        ASSERT(eng_replica_finite(&run, r));
    }
    eng_fini(&run);
    sfb__loopback_close(&lb);
    return 0;
}

static int test_factors_hostile(void)
{
    return run_hostile_push(1, "factors whose sample count disagrees with their length") ||
           run_hostile_push(2, "factors of rows that are not this rank's block");
}

static int test_sums_p4(void)
{
    return run_fms(4, 5); /* blocks of 1, 1, 1 and 2 rows */
}

static int test_empty_block(void)
{
    return run_fms(3, 2); /* block 0 is empty */
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        {"sums_p4", test_sums_p4},
        {"dense", test_dense},
        {"checked", test_checked},
        {"hostile_owner", test_hostile_owner},
        {"empty_block", test_empty_block},
        {"ordered_p4", test_ordered_p4},
        {"chunks", test_chunks},
        {"chunk_rows", test_chunk_rows},
        {"bf16_rows", test_bf16_rows},
        {"nonfinite", test_nonfinite},
        {"factors", test_factors},
        {"factors_nonfinite", test_factors_nonfinite},
        {"factors_hostile", test_factors_hostile},
    };
    return test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
}
