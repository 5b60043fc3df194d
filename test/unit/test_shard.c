/* Sharding (sfb/data.h, docs/design.md "Data"): the shards of P ranks
 * partition the rows exactly, independently of the order rows are asked
 * about; each loader (libsvm, IDX, synth) keeps exactly its shard's rows,
 * equal to those rows of the whole set, with the whole set's d and k; and a
 * bad row is reported with its place by every rank, owner or not. */
#include <sfb/data.h>
#include "src/base/util.h"
#include "test.h"
#include "data_util.h"

#include <stdint.h>

static int partition_one(uint64_t n, uint32_t world, uint64_t seed)
{
    uint64_t *count = calloc(world, sizeof *count);
    uint32_t *owner = malloc((n ? n : 1) * sizeof *owner);
    ASSERT(count && owner);
    for (uint64_t i = 0; i < n; i++) {
        struct sfb_shard sh = {0, world, seed};
        owner[i] = sfb_shard_owner(&sh, i);
        ASSERT_LT(owner[i], world);
        count[owner[i]]++;
    }
    /* asked in another order (backwards, by another rank's struct): the same */
    for (uint64_t i = n; i-- > 0;) {
        struct sfb_shard sh = {(uint32_t)(i % world), world, seed};
        ASSERT_EQ(sfb_shard_owner(&sh, i), owner[i]);
    }
    uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
    for (uint32_t r = 0; r < world; r++) {
        struct sfb_shard sh = {r, world, seed};
        ASSERT_EQ(sfb_shard_rows(&sh, n), count[r]);
        /* the shard's j-th row: exactly its rows, in file order */
        uint64_t prev = 0;
        for (uint64_t j = 0; j < count[r]; j++) {
            uint64_t g = sfb_shard_global(&sh, j);
            ASSERT_LT(g, n);
            ASSERT_EQ(owner[g], r);
            if (j) ASSERT_GT(g, prev);
            prev = g;
        }
        lo = SFB_MIN(lo, count[r]);
        hi = SFB_MAX(hi, count[r]);
        sum += count[r];
    }
    ASSERT_EQ(sum, n);      /* every row in exactly one shard */
    ASSERT_LE(hi - lo, 1);  /* near-equal sizes */
    ASSERT_EQ(lo, n / world);
    /* stratified: one row of every full block of `world` rows per rank */
    for (uint64_t b = 0; b < n / world; b++) {
        memset(count, 0, world * sizeof *count);
        for (uint32_t q = 0; q < world; q++) count[owner[b * world + q]]++;
        for (uint32_t r = 0; r < world; r++) ASSERT_EQ(count[r], 1);
    }
    free(count);
    free(owner);
    return 0;
}

static int partition(void)
{
    static const uint64_t ns[] = {0, 1, 5, 64, 1003, 60000};
    static const uint32_t worlds[] = {1, 2, 3, 7, 64, 128};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof worlds / sizeof *worlds; b++)
            for (uint64_t seed = 1; seed <= 3; seed++)
                if (partition_one(ns[a], worlds[b], seed)) {
                    fprintf(stderr, "  n=%llu world=%u seed=%llu\n", (unsigned long long)ns[a],
                            worlds[b], (unsigned long long)seed);
                    return 1;
                }
    return 0;
}

/* The seed matters, world 1 is the whole set in order. */
static int seed_and_single(void)
{
    struct sfb_shard a = {0, 8, 1}, b = {0, 8, 2}, one = {0, 1, 5};
    int differ = 0;
    for (uint64_t i = 0; i < 800; i++) differ |= sfb_shard_owner(&a, i) != sfb_shard_owner(&b, i);
    ASSERT(differ);
    ASSERT_EQ(sfb_shard_rows(&one, 77), 77);
    for (uint64_t j = 0; j < 77; j++) {
        ASSERT_EQ(sfb_shard_owner(&one, j), 0);
        ASSERT_EQ(sfb_shard_global(&one, j), j);
    }
    return 0;
}

