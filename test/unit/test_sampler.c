/* Sampler: the semantics documented in sfb/data.h. */
#include <sfb/data.h>
#include "src/base/util.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

#define GOLDEN0 285
#define GOLDEN1 424
#define GOLDEN2 98
#define SHARD_GOLDEN0 209
#define SHARD_GOLDEN1 261
#define SHARD_GOLDEN2 875

static int open_errors(void)
{
    struct sfb_sampler *s = (struct sfb_sampler *)1;
    ASSERT_EQ(sfb_sampler_open(&s, 100, 4, 4, 5, 1), -SFB_EUSAGE);
    ASSERT(s == NULL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "rank 4");
    ASSERT_EQ(sfb_sampler_open(&s, 100, 0, 0, 5, 1), -SFB_EUSAGE);
    ASSERT_EQ(sfb_sampler_open(&s, 100, 0, 4, 0, 1), -SFB_EUSAGE);
    ASSERT_EQ(sfb_sampler_open(&s, 19, 0, 4, 5, 1), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "19 samples over 4 workers leave 4 per worker");
    ASSERT(s == NULL);
    ASSERT_OK(sfb_sampler_open(&s, 20, 0, 4, 5, 1));
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

/* One worker reads a permutation of the whole set: its first samples for
 * seed 5 are the same on every machine (and the same as before sharding:
 * world 1 is unchanged). */
static int single_worker_whole_set(void)
{
    struct sfb_sampler *one;
    ASSERT_OK(sfb_sampler_open(&one, N, 0, 1, WORLD * BATCH, 5));
    uint64_t cpe = sfb_sampler_clocks_per_epoch(one);
    ASSERT_EQ(cpe, N / (WORLD * BATCH));
    static unsigned char seen[N];
    uint64_t big[WORLD * BATCH];
    for (uint64_t t = 0; t < cpe; t++) {
        ASSERT_OK(sfb_sampler_batch(one, t, big));
        if (t == 0) {
            fprintf(stderr, "  first: %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", big[0], big[1],
                    big[2]);
            ASSERT_EQ(big[0], GOLDEN0);
            ASSERT_EQ(big[1], GOLDEN1);
            ASSERT_EQ(big[2], GOLDEN2);
        }
        for (int i = 0; i < WORLD * BATCH; i++) {
            ASSERT_LT(big[i], N);
            ASSERT_EQ(seen[big[i]], 0);
            seen[big[i]] = 1;
        }
    }
    sfb_sampler_close(&one);
    return 0;
}

/* Reads a whole epoch over all ranks into seq (cpe·WORLD·BATCH entries), as
 * rows of the whole set (sfb_shard_global of each rank's shard positions). */
static int read_epoch(uint64_t seed, uint64_t epoch, uint64_t *seq)
{
    for (uint32_t r = 0; r < WORLD; r++) {
        struct sfb_sampler *s;
        struct sfb_shard sh = {r, WORLD, seed};
        uint64_t rows = sfb_shard_rows(&sh, N);
        ASSERT_OK(sfb_sampler_open(&s, N, r, WORLD, BATCH, seed));
        uint64_t cpe = sfb_sampler_clocks_per_epoch(s);
        ASSERT_EQ(cpe, N / WORLD / BATCH); /* every rank: the smallest shard's */
        for (uint64_t t = 0; t < cpe; t++) {
            uint64_t part[BATCH];
            ASSERT_OK(sfb_sampler_batch(s, epoch * cpe + t, part));
            for (int i = 0; i < BATCH; i++) {
                ASSERT_LT(part[i], rows); /* a position in the shard */
                uint64_t g = sfb_shard_global(&sh, part[i]);
                ASSERT_EQ(sfb_shard_owner(&sh, g), r);
                seq[(t * WORLD + r) * BATCH + i] = g;
            }
        }
        sfb_sampler_close(&s);
    }
    return 0;
}

/* Within an epoch no row is read twice, over all ranks. */
static int at_most_once_per_epoch(void)
{
    enum { PER = N / WORLD / BATCH * WORLD * BATCH };
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
    enum { PER = N / WORLD / BATCH * WORLD * BATCH };
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
    /* Ranks do not walk their shards in lockstep: at the first clock, the
     * ranks' first rows come from different blocks of WORLD rows. */
    size_t same_block = 0;
    for (uint32_t r = 1; r < WORLD; r++) same_block += a[r * BATCH] / WORLD == a[0] / WORLD;
    ASSERT_LT(same_block, WORLD - 1);
    /* Golden: the first rows of seed 5 are the same on every machine. */
    fprintf(stderr, "  first: %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", a[0], a[1], a[2]);
    ASSERT_EQ(a[0], SHARD_GOLDEN0);
    ASSERT_EQ(a[1], SHARD_GOLDEN1);
    ASSERT_EQ(a[2], SHARD_GOLDEN2);
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
    {"single_worker_whole_set", single_worker_whole_set},
    {"at_most_once_per_epoch", at_most_once_per_epoch},
    {"epochs_and_seeds", epochs_and_seeds},
    {"random_access", random_access},
};

TEST_MAIN(tests)
