/* A job of many matrices through the public job API, run by `sfb launch -n
 * P -- job_many ...` (test/integration/meson.build):
 *
 *  * every rank starts its replicas from rank P−1's bytes (sfb_job_broadcast
 *    before attach), after a broadcast whose length differs on rank 1 has
 *    failed on every rank naming it;
 *  * every clock each rank publishes every matrix once: most clocks one at a
 *    time (sfb_job_publish_one, in an order of its own; sfb_job_publish_dense
 *    for every other FMS matrix), every third clock all at once;
 *  * with --drain-every K (staleness 0, apply_early 0): after publishing clock
 *    t (t % K == K − 1) rank 0 lets the peers run ahead, then drains t, and
 *    every rank checks that its replicas hold exactly the updates through t
 *    (none of clock t + 1, which the peers have sent by then);
 *  * after finish every replica equals its start plus the exact sum of all
 *    published updates (small integers: exact in float), and a checksum of
 *    the replicas is equal across ranks.
 *
 *   job_many --matrices N --engine SPEC --clocks T [--topology T]
 *            [--staleness S] [--drain-every K]
 *
 * SPEC is repeated over the matrices ("sfb,fms,auto": matrix m gets entry m
 * mod 3). Prints "rank R: N passed, N failed"; exit 0 on success. */