/* Row `j` of shard `part` equals row sfb_shard_global(j) of `whole`. */
static int same_rows(const struct sfb_dataset *whole, const struct sfb_dataset *part,
                     const struct sfb_shard *sh)
{
    ASSERT_EQ(part->d, whole->d);
    ASSERT_EQ(part->k, whole->k);
    ASSERT_EQ(part->sparse, whole->sparse);
    ASSERT_EQ(part->n, sfb_shard_rows(sh, whole->n));
    for (uint64_t j = 0; j < part->n; j++) {
        uint64_t g = sfb_shard_global(sh, j);
        ASSERT_EQ(part->labels[j], whole->labels[g]);
        if (!whole->sparse) {
            ASSERT(memcmp(part->x + j * part->d, whole->x + g * whole->d,
                          part->d * sizeof(float)) == 0);
            continue;
        }
        uint64_t m = whole->row_ptr[g + 1] - whole->row_ptr[g];
        ASSERT_EQ(part->row_ptr[j + 1] - part->row_ptr[j], m);
        ASSERT(memcmp(part->col + part->row_ptr[j], whole->col + whole->row_ptr[g],
                      m * sizeof(uint32_t)) == 0);
        ASSERT(memcmp(part->val + part->row_ptr[j], whole->val + whole->row_ptr[g],
                      m * sizeof(float)) == 0);
    }
    return 0;
}

/* Every rank of `world` keeps its rows of `name`, and the total is n. */
static int check_loader(const char *name, uint32_t world, uint64_t want_n)
{
    struct sfb_dataset whole, part;
    uint64_t rows = 0, sum = 0;
    ASSERT_OK(sfb_data_load(name, NULL, NULL, &whole, NULL));
    ASSERT_EQ(whole.n, want_n);
    for (uint32_t r = 0; r < world; r++) {
        struct sfb_shard sh = {r, world, 11};
        ASSERT_OK(sfb_data_load_shard(name, NULL, NULL, &sh, &part, NULL, &rows));
        ASSERT_EQ(rows, want_n);
        if (same_rows(&whole, &part, &sh)) {
            fprintf(stderr, "  %s: rank %u of %u\n", name, r, world);
            return 1;
        }
        sum += part.n;
        sfb_dataset_free(&part);
    }
    ASSERT_EQ(sum, want_n);
    sfb_dataset_free(&whole);
    return 0;
}

/* libsvm: labels 0..4 (k = 5 only if the rows of label 4 are seen), the
 * largest index in one row only (d inferred from the whole file). */
static int libsvm_rows(void)
{
    char text[8192], *p = text;
    p += sprintf(p, "# comment\n\n");
    for (int i = 0; i < 50; i++) {
        p += sprintf(p, "%d 1:%d.5 %d:%d\n", i == 17 ? 4 : i % 4, i, 2 + i % 3, -i);
        if (i == 30) p += sprintf(p, "1 3:1 40:2\n"); /* row 31: d = 40 */
    }
    const char *path = tu_write_str("shard.svm", text);
    ASSERT(path);
    for (uint32_t world = 1; world <= 8; world += 3)
        if (check_loader(path, world, 51)) return 1;
    struct sfb_dataset part;
    struct sfb_shard sh = {0, 51, 11}; /* one row each: d and k still the file's */
    ASSERT_OK(sfb_data_load_shard(path, NULL, NULL, &sh, &part, NULL, NULL));
    ASSERT_EQ(part.n, 1);
    ASSERT_EQ(part.d, 40);
    ASSERT_EQ(part.k, 5);
    sfb_dataset_free(&part);
    /* more workers than rows: an empty shard is an error naming the data */
    struct sfb_shard many = {0, 64, 11};
    while (sfb_shard_rows(&many, 51) > 0) many.rank++;
    ASSERT_LT(many.rank, 64);
    ASSERT_EQ(sfb_data_load_shard(path, NULL, NULL, &many, &part, NULL, NULL), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "51 samples cannot be shared by 64 workers");
    return 0;
}

