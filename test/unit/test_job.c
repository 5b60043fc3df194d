/* The job API (include/sfb/job.h, src/job/job.c) in one process (world 1,
 * given explicitly): settings and argument checks, the attach/wait/publish
 * order, shape checks, and the own update applied exactly. Multi-process
 * behaviour: test/integration/job_many.c, sfb_launch.sh and mlr_numpy.sh. */
#include <sfb/job.h>
#include "sfb/codec.h"
#include "src/base/util.h"
#include "test.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define ASSERT_FAILS(call, code, text)                                          \
    do {                                                                       \
        ASSERT_EQ((call), (code));                                             \
        ASSERT_STR_CONTAINS(sfb_error_message(code), text);                    \
    } while (0)

static int open_single(struct sfb_job **job)
{
    struct sfb_job_settings s;
    sfb_job_default_settings(&s);
    s.world = 1;
    return sfb_job_open(job, &s);
}

static int test_defaults(void)
{
    struct sfb_job_settings s;
    memset(&s, 0xff, sizeof s);
    sfb_job_default_settings(&s);
    ASSERT_EQ(s.version, SFB_JOB_SETTINGS_VERSION);
    ASSERT_EQ(s.world, 0);
    ASSERT(s.rendezvous == NULL && s.job_key == NULL && s.provider == NULL);
    ASSERT(strcmp(s.progress, "auto") == 0);
    ASSERT_EQ(s.peer_timeout_s, 5.0);
    for (size_t i = 0; i < sizeof s.reserved; i++) ASSERT_EQ(s.reserved[i], 0);
    struct sfb_job_attach a;
    memset(&a, 0xff, sizeof a);
    sfb_job_default_attach(&a);
    ASSERT_EQ(a.version, SFB_JOB_ATTACH_VERSION);
    ASSERT(strcmp(a.engine, "sfb") == 0);
    ASSERT_EQ(a.staleness, 0);
    ASSERT_EQ(a.apply_early, -1);
    ASSERT(a.topology == NULL && a.mats == NULL && a.sf_bytes == NULL);
    sfb_job_default_settings(NULL);
    sfb_job_default_attach(NULL);
    return 0;
}

static int test_null_arguments(void)
{
    struct sfb_job *job = NULL;
    struct sfb_job_settings s;
    struct sfb_job_stats st = {.size = sizeof st};
    sfb_job_default_settings(&s);
    ASSERT_FAILS(sfb_job_open(NULL, &s), -EINVAL, "sfb_job_open: argument 'job_out' is NULL");
    ASSERT_FAILS(sfb_job_open(&job, NULL), -EINVAL, "sfb_job_open: argument 's' is NULL");
    ASSERT(job == NULL);
    ASSERT_FAILS(sfb_job_attach(NULL, NULL), -EINVAL, "sfb_job_attach: argument 'job'");
    ASSERT_FAILS(sfb_job_wait(NULL, 0, NULL), -EINVAL, "sfb_job_wait: argument 'job'");
    ASSERT_FAILS(sfb_job_publish(NULL, 0, NULL, 0), -EINVAL, "sfb_job_publish: argument 'job'");
    ASSERT_FAILS(sfb_job_drain(NULL, 0, NULL), -EINVAL, "sfb_job_drain: argument 'job'");
    ASSERT_FAILS(sfb_job_barrier(NULL), -EINVAL, "sfb_job_barrier: argument 'job'");
    ASSERT_FAILS(sfb_job_allgather(NULL, "", 0, &s), -EINVAL, "sfb_job_allgather: argument 'job'");
    ASSERT_FAILS(sfb_job_agree(NULL, ""), -EINVAL, "sfb_job_agree: argument 'job'");
    ASSERT_FAILS(sfb_job_finish(NULL, 0), -EINVAL, "sfb_job_finish: argument 'job'");
    ASSERT_FAILS(sfb_job_stats(NULL, &st), -EINVAL, "sfb_job_stats: argument 'job'");
    ASSERT_FAILS(sfb_job_name_calls(NULL, "x"), -EINVAL, "sfb_job_name_calls: argument 'job'");
    sfb__clear_error();
    ASSERT_EQ(sfb_job_rank(NULL), UINT32_MAX);
    ASSERT_STR_CONTAINS(sfb_error_message(-EINVAL), "sfb_job_rank: argument 'job'");
    ASSERT_EQ(sfb_job_world(NULL), UINT32_MAX);
    sfb_job_abort(NULL, "x");
    sfb_job_close(NULL);
    sfb_job_close(&job);
    return 0;
}

