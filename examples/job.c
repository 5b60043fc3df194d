/* examples/job.c — the job API (sfb/job.h) in one complete program.
 *
 * Every rank keeps a replica of A (4 × 3). Each clock, rank r publishes
 * sufficient factors whose update adds r + 1 to every entry of A:
 * ΔA = scale · Bᵀ C with one sample, b = (1, 1, 1, 1), c = (1, 1, 1) and
 * scale = r + 1. After sfb_job_finish every replica holds
 * clocks · P(P+1)/2 everywhere, which the program checks.
 *
 *     cc examples/job.c -o job $(pkg-config --cflags --libs sfb)
 *     sfb launch -n 3 -- ./job          (or mpirun -n 3 ./job, or ./job) */
#include <sfb/job.h>

#include <stdio.h>

#define ROWS 4
#define COLS 3
#define CLOCKS 10

static int fail(struct sfb_job *job, int code, const char *what)
{
    fprintf(stderr, "job: %s: %s\n", what, sfb_error_message(code));
    sfb_job_abort(job, sfb_error_message(code)); /* peers stop at once, naming us */
    sfb_job_close(&job);
    return 1;
}

int main(void)
{
    struct sfb_job_settings s;
    sfb_job_default_settings(&s); /* rank and world from sfb launch, PMIx, or 0 of 1 */
    struct sfb_job *job = NULL;
    int ret = sfb_job_open(&job, &s);
    if (ret) return fail(NULL, ret, "open");
    uint32_t rank = sfb_job_rank(job), world = sfb_job_world(job);

    float a[ROWS * COLS] = {0}; /* the replica: ours, updated by the job */
    struct sfb_matrix m = {ROWS, COLS, a};
    struct sfb_job_attach at;
    sfb_job_default_attach(&at); /* engine "sfb", staleness 0 (BSP) */
    at.mats = &m;
    at.max_s = 1;
    if ((ret = sfb_job_attach(job, &at))) return fail(job, ret, "attach");

    float b[ROWS] = {1, 1, 1, 1}, c[COLS] = {1, 1, 1};
    struct sfb_sf sf = {.rows = ROWS, .cols = COLS, .s = 1, .b = b, .c = c};
    sf.scale = (float)(rank + 1);
    for (int64_t t = 0; t < CLOCKS; t++) {
        /* SSP gate: every peer's updates of clocks < t are in a[] now */
        if ((ret = sfb_job_wait(job, t, NULL))) return fail(job, ret, "wait");
        /* ... a real program computes this clock's factors from a[] here ... */
        if ((ret = sfb_job_publish(job, t, &sf, 1))) return fail(job, ret, "publish");
    }
    if ((ret = sfb_job_finish(job, CLOCKS - 1))) return fail(job, ret, "finish");
    sfb_job_close(&job);

    float want = (float)CLOCKS * world * (world + 1) / 2;
    for (int i = 0; i < ROWS * COLS; i++)
        if (a[i] != want) {
            fprintf(stderr, "rank %u: a[%d] = %g, want %g\n", rank, i, a[i], want);
            return 1;
        }
    printf("rank %u of %u: every entry is %g\n", rank, world, want);
    return 0;
}
