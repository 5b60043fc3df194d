/* Sampler: the semantics documented in sfb/data.h. */
#include "sfb/data.h"
#include "src/common.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

#define GOLDEN0 285
#define GOLDEN1 424
#define GOLDEN2 98

static int open_errors(void)
{
    struct sfb_sampler *s = (struct sfb_sampler *)1;
    ASSERT_EQ(sfb_sampler_open(&s, 100, 4, 4, 5, 1), -SFB_EUSAGE);
    ASSERT(s == NULL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "rank 4");
    ASSERT_EQ(sfb_sampler_open(&s, 100, 0, 0, 5, 1), -SFB_EUSAGE);
    ASSERT_EQ(sfb_sampler_open(&s, 100, 0, 4, 0, 1), -SFB_EUSAGE);
    ASSERT_EQ(sfb_sampler_open(&s, 19, 0, 4, 5, 1), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "19 samples");
    sfb_sampler_close(&s); /* NULL is fine */
    return 0;
}

static int clocks_per_epoch(void)
{
    struct sfb_sampler *s;
    ASSERT_OK(sfb_sampler_open(&s, 103, 1, 4, 5, 1));
    ASSERT_EQ(sfb_sampler_clocks_per_epoch(s), 5);
    sfb_sampler_close(&s);
    ASSERT(s == NULL);
    ASSERT_OK(sfb_sampler_open(&s, 20, 3, 4, 5, 1));
    ASSERT_EQ(sfb_sampler_clocks_per_epoch(s), 1);
    sfb_sampler_close(&s);
    return 0;
}

enum { N = 1003, WORLD = 4, BATCH = 7 };

/* The union over ranks at a clock, in rank order, equals one worker's batch
 * of WORLD·BATCH at the same clock — across several epochs. */
static int union_equals_single(void)
{
    struct sfb_sampler *rank[WORLD], *one;
    for (uint32_t r = 0; r < WORLD; r++) ASSERT_OK(sfb_sampler_open(&rank[r], N, r, WORLD, BATCH, 42));
    ASSERT_OK(sfb_sampler_open(&one, N, 0, 1, WORLD * BATCH, 42));
    uint64_t cpe = sfb_sampler_clocks_per_epoch(one);
    ASSERT_EQ(cpe, sfb_sampler_clocks_per_epoch(rank[0]));
    ASSERT_EQ(cpe, N / (WORLD * BATCH));
    uint64_t big[WORLD * BATCH], part[BATCH];
    for (uint64_t clock = 0; clock < 3 * cpe + 2; clock++) {
        ASSERT_OK(sfb_sampler_batch(one, clock, big));
        for (uint32_t r = 0; r < WORLD; r++) {
            ASSERT_OK(sfb_sampler_batch(rank[r], clock, part));
            for (int i = 0; i < BATCH; i++) {
                if (part[i] != big[r * BATCH + i])
                    TEST_FAIL_AT("clock %" PRIu64 " rank %u [%d]: %" PRIu64 " vs %" PRIu64, clock,
                                 r, i, part[i], big[r * BATCH + i]);
            }
        }
    }
    for (uint32_t r = 0; r < WORLD; r++) sfb_sampler_close(&rank[r]);
    sfb_sampler_close(&one);
    return 0;
}

/* Reads a whole epoch over all ranks into seq (cpe·WORLD·BATCH entries). */
static int read_epoch(uint64_t seed, uint64_t epoch, uint64_t *seq)
{
    for (uint32_t r = 0; r < WORLD; r++) {
        struct sfb_sampler *s;
        ASSERT_OK(sfb_sampler_open(&s, N, r, WORLD, BATCH, seed));
        uint64_t cpe = sfb_sampler_clocks_per_epoch(s);
        for (uint64_t t = 0; t < cpe; t++) {
            uint64_t part[BATCH];
            ASSERT_OK(sfb_sampler_batch(s, epoch * cpe + t, part));
            memcpy(seq + (t * WORLD + r) * BATCH, part, sizeof part);
        }
        sfb_sampler_close(&s);
    }
    return 0;
}

static int at_most_once_per_epoch(void)
{
    enum { PER = N / (WORLD * BATCH) * WORLD * BATCH };
    static uint64_t seq[PER];
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
        if (read_epoch(7, epoch, seq)) return 1;
        static unsigned char seen[N];
        memset(seen, 0, sizeof seen);
        for (size_t i = 0; i < PER; i++) {
            ASSERT_LT(seq[i], N);
            ASSERT_EQ(seen[seq[i]], 0);
            seen[seq[i]] = 1;
        }
    }
    return 0;
}

static int epochs_and_seeds(void)
{
    enum { PER = N / (WORLD * BATCH) * WORLD * BATCH };
    static uint64_t a[PER], b[PER], c[PER], d[PER];
    if (read_epoch(5, 0, a) || read_epoch(5, 1, b) || read_epoch(5, 0, c) || read_epoch(6, 0, d))
        return 1;
    ASSERT(memcmp(a, c, sizeof a) == 0);  /* same seed, same epoch */
    ASSERT(memcmp(a, b, sizeof a) != 0);  /* another epoch */
    ASSERT(memcmp(a, d, sizeof a) != 0);  /* another seed */
    /* A real shuffle: few fixed points, not the identity. */
    size_t same = 0;
    for (size_t i = 0; i < PER; i++) same += a[i] == i;
    ASSERT_LT(same, 10);
    /* Golden: the first samples of seed 5 are the same on every machine. */
    fprintf(stderr, "  first: %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", a[0], a[1], a[2]);
    ASSERT_EQ(a[0], GOLDEN0);
    ASSERT_EQ(a[1], GOLDEN1);
    ASSERT_EQ(a[2], GOLDEN2);
    return 0;
}

/* Random access across epochs gives the same answers as sequential. */
static int random_access(void)
{
    struct sfb_sampler *s;
    ASSERT_OK(sfb_sampler_open(&s, N, 2, WORLD, BATCH, 9));
    uint64_t cpe = sfb_sampler_clocks_per_epoch(s);
    uint64_t first[BATCH], again[BATCH], other[BATCH];
    ASSERT_OK(sfb_sampler_batch(s, 3 * cpe + 1, first));
    ASSERT_OK(sfb_sampler_batch(s, 1, other));
    ASSERT_OK(sfb_sampler_batch(s, 3 * cpe + 1, again));
    ASSERT(memcmp(first, again, sizeof first) == 0);
    ASSERT(memcmp(first, other, sizeof first) != 0);
    sfb_sampler_close(&s);
    return 0;
}

static const struct test_case tests[] = {
    {"open_errors", open_errors},
    {"clocks_per_epoch", clocks_per_epoch},
    {"union_equals_single", union_equals_single},
    {"at_most_once_per_epoch", at_most_once_per_epoch},
    {"epochs_and_seeds", epochs_and_seeds},
    {"random_access", random_access},
};

TEST_MAIN(tests)