static int test_bad_settings(void)
{
    struct sfb_job *job = NULL;
    struct sfb_job_settings s;
    sfb_job_default_settings(&s);
    s.version = 0;
    ASSERT_FAILS(sfb_job_open(&job, &s), -SFB_EVERSION, "settings version 0");
    sfb_job_default_settings(&s);
    s.reserved[7] = 1;
    ASSERT_FAILS(sfb_job_open(&job, &s), -SFB_EVERSION, "reserved");
    sfb_job_default_settings(&s);
    s.world = 2;
    s.rank = 2;
    ASSERT_FAILS(sfb_job_open(&job, &s), -SFB_EUSAGE, "rank 2 of world 2");
    sfb_job_default_settings(&s);
    s.world = UINT32_MAX; /* a -1 through the unsigned field: named, not clamped */
    ASSERT_FAILS(sfb_job_open(&job, &s), -SFB_EUSAGE, "world 4294967295: expected 1 .. 2147483647");
    sfb_job_default_settings(&s);
    s.progress = "fast";
    ASSERT_FAILS(sfb_job_open(&job, &s), -SFB_EUSAGE, "progress \"fast\"");
    sfb_job_default_settings(&s);
    s.peer_timeout_s = 0;
    ASSERT_FAILS(sfb_job_open(&job, &s), -SFB_EUSAGE, "must all be positive");
    /* world 2 given explicitly needs the rendezvous */
    sfb_job_default_settings(&s);
    s.world = 2;
    ASSERT_FAILS(sfb_job_open(&job, &s), -SFB_EUSAGE, "the rendezvous is not set");
    ASSERT(job == NULL);
    return 0;
}

/* sfb_job_name_calls: 1 to 31 bytes, NULL for the calls' own names */
static int test_name_calls(void)
{
    struct sfb_job *job = NULL;
    ASSERT_OK(open_single(&job));
    ASSERT_FAILS(sfb_job_name_calls(job, ""), -SFB_EUSAGE, "a name of 0 bytes (1 to 31)");
    ASSERT_FAILS(sfb_job_name_calls(job, "0123456789012345678901234567890123"), -SFB_EUSAGE,
                 "a name of 34 bytes (1 to 31)");
    ASSERT_OK(sfb_job_name_calls(job, "0123456789012345678901234567890"));
    ASSERT_OK(sfb_job_barrier(job)); /* (a job of one: no collective to name) */
    ASSERT_OK(sfb_job_name_calls(job, NULL));
    sfb_job_close(&job);
    return 0;
}