static int synth_rows(void)
{
    if (check_loader("synth:k=4,d=9,n=301,seed=3", 5, 301)) return 1;
    return check_loader("synth:k=3,d=50,n=200,density=0.1,seed=4", 3, 200);
}

static void be32(unsigned char *b, uint32_t v)
{
    b[0] = (unsigned char)(v >> 24);
    b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
}

/* An IDX directory of n 3×3 images (gzip), labels i mod 7 (or `bad` at
 * row bad_row when bad_row < n). Returns the directory. */
static const char *write_idx_dir(uint32_t n, uint32_t bad_row, unsigned char bad)
{
    static unsigned char im[16 + 9 * 200], lb[8 + 200];
    im[0] = im[1] = 0, im[2] = 8, im[3] = 3;
    be32(im + 4, n), be32(im + 8, 3), be32(im + 12, 3);
    lb[0] = lb[1] = 0, lb[2] = 8, lb[3] = 1;
    be32(lb + 4, n);
    for (uint32_t i = 0; i < n; i++) {
        for (int q = 0; q < 9; q++) im[16 + 9 * i + q] = (unsigned char)(i * 9 + q);
        lb[8 + i] = i == bad_row ? bad : (unsigned char)(i % 7);
    }
    if (!tu_write("train-images-idx3-ubyte.gz", im, 16 + 9 * n, 1) ||
        !tu_write("train-labels-idx1-ubyte.gz", lb, 8 + n, 1))
        return NULL;
    return tu_dir;
}

static int idx_rows(void)
{
    const char *dir = write_idx_dir(150, UINT32_MAX, 0);
    ASSERT(dir);
    for (uint32_t world = 1; world <= 9; world += 4)
        if (check_loader(dir, world, 150)) return 1;
    return 0;
}

/* A bad row is reported by every rank with its place, whoever owns it. */
static int bad_row_everywhere(void)
{
    char text[4096], *p = text;
    for (int i = 0; i < 40; i++) p += sprintf(p, i == 23 ? "%d 1:x\n" : "%d 1:1\n", i % 2);
    const char *path = tu_write_str("bad.svm", text);
    ASSERT(path);
    char want[700];
    snprintf(want, sizeof want, "%s:24:", path);
    struct sfb_dataset part;
    for (uint32_t r = 0; r < 4; r++) {
        struct sfb_shard sh = {r, 4, 2};
        ASSERT_EQ(sfb_data_load_shard(path, NULL, NULL, &sh, &part, NULL, NULL), -SFB_EFORMAT);
        ASSERT_STR_CONTAINS(sfb_last_error(), want);
        ASSERT_STR_CONTAINS(sfb_last_error(), "bad value 'x'");
        ASSERT_EQ(part.n, 0);
    }
    /* IDX: label 200 at row 77 with k given as 10 (the labels file offset
     * is 8 + 77) */
    const char *dir = write_idx_dir(120, 77, 200);
    ASSERT(dir);
    struct sfb_libsvm_settings ls;
    sfb_libsvm_default_settings(&ls);
    ls.classes = 10;
    for (uint32_t r = 0; r < 3; r++) {
        struct sfb_shard sh = {r, 3, 2};
        ASSERT_EQ(sfb_data_load_shard(dir, NULL, &ls, &sh, &part, NULL, NULL), -SFB_EFORMAT);
        ASSERT_STR_CONTAINS(sfb_last_error(), "byte offset 85: label 200 out of range [0, 10)");
    }
    return 0;
}

static const struct test_case tests[] = {
    {"partition", partition},
    {"seed_and_single", seed_and_single},
    {"libsvm_rows", libsvm_rows},
    {"synth_rows", synth_rows},
    {"idx_rows", idx_rows},
    {"bad_row_everywhere", bad_row_everywhere},
};

TEST_MAIN(tests)