#include <sfb/job.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fails, passes;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            passes++;                                                                              \
        } else {                                                                                   \
            fails++;                                                                               \
            fprintf(stderr, "rank %u: FAIL %s:%d: ", rank, __FILE__, __LINE__);                    \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static uint32_t rank, world;

struct opts {
    uint32_t n, clocks, drain_every;
    int64_t staleness;
    const char *engine, *topology;
};

/* Matrix m's shape: small, varied, some with fewer rows than ranks (FMS
 * owners with empty blocks). */
static uint32_t rows_of(uint32_t m)
{
    return 1 + m % 5;
}
static uint32_t cols_of(uint32_t m)
{
    return 1 + (m * 7) % 6;
}

/* Rank r's update of matrix m at clock t: scale · bᵀc with s samples,
 * b[i][k] = 1 + (k + m + i) % 3, c[i][j] = 1 + (j + r + i) % 2, scale = 1
 * + t % 4: small integers, so every sum is exact. */
static uint32_t samples_of(uint32_t m, int64_t t)
{
    return 1 + (uint32_t)((m + t) % 2);
}
static float scale_of(int64_t t)
{
    return (float)(1 + t % 4);
}
static float b_at(uint32_t m, uint32_t i, uint32_t k)
{
    return (float)(1 + (k + m + i) % 3);
}
static float c_at(uint32_t r, uint32_t i, uint32_t j)
{
    return (float)(1 + (j + r + i) % 2);
}

static double delta_at(uint32_t r, uint32_t m, int64_t t, uint32_t k, uint32_t j)
{
    double v = 0;
    for (uint32_t i = 0; i < samples_of(m, t); i++)
        v += b_at(m, i, k) * c_at(r, i, j);
    return scale_of(t) * v;
}

static float start_at(uint32_t m, uint32_t k, uint32_t j)
{
    return (float)((m * 31 + k * 7 + j) % 11) - 5;
}

/* Every replica entry after clocks 0 .. last of every rank. */
static int check_replicas(struct sfb_matrix *mats, uint32_t n, int64_t last, const char *when)
{
    uint32_t bad = 0;
    for (uint32_t m = 0; m < n; m++)
        for (uint32_t k = 0; k < mats[m].rows; k++)
            for (uint32_t j = 0; j < mats[m].cols; j++) {
                double want = start_at(m, k, j);
                for (int64_t t = 0; t <= last; t++)
                    for (uint32_t r = 0; r < world; r++)
                        want += delta_at(r, m, t, k, j);
                float got = mats[m].data[(size_t)k * mats[m].cols + j];
                if (fabs(got - want) > 1e-6 * fabs(want)) {
                    if (!bad)
                        fprintf(stderr, "rank %u: %s: matrix %u [%u][%u] = %g, want %g\n", rank,
                                when, m, k, j, got, want);
                    bad++;
                }
            }
    CHECK(bad == 0, "%s: %u entries differ from the sum of the updates through clock %lld", when,
          bad, (long long)last);
    return 0;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The SF of matrix m at clock t (b, c sized for the largest shape). */
static void fill_sf(struct sfb_sf *sf, uint32_t m, int64_t t, float *b, float *c)
{
    uint32_t rows = rows_of(m), cols = cols_of(m), s = samples_of(m, t);
    for (uint32_t i = 0; i < s; i++) {
        for (uint32_t k = 0; k < rows; k++)
            b[i * rows + k] = b_at(m, i, k);
        for (uint32_t j = 0; j < cols; j++)
            c[i * cols + j] = c_at(rank, i, j);
    }
    *sf = (struct sfb_sf){.rows = rows, .cols = cols, .s = s, .scale = scale_of(t), .b = b, .c = c};
}

static int publish_clock(struct sfb_job *job, const struct opts *o, int64_t t, uint32_t *order,
                         struct sfb_sf *sfs, float (*bufs)[2][16])
{
    if (t % 3 == 2) { /* all at once */
        for (uint32_t m = 0; m < o->n; m++)
            fill_sf(&sfs[m], m, t, bufs[m][0], bufs[m][1]);
        return sfb_job_publish(job, t, sfs, o->n);
    }
    /* one at a time, in an order of this rank's and clock's */
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ ((uint64_t)rank << 32) ^ (uint64_t)t;
    for (uint32_t m = 0; m < o->n; m++)
        order[m] = m;
    for (uint32_t m = o->n - 1; m > 0; m--) {
        uint32_t j = (uint32_t)(rng_next(&seed) % (m + 1)), x = order[m];
        order[m] = order[j];
        order[j] = x;
    }
    for (uint32_t i = 0; i < o->n; i++) {
        uint32_t m = order[i];
        int ret;
        if (!strcmp(sfb_job_engine(job, m), "fms") && (m + (uint32_t)t) % 2 == 0) {
            float delta[30];
            for (uint32_t k = 0; k < rows_of(m); k++)
                for (uint32_t j = 0; j < cols_of(m); j++)
                    delta[k * cols_of(m) + j] = (float)(delta_at(rank, m, t, k, j) / scale_of(t));
            ret = sfb_job_publish_dense(job, t, m, scale_of(t), delta);
        } else {
            struct sfb_sf sf;
            fill_sf(&sf, m, t, bufs[m][0], bufs[m][1]);
            ret = sfb_job_publish_one(job, t, m, &sf);
        }
        if (ret) return ret;
    }
    return 0;
}

/* A broadcast with a length that differs on rank 1 fails every rank naming
 * it; then the start values come from rank P − 1 (every other rank holds
 * garbage until then). */
static int start_alike(struct sfb_job *job, float *all, size_t len)
{
    uint8_t small[17] = {0};
    int ret = sfb_job_broadcast(job, 0, small, 16 + (rank == 1));
    if (world > 1) {
        CHECK(ret == -SFB_EUSAGE, "a broadcast of differing lengths returned %d", ret);
        CHECK(strstr(sfb_error_message(ret), "rank 1 passed 17 bytes") != NULL, "its message: %s",
              sfb_error_message(ret));
    }
    for (size_t i = 0; i < len; i++)
        all[i] = rank == world - 1 ? NAN : (float)rank;
    if (rank == world - 1) {
        size_t at = 0;
        for (uint32_t m = 0; at < len; m++)
            for (uint32_t k = 0; k < rows_of(m); k++)
                for (uint32_t j = 0; j < cols_of(m); j++)
                    all[at++] = start_at(m, k, j);
    }
    return sfb_job_broadcast(job, world - 1, all, len * sizeof *all);
}

static int run(struct sfb_job *job, const struct opts *o)
{
    struct sfb_matrix *mats = calloc(o->n, sizeof *mats);
    struct sfb_sf *sfs = calloc(o->n, sizeof *sfs);
    uint32_t *order = calloc(o->n, sizeof *order);
    float(*bufs)[2][16] = calloc(o->n, sizeof *bufs);
    size_t total = 0;
    for (uint32_t m = 0; m < o->n; m++)
        total += (size_t)rows_of(m) * cols_of(m);
    float *all = calloc(total, sizeof *all);
    int ret = mats && sfs && order && bufs && all ? 0 : -ENOMEM;
    if (!ret) ret = start_alike(job, all, total);
    for (uint32_t m = 0, at = 0; !ret && m < o->n; at += rows_of(m) * cols_of(m), m++)
        mats[m] = (struct sfb_matrix){rows_of(m), cols_of(m), all + at};
    if (!ret) check_replicas(mats, o->n, -1, "after the broadcast");
    char *engine = malloc((size_t)o->n * (strlen(o->engine) + 1) + 1);
    if (!ret && !engine) ret = -ENOMEM;
    for (uint32_t m = 0, len = 0, e = 0; !ret && m < o->n; m++) {
        /* entry m mod (entries in o->engine) */
        const char *p = o->engine;
        uint32_t entries = 1;
        for (const char *q = p; *q; q++)
            entries += *q == ',';
        for (e = m % entries; e; e--)
            p = strchr(p, ',') + 1;
        len += (uint32_t)sprintf(engine + len, "%s%.*s", m ? "," : "", (int)strcspn(p, ","), p);
    }
    struct sfb_job_attach a;
    sfb_job_default_attach(&a);
    a.n = o->n;
    a.mats = mats;
    a.max_s = 2;
    a.engine = engine;
    a.topology = o->topology;
    a.staleness = o->staleness;
    a.apply_early = o->drain_every ? 0 : -1;
    if (!ret) ret = sfb_job_attach(job, &a);
    if (!ret && rank == 0 && strstr(o->engine, "auto"))
        printf("plan (%zu bytes), first line: %.*s\n", strlen(sfb_job_plan(job)),
               (int)strcspn(sfb_job_plan(job), "\n"), sfb_job_plan(job));
    for (int64_t t = 0; !ret && t < o->clocks; t++) {
        if ((ret = sfb_job_wait(job, t, NULL))) break;
        if ((ret = publish_clock(job, o, t, order, sfs, bufs))) break;
        if (o->drain_every && t % o->drain_every == o->drain_every - 1) {
            /* rank 0 late: the peers publish t + 1 meanwhile */
            if (rank == 0) nanosleep(&(struct timespec){0, 30 * 1000 * 1000}, NULL);
            if ((ret = sfb_job_drain(job, t, NULL))) break;
            check_replicas(mats, o->n, t, "after drain");
        }
    }
    if (!ret) ret = sfb_job_finish(job, (int64_t)o->clocks - 1);
    if (!ret) check_replicas(mats, o->n, (int64_t)o->clocks - 1, "after finish");
    double sum = 0, *sums = calloc(world, sizeof *sums);
    for (size_t i = 0; i < total; i++)
        sum += all[i] * (double)(1 + i % 13);
    if (!ret && !sums) ret = -ENOMEM;
    if (!ret) ret = sfb_job_allgather(job, &sum, sizeof sum, sums);
    for (uint32_t r = 0; !ret && r < world; r++)
        CHECK(sums[r] == sum, "rank %u's checksum %.17g, this rank's %.17g", r, sums[r], sum);
    free(sums);
    free(engine);
    free(all);
    free(bufs);
    free(order);
    free(sfs);
    free(mats);
    return ret;
}

int main(int argc, char **argv)
{
    struct opts o = {.n = 300, .clocks = 12, .engine = "sfb"};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--matrices"))
            o.n = (uint32_t)atoi(v);
        else if (!strcmp(k, "--clocks"))
            o.clocks = (uint32_t)atoi(v);
        else if (!strcmp(k, "--engine"))
            o.engine = v;
        else if (!strcmp(k, "--topology"))
            o.topology = v;
        else if (!strcmp(k, "--staleness"))
            o.staleness = atoi(v);
        else if (!strcmp(k, "--drain-every"))
            o.drain_every = (uint32_t)atoi(v);
        else {
            fprintf(stderr, "job_many: unknown option %s\n", k);
            return 2;
        }
    }
    struct sfb_job_settings s;
    sfb_job_default_settings(&s);
    struct sfb_job *job = NULL;
    int ret = sfb_job_open(&job, &s);
    if (ret) {
        fprintf(stderr, "job_many: open: %s\n", sfb_error_message(ret));
        return 1;
    }
    rank = sfb_job_rank(job);
    world = sfb_job_world(job);
    ret = run(job, &o);
    if (ret) {
        fprintf(stderr, "rank %u: job_many: %s\n", rank, sfb_error_message(ret));
        sfb_job_abort(job, sfb_error_message(ret));
        fails++;
    }
    sfb_job_close(&job);
    printf("rank %u: %d passed, %d failed\n", rank, passes, fails);
    return fails ? 1 : 0;
}