static int test_order_and_shapes(void)
{
    struct sfb_job *job = NULL;
    ASSERT_OK(open_single(&job));
    ASSERT_EQ(sfb_job_rank(job), 0);
    ASSERT_EQ(sfb_job_world(job), 1);
    ASSERT_FAILS(sfb_job_wait(job, 0, NULL), -SFB_EUSAGE, "sfb_job_wait: no matrices attached");
    float data[6] = {0};
    struct sfb_matrix m = {2, 3, data};
    struct sfb_job_attach a;
    sfb_job_default_attach(&a);
    a.mats = &m;
    a.max_s = 2;
    a.engine = "nope";
    ASSERT_FAILS(sfb_job_attach(job, &a), -SFB_EUSAGE, "\"nope\" is not an engine");
    a.engine = "sfb,fms"; /* one per matrix: here one matrix */
    ASSERT_FAILS(sfb_job_attach(job, &a), -SFB_EUSAGE, "names more engines than the 1 matrices");
    a.engine = "sfb,";
    ASSERT_FAILS(sfb_job_attach(job, &a), -SFB_EUSAGE, "\"\" is not an engine");
    a.engine = "sfb";
    a.max_s = 0;
    ASSERT_FAILS(sfb_job_attach(job, &a), -SFB_EUSAGE, "max_s is 0");
    a.max_s = 2;
    a.n = SFB_JOB_MAX_MATRICES + 1;
    ASSERT_FAILS(sfb_job_attach(job, &a), -SFB_EUSAGE, "65537 matrices: expected 1 to 65536");
    a.n = 1;
    ASSERT_OK(sfb_job_attach(job, &a));
    ASSERT_FAILS(sfb_job_attach(job, &a), -SFB_EUSAGE, "already attached");
    /* clocks in order: wait(t), publish(t), wait(t + 1), ... */
    float b[6] = {1, 2, 3, 4, 5, 6}, c[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    float zeros[3] = {0};
    struct sfb_sf ok = {.rows = 2, .cols = 3, .s = 1, .scale = 1, .b = zeros, .c = c};
    ASSERT_FAILS(sfb_job_wait(job, 1, NULL), -SFB_EUSAGE, "clock 1 out of order: the next wait is for clock 0");
    ASSERT_FAILS(sfb_job_publish(job, 0, &ok, 1), -SFB_EUSAGE, "clock 0 is due, after its wait");
    ASSERT_FAILS(sfb_job_drain(job, 0, NULL), -SFB_EUSAGE, "expected -1 .. -1");
    ASSERT_OK(sfb_job_wait(job, 0, NULL));
    ASSERT_FAILS(sfb_job_wait(job, 0, NULL), -SFB_EUSAGE, "after its publish");
    ASSERT_FAILS(sfb_job_publish(job, 1, &ok, 1), -SFB_EUSAGE, "clock 1 out of order: clock 0 is due");
    struct sfb_sf sf = {.rows = 3, .cols = 3, .s = 2, .scale = 1, .b = b, .c = c};
    ASSERT_FAILS(sfb_job_publish(job, 0, &sf, 1), -SFB_ESHAPE, "SF 0 is for 3 x 3, matrix 0 is 2 x 3");
    sf.rows = 2;
    sf.s = 3;
    ASSERT_FAILS(sfb_job_publish(job, 0, &sf, 1), -SFB_ESHAPE, "3 samples, more than max_s 2");
    sf.s = 2;
    ASSERT_FAILS(sfb_job_publish(job, 0, &sf, 2), -SFB_EUSAGE, "2 SFs for 1 attached matrices");
    sf.s = 0;
    ASSERT_FAILS(sfb_job_publish(job, 0, &sf, 1), -SFB_ESHAPE, "SF 0 has no sample");
    sf.s = 2;
    sf.b = NULL;
    ASSERT_FAILS(sfb_job_publish(job, 0, &sf, 1), -EINVAL, "SF 0 has a NULL array");
    ASSERT_OK(sfb_job_publish(job, 0, &ok, 1)); /* one sample of zeros: nothing added */
    ASSERT_OK(sfb_job_drain(job, 0, NULL));
    ASSERT_FAILS(sfb_job_finish(job, 1), -SFB_EUSAGE, "expected -1 .. 0");
    ASSERT_OK(sfb_job_finish(job, 0));
    for (int i = 0; i < 6; i++) ASSERT_EQ(data[i], 0);
    sfb_job_close(&job);
    ASSERT(job == NULL);
    return 0;
}

/* The own update is applied at publish (read-my-writes): A += scale·BᵀC. */
static int run_engine(const char *engine)
{
    struct sfb_job *job = NULL;
    ASSERT_OK(open_single(&job));
    float data[6] = {0};
    struct sfb_matrix m = {2, 3, data};
    struct sfb_job_attach a;
    sfb_job_default_attach(&a);
    a.mats = &m;
    a.max_s = 2;
    a.engine = engine;
    ASSERT_OK(sfb_job_attach(job, &a));
    /* b: 2 samples × 2 rows, c: 2 samples × 3 cols */
    float b[4] = {1, 2, 3, 4}, c[6] = {1, 0, 2, 0, 1, 1};
    struct sfb_sf sf = {.rows = 2, .cols = 3, .s = 2, .scale = 0.5f, .b = b, .c = c};
    for (int64_t t = 0; t < 2; t++) {
        struct sfb_job_clock acct = {.size = sizeof acct};
        ASSERT_OK(sfb_job_wait(job, t, &acct));
        ASSERT_EQ(acct.applied, 0);
        struct sfb_sf before = sf;
        ASSERT_OK(sfb_job_publish(job, t, &sf, 1));
        /* read only: the caller's factors come back untouched */
        ASSERT(memcmp(&before, &sf, sizeof sf) == 0);
    }
    /* BᵀC = [[1, 3, 5], [2, 4, 8]]: 0.5 of it per clock, two clocks */
    const float want[6] = {1, 3, 5, 2, 4, 8};
    for (int i = 0; i < 6; i++) ASSERT_EQ(data[i], want[i]);
    ASSERT_OK(sfb_job_agree(job, "a=1\n"));
    uint64_t mine = 42, all = 0;
    ASSERT_OK(sfb_job_allgather(job, &mine, sizeof mine, &all));
    ASSERT_EQ(all, 42);
    ASSERT_OK(sfb_job_barrier(job));
    ASSERT_OK(sfb_job_finish(job, 1));
    struct sfb_job_stats st = {.size = sizeof st};
    ASSERT_OK(sfb_job_stats(job, &st));
    ASSERT_EQ(st.bytes_sent, 0);
    ASSERT_EQ(st.data_msgs, 0);
    sfb_job_close(&job);
    return 0;
}

/* A NaN or an infinity anywhere in a factor (scale, b, dense c, CSR c) is
 * refused at publish with -ERANGE naming the clock, the matrix and where:
 * nothing is applied, and the clock stays due (a finite factor then goes). */
static int test_publish_nonfinite(void)
{
    struct sfb_job *job = NULL;
    ASSERT_OK(open_single(&job));
    float data[6] = {0};
    struct sfb_matrix m = {2, 3, data};
    struct sfb_job_attach a;
    sfb_job_default_attach(&a);
    a.mats = &m;
    a.max_s = 2;
    ASSERT_OK(sfb_job_attach(job, &a));
    float b[4] = {1, 2, 3, 4}, c[6] = {1, 0, 2, 0, 1, 1};
    struct sfb_sf sf = {.rows = 2, .cols = 3, .s = 2, .scale = 0.5f, .b = b, .c = c};
    ASSERT_OK(sfb_job_wait(job, 0, NULL));
    ASSERT_OK(sfb_job_publish(job, 0, &sf, 1));
    ASSERT_OK(sfb_job_wait(job, 1, NULL));
    sf.scale = INFINITY;
    ASSERT_FAILS(sfb_job_publish(job, 1, &sf, 1), -ERANGE,
                 "sfb_job_publish: clock 1, matrix 0: scale is inf");
    sf.scale = 0.5f;
    b[3] = NAN;
    ASSERT_FAILS(sfb_job_publish(job, 1, &sf, 1), -ERANGE, "clock 1, matrix 0: b[1][1] is nan");
    b[3] = 4;
    c[2] = -INFINITY;
    ASSERT_FAILS(sfb_job_publish(job, 1, &sf, 1), -ERANGE, "clock 1, matrix 0: c[0][2] is inf");
    c[2] = 2;
    /* CSR c: sample 1 holds columns 1 and 2; the second value is NaN */
    uint32_t rp[3] = {0, 1, 3}, col[3] = {0, 1, 2};
    float val[3] = {1, 1, NAN};
    struct sfb_sf csr = {.rows = 2, .cols = 3, .s = 2, .scale = 0.5f, .sparse_c = 1, .b = b,
                         .c_row_ptr = rp, .c_col = col, .c_val = val};
    ASSERT_FAILS(sfb_job_publish(job, 1, &csr, 1), -ERANGE, "clock 1, matrix 0: c[1][2] is nan");
    /* nothing of the refused factors reached the replica */
    const float once[6] = {0.5f, 1.5f, 2.5f, 1, 2, 4};
    for (int i = 0; i < 6; i++) ASSERT_EQ(data[i], once[i]);
    ASSERT_OK(sfb_job_publish(job, 1, &sf, 1));
    ASSERT_OK(sfb_job_finish(job, 1));
    sfb_job_close(&job);
    return 0;
}

/* factor_dtype: "f32"/"bf16" for all matrices or one per matrix, else
 * refused naming the entry. A job of one worker in bf16 applies the factors
 * rounded to bfloat16, as a job of several would (accumulating in float32);
 * an FMS matrix ignores it. */
static int test_factor_dtype(void)
{
    float data[2][6] = {{0}};
    struct sfb_matrix m[2] = {{2, 3, data[0]}, {2, 3, data[1]}};
    struct sfb_job_attach a;
    sfb_job_default_attach(&a);
    ASSERT(a.factor_dtype == NULL);
    a.n = 2;
    a.mats = m;
    a.max_s = 2;
    a.engine = "sfb,fms";
    struct sfb_job *job = NULL;
    ASSERT_OK(open_single(&job));
    const char *bad[] = {"f16", "bf16,f32,f32", "bf16,", "", "BF16", "bf16 "};
    for (size_t i = 0; i < SFB_ARRAY_LEN(bad); i++) {
        a.factor_dtype = bad[i];
        ASSERT_EQ(sfb_job_attach(job, &a), -SFB_EUSAGE);
        ASSERT_STR_CONTAINS(sfb_last_error(), "sfb_job_attach: factor_dtype");
    }
    ASSERT_STR_CONTAINS(sfb_last_error(), "entry 0 is \"bf16 \", expected f32 or bf16");
    a.factor_dtype = "bf16,f32,f32";
    ASSERT_FAILS(sfb_job_attach(job, &a), -SFB_EUSAGE, "names more precisions than the 2");
    a.factor_dtype = "bf16";
    ASSERT_OK(sfb_job_attach(job, &a));
    /* b = (1/3, 1 + 2^-8), c = (0.1, 1, 3 + 2^-7) (both ties: to even):
     * bf16 rounds them to (0x3eab, 1) and (0x3dcd, 1, 3) */
    float b[2] = {1.0f / 3.0f, 1.00390625f}, c[3] = {0.1f, 1.0f, 3.0078125f};
    struct sfb_sf sf[2] = {{.rows = 2, .cols = 3, .s = 1, .scale = 2.0f, .b = b, .c = c},
                           {.rows = 2, .cols = 3, .s = 1, .scale = 2.0f, .b = b, .c = c}};
    float delta[6] = {0};
    ASSERT_OK(sfb_job_wait(job, 0, NULL));
    ASSERT_OK(sfb_job_publish_one(job, 0, 0, &sf[0]));
    for (int i = 0; i < 6; i++) delta[i] = b[i / 3] * c[i % 3];
    ASSERT_OK(sfb_job_publish_dense(job, 0, 1, 2.0f, delta));
    float rb[2] = {sfb__bf16_to_f32(0x3eab), 1.0f}, rc[3] = {sfb__bf16_to_f32(0x3dcd), 1, 3};
    for (int i = 0; i < 6; i++) {
        ASSERT(data[0][i] == 2.0f * (rb[i / 3] * rc[i % 3])); /* rounded */
        ASSERT(data[1][i] == 2.0f * delta[i]);                /* FMS: float32 */
    }
    ASSERT_OK(sfb_job_finish(job, 0));
    sfb_job_close(&job);
    return 0;
}

static int test_publish_sfb(void)
{
    return run_engine("sfb");
}

static int test_publish_fms(void)
{
    return run_engine("fms");
}

/* Many matrices in one process, mixed engines: publish_one in any order
 * and publish_dense, each applied exactly; the per-matrix protocol's
 * errors name matrix and clock. */
#define MANY 300
static int test_publish_one(void)
{
    struct sfb_job *job = NULL;
    ASSERT_OK(open_single(&job));
    static float data[MANY][6];
    static struct sfb_matrix mats[MANY];
    memset(data, 0, sizeof data);
    static char engine[MANY * 5];
    size_t len = 0;
    for (int m = 0; m < MANY; m++) {
        mats[m] = (struct sfb_matrix){2, 3, data[m]};
        len += (size_t)sprintf(engine + len, "%s%s", m ? "," : "", m % 3 == 1 ? "fms" : "sfb");
    }
    struct sfb_job_attach a;
    sfb_job_default_attach(&a);
    a.n = MANY;
    a.mats = mats;
    a.max_s = 2;
    a.engine = engine;
    ASSERT_OK(sfb_job_attach(job, &a));
    ASSERT(strcmp(sfb_job_engine(job, 1), "fms") == 0 && strcmp(sfb_job_engine(job, 2), "sfb") == 0);
    ASSERT(sfb_job_engine(job, MANY) == NULL);
    ASSERT(strcmp(sfb_job_plan(job), "") == 0);
    float b[4] = {1, 2, 3, 4}, c[6] = {1, 0, 2, 0, 1, 1};
    float delta[6] = {1, 2, 3, 4, 5, 6};
    struct sfb_sf sf = {.rows = 2, .cols = 3, .s = 2, .scale = 0.5f, .b = b, .c = c};
    for (int64_t t = 0; t < 2; t++) {
        ASSERT_OK(sfb_job_wait(job, t, NULL));
        for (int m = MANY - 1; m >= 0; m--) { /* reverse order; dense for fms matrices */
            if (m == MANY / 2) {
                ASSERT_FAILS(sfb_job_wait(job, t + 1, NULL), -SFB_EUSAGE,
                             "matrix 0 of clock ");
                ASSERT_FAILS(sfb_job_publish(job, t, &sf, 1), -SFB_EUSAGE,
                             "published one at a time already");
                ASSERT_FAILS(sfb_job_publish_one(job, t, MANY - 1, &sf), -SFB_EUSAGE,
                             "matrix 299 is published twice in clock");
                ASSERT_FAILS(sfb_job_publish_dense(job, t, MANY - 1, 1, delta), -SFB_EUSAGE,
                             "matrix 299 is published twice in clock");
                ASSERT_FAILS(sfb_job_publish_one(job, t, MANY, &sf), -SFB_EUSAGE,
                             "matrix 300 of clock");
                ASSERT_FAILS(sfb_job_publish_dense(job, t, 2, 1, delta), -SFB_EUSAGE,
                             "matrix 2 is synchronized by sfb, which carries factors only");
                delta[4] = NAN;
                ASSERT_FAILS(sfb_job_publish_dense(job, t, 1, 1, delta), -ERANGE,
                             "matrix 1: delta[1][1] is nan");
                delta[4] = 5;
                ASSERT_FAILS(sfb_job_publish_dense(job, t, 1, INFINITY, delta), -ERANGE,
                             "scale is inf");
                ASSERT_FAILS(sfb_job_publish_dense(job, t, 1, 1e38f, delta), -ERANGE,
                             "matrix 1: scale × delta[1][0] = 1e+38 × 4 overflows float32");
                /* fms's factors (10 numbers, the product 6: the engine's
                 * check): a NaN named as the factors' own check names it */
                b[1] = NAN;
                ASSERT_FAILS(sfb_job_publish_one(job, t, 1, &sf), -ERANGE,
                             "matrix 1: b[0][1] is nan (a factor "
                             "must hold finite numbers only: nothing was published)");
                b[1] = 2;
            }
            if (m % 3 == 1)
                ASSERT_OK(sfb_job_publish_dense(job, t, (uint32_t)m, 2.0f, delta));
            else
                ASSERT_OK(sfb_job_publish_one(job, t, (uint32_t)m, &sf));
            ASSERT(sf.clock == 0 && sf.matrix == 0); /* read only */
        }
        ASSERT_FAILS(sfb_job_publish_one(job, t, 0, &sf), -SFB_EUSAGE, "out of order");
    }
    /* sfb: two clocks of 0.5·BᵀC = [[1, 3, 5], [2, 4, 8]]; fms: 2 · 2 · delta */
    const float want_sf[6] = {1, 3, 5, 2, 4, 8};
    for (int m = 0; m < MANY; m++)
        for (int i = 0; i < 6; i++)
            ASSERT_EQ(data[m][i], m % 3 == 1 ? 4 * delta[i] : want_sf[i]);
    /* a broadcast of a job of one is a no-op; the root must be rank 0 */
    uint8_t bytes[3] = {1, 2, 3};
    ASSERT_OK(sfb_job_broadcast(job, 0, bytes, sizeof bytes));
    ASSERT_FAILS(sfb_job_broadcast(job, 1, bytes, sizeof bytes), -SFB_EUSAGE, "root 1");
    ASSERT_FAILS(sfb_job_broadcast(job, 0, NULL, 3), -EINVAL, "argument");
    ASSERT_OK(sfb_job_finish(job, 1));
    sfb_job_close(&job);
    return 0;
}

/* "auto" entries beside forced ones: the plan has a line per matrix. */
static int test_auto_mix(void)
{
    struct sfb_job *job = NULL;
    ASSERT_OK(open_single(&job));
    float d0[6] = {0}, d1[6] = {0}, d2[6] = {0};
    struct sfb_matrix mats[3] = {{2, 3, d0}, {2, 3, d1}, {2, 3, d2}};
    uint32_t sf_bytes[3] = {0, 100, 0};
    struct sfb_job_attach a;
    sfb_job_default_attach(&a);
    a.n = 3;
    a.mats = mats;
    a.max_s = 2;
    a.engine = "auto,fms,auto";
    a.sf_bytes = sf_bytes;
    a.link_gbps = 10;
    ASSERT_OK(sfb_job_attach(job, &a));
    const char *plan = sfb_job_plan(job);
    ASSERT_STR_CONTAINS(plan, "matrix 0 2x3: sfb ");
    ASSERT_STR_CONTAINS(plan, "matrix 1 2x3: fms (forced)\n");
    ASSERT_STR_CONTAINS(plan, "matrix 2 2x3: sfb ");
    ASSERT_EQ(strcmp(sfb_job_engine(job, 1), "fms"), 0);
    sfb_job_close(&job);
    return 0;
}

/* A replan between a clock's publish and the next wait switches the
 * engines on the same replica (the update of every clock applied once);
 * misplaced, "auto" and unknown replans are refused naming why, with
 * nothing changed; the plan's text stays. */
static int test_replan(void)
{
    struct sfb_job *job = NULL;
    ASSERT_OK(open_single(&job));
    float d0[6] = {0}, d1[6] = {0};
    struct sfb_matrix mats[2] = {{2, 3, d0}, {2, 3, d1}};
    struct sfb_job_attach a;
    sfb_job_default_attach(&a);
    a.n = 2;
    a.mats = mats;
    a.max_s = 2;
    a.engine = "auto,fms";
    a.link_gbps = 10;
    ASSERT_FAILS(sfb_job_replan(job, -1, "sfb"), -SFB_EUSAGE, "no matrices attached");
    ASSERT_OK(sfb_job_attach(job, &a));
    char plan[512];
    snprintf(plan, sizeof plan, "%s", sfb_job_plan(job));
    float b[4] = {1, 2, 3, 4}, c[6] = {1, 0, 2, 0, 1, 1};
    struct sfb_sf sf[2] = {{.rows = 2, .cols = 3, .s = 2, .scale = 0.5f, .b = b, .c = c},
                           {.rows = 2, .cols = 3, .s = 2, .scale = 0.5f, .b = b, .c = c}};
    const char *want[] = {"sfb,fms", "fms,sfb", "fms", "sfb"};
    for (int64_t t = 0; t < 4; t++) {
        ASSERT_OK(sfb_job_wait(job, t, NULL));
        ASSERT_FAILS(sfb_job_replan(job, t - 1, "sfb"), -SFB_EUSAGE, "the next is waited for");
        ASSERT_OK(sfb_job_publish(job, t, sf, 2));
        ASSERT_FAILS(sfb_job_replan(job, t - 1, "sfb"), -SFB_EUSAGE, "between the last clock");
        ASSERT_FAILS(sfb_job_replan(job, t, "auto,sfb"), -SFB_EUSAGE, "matrix 0 is \"auto\"");
        ASSERT_FAILS(sfb_job_replan(job, t, "sfb,psx"), -SFB_EUSAGE, "psx");
        ASSERT_FAILS(sfb_job_replan(job, t, "sfb,fms,sfb"), -SFB_EUSAGE, "more engines than the 2");
        ASSERT_EQ(strcmp(sfb_job_engine(job, 0), want[t][0] == 's' ? "sfb" : "fms"), 0);
        ASSERT_OK(sfb_job_replan(job, t, want[(t + 1) % 4]));
        ASSERT_EQ(strcmp(sfb_job_plan(job), plan), 0);
    }
    ASSERT_EQ(strcmp(sfb_job_engine(job, 0), "sfb"), 0);
    ASSERT_EQ(strcmp(sfb_job_engine(job, 1), "fms"), 0);
    /* BᵀC = [[1, 3, 5], [2, 4, 8]]: 0.5 of it per clock, four clocks */
    const float sum[6] = {2, 6, 10, 4, 8, 16};
    for (int i = 0; i < 6; i++) {
        ASSERT_EQ(d0[i], sum[i]);
        ASSERT_EQ(d1[i], sum[i]);
    }
    ASSERT_OK(sfb_job_finish(job, 3));
    ASSERT_FAILS(sfb_job_replan(job, 3, "sfb"), -SFB_EUSAGE, "has finished");
    sfb_job_close(&job);
    return 0;
}

/* sfb_job_set_max_s between a clock's publish and the next wait raises the
 * bound: an SF of more samples than the attach's is refused before and
 * applied after; a lower bound and a misplaced call are refused with
 * nothing changed. */
static int test_set_max_s(void)
{
    struct sfb_job *job = NULL;
    ASSERT_OK(open_single(&job));
    float d[6] = {0};
    struct sfb_matrix mat = {2, 3, d};
    struct sfb_job_attach a;
    sfb_job_default_attach(&a);
    a.n = 1;
    a.mats = &mat;
    a.max_s = 1;
    ASSERT_FAILS(sfb_job_set_max_s(job, -1, 2), -SFB_EUSAGE, "no matrices attached");
    ASSERT_OK(sfb_job_attach(job, &a));
    /* two samples: BᵀC = [[1, 3, 5], [2, 4, 8]] */
    float b[4] = {1, 2, 3, 4}, c[6] = {1, 0, 2, 0, 1, 1};
    struct sfb_sf one = {.rows = 2, .cols = 3, .s = 1, .scale = 1.0f, .b = b, .c = c};
    struct sfb_sf two = {.rows = 2, .cols = 3, .s = 2, .scale = 1.0f, .b = b, .c = c};
    ASSERT_OK(sfb_job_wait(job, 0, NULL));
    ASSERT_FAILS(sfb_job_set_max_s(job, 0, 2), -SFB_EUSAGE, "between the last clock");
    ASSERT_FAILS(sfb_job_publish(job, 0, &two, 1), -SFB_ESHAPE, "more than max_s 1");
    ASSERT_OK(sfb_job_publish(job, 0, &one, 1));
    ASSERT_FAILS(sfb_job_set_max_s(job, 0, 0), -SFB_EUSAGE, "below the job's 1");
    ASSERT_FAILS(sfb_job_set_max_s(job, -1, 2), -SFB_EUSAGE, "between the last clock");
    ASSERT_OK(sfb_job_set_max_s(job, 0, 2));
    ASSERT_OK(sfb_job_set_max_s(job, 0, 2)); /* (the same bound again: nothing changes) */
    ASSERT_OK(sfb_job_wait(job, 1, NULL));
    ASSERT_FAILS(sfb_job_set_max_s(job, 0, 3), -SFB_EUSAGE, "the next is waited for");
    ASSERT_OK(sfb_job_publish(job, 1, &two, 1));
    ASSERT_OK(sfb_job_drain(job, 1, NULL));
    /* clock 0: b₁c₁ᵀ = [[1, 0, 2], [2, 0, 4]]; clock 1: BᵀC */
    const float want[6] = {2, 3, 7, 4, 4, 12};
    for (int i = 0; i < 6; i++) ASSERT_EQ(d[i], want[i]);
    ASSERT_OK(sfb_job_finish(job, 1));
    ASSERT_FAILS(sfb_job_set_max_s(job, 1, 4), -SFB_EUSAGE, "has finished");
    sfb_job_close(&job);
    return 0;
}

/* The sized results (sfb_job_clock, sfb_job_stats): a size below the first
 * version's is refused before anything happens; a caller of an older
 * (smaller) layout gets the fields that fit and nothing past them; a newer
 * (larger) one gets zeros past the library's. */
static int test_sized_results(void)
{
    struct sfb_job *job = NULL;
    ASSERT_OK(open_single(&job));
    float data[6] = {0};
    struct sfb_matrix m = {2, 3, data};
    struct sfb_job_attach a;
    sfb_job_default_attach(&a);
    a.mats = &m;
    a.max_s = 1;
    ASSERT_OK(sfb_job_attach(job, &a));
    struct sfb_job_clock acct = {0};
    ASSERT_FAILS(sfb_job_wait(job, 0, &acct), -EINVAL,
                 "sfb_job_wait: acct->size is 0, less than any struct sfb_job_clock");
    ASSERT_FAILS(sfb_job_drain(job, -1, &acct), -EINVAL, "sfb_job_drain: acct->size is 0");
    /* nothing happened: clock 0 is still the one to wait for */
    acct.size = sizeof acct;
    ASSERT_OK(sfb_job_wait(job, 0, &acct));
    float b[2] = {1, 1}, c[3] = {1, 1, 1};
    struct sfb_sf sf = {.rows = 2, .cols = 3, .s = 1, .scale = 1, .b = b, .c = c};
    ASSERT_OK(sfb_job_publish(job, 0, &sf, 1));
    /* an older caller's clock ended before budget_wait_s: it stays as set */
    union {
        struct sfb_job_clock c;
        unsigned char bytes[sizeof(struct sfb_job_clock) + 16];
    } u;
    memset(&u, 0x5a, sizeof u);
    u.c.size = (uint32_t)offsetof(struct sfb_job_clock, budget_wait_s);
    ASSERT_FAILS(sfb_job_wait(job, 1, &u.c), -EINVAL, "at least");
    struct sfb_job_stats st;
    memset(&st, 0, sizeof st);
    ASSERT_FAILS(sfb_job_stats(job, &st), -EINVAL,
                 "sfb_job_stats: st->size is 0, less than any struct sfb_job_stats");
    /* a newer caller's larger structure: zeros past the library's fields */
    union {
        struct sfb_job_stats s;
        unsigned char bytes[sizeof(struct sfb_job_stats) + 16];
    } big;
    memset(&big, 0xff, sizeof big);
    big.s.size = sizeof big;
    ASSERT_OK(sfb_job_stats(job, &big.s));
    ASSERT_EQ(big.s.size, sizeof big);
    for (size_t i = sizeof(struct sfb_job_stats); i < sizeof big; i++) ASSERT_EQ(big.bytes[i], 0);
    ASSERT_EQ(big.s.bytes_sent, 0);
    /* exactly the first version's fields: the library writes no further */
    memset(&big, 0xff, sizeof big);
    big.s.size = (uint32_t)(offsetof(struct sfb_job_stats, publish_wait_s) + sizeof(double));
    ASSERT_OK(sfb_job_stats(job, &big.s));
    ASSERT_EQ(big.s.publish_wait_s, 0);
    for (size_t i = big.s.size; i < sizeof big; i++) ASSERT_EQ(big.bytes[i], 0xff);
    ASSERT_OK(sfb_job_finish(job, 0));
    sfb_job_close(&job);
    return 0;
}

/* The elastic calls' argument checks; an elastic job of one worker: matrices
 * attached with reattach take any engine, others only "sfb". */
static int test_elastic_calls(void)
{
    struct sfb_job *job = NULL;
    float m[6] = {0};
    struct sfb_matrix mat = {.rows = 2, .cols = 3, .data = m};
    struct sfb_job_attach a;
    uint32_t n = 7;
    int64_t next;
    uint32_t src;
    ASSERT_OK(open_single(&job));
    ASSERT_FAILS(sfb_job_join_poll(job, "", &n), -SFB_EUSAGE,
                 "sfb_job_join_poll: not an elastic job");
    ASSERT_EQ(n, 0);
    ASSERT_FAILS(sfb_job_grow(job, 0, "", 0, &n), -SFB_EUSAGE, "sfb_job_grow: not an elastic job");
    ASSERT_FAILS(sfb_job_shrink(job, &next, &src), -SFB_EUSAGE,
                 "sfb_job_shrink: not an elastic job");
    sfb_job_default_attach(&a);
    a.n = 1, a.mats = &mat, a.max_s = 1, a.reattach = 2;
    ASSERT_FAILS(sfb_job_attach(job, &a), -SFB_EUSAGE, "reattach 2: expected 0 or 1");
    sfb_job_close(&job);

    struct sfb_job_settings s;
    sfb_job_default_settings(&s);
    s.world = 1;
    s.elastic = 1;
    ASSERT_OK(sfb_job_open(&job, &s));
    n = 7;
    ASSERT_OK(sfb_job_join_poll(job, "", &n)); /* no listener here: nobody waits */
    ASSERT_EQ(n, 0);
    ASSERT_FAILS(sfb_job_shrink(job, &next, &src), -SFB_EUSAGE, "no rank is lost");
    a.reattach = 0;
    a.engine = "fms";
    ASSERT_FAILS(sfb_job_attach(job, &a), -SFB_EUSAGE, "FMS keeps each matrix's rows");
    a.reattach = 1;
    ASSERT_OK(sfb_job_attach(job, &a));
    ASSERT(strcmp(sfb_job_engine(job, 0), "fms") == 0);
    ASSERT_OK(sfb_job_grow(job, 0, "", 0, &n)); /* no joiner, and yet: detached */
    ASSERT_EQ(n, 0);
    ASSERT(sfb_job_engine(job, 0) == NULL);
    a.engine = "sfb";
    ASSERT_OK(sfb_job_attach(job, &a)); /* attached again */
    ASSERT(strcmp(sfb_job_engine(job, 0), "sfb") == 0);
    ASSERT_OK(sfb_job_finish(job, -1));
    sfb_job_close(&job);
    return 0;
}

static const struct test_case tests[] = {
    {"elastic_calls", test_elastic_calls},
    {"defaults", test_defaults},
    {"null_arguments", test_null_arguments},
    {"name_calls", test_name_calls},
    {"bad_settings", test_bad_settings},
    {"order_and_shapes", test_order_and_shapes},
    {"publish_sfb", test_publish_sfb},
    {"factor_dtype", test_factor_dtype},
    {"publish_fms", test_publish_fms},
    {"publish_nonfinite", test_publish_nonfinite},
    {"publish_one", test_publish_one},
    {"auto_mix", test_auto_mix},
    {"replan", test_replan},
    {"set_max_s", test_set_max_s},
    {"sized_results", test_sized_results},
};

TEST_MAIN(tests)
