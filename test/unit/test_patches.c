/* Image patches: hand-computed contents, counts, subsets, mean removal,
 * errors. */
#include <sfb/data.h>
#include "test.h"

#include <errno.h>
#include <stdlib.h>

static void free_ds(struct sfb_dataset *ds)
{
    free(ds->x);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

/* One 3 × 3 image 1…9, p = 2: four patches, by hand. */
static int test_hand_case(void)
{
    float x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int32_t y[] = {4};
    struct sfb_dataset im = {.n = 1, .d = 9, .k = 5, .labels = y, .x = x};
    struct sfb_patch_settings s;
    sfb_patch_default_settings(&s);
    ASSERT_EQ(s.p, 8);
    s.p = 2;
    struct sfb_dataset out;
    ASSERT_OK(sfb_data_patches(&im, &s, &out));
    ASSERT_EQ(out.n, 4);
    ASSERT_EQ(out.d, 4);
    ASSERT_EQ(out.k, 5);
    ASSERT_EQ(out.sparse, 0);
    const float want[4][4] = {{1, 2, 4, 5}, {2, 3, 5, 6}, {4, 5, 7, 8}, {5, 6, 8, 9}};
    for (int i = 0; i < 4; i++) {
        ASSERT_EQ(out.labels[i], 4);
        for (int q = 0; q < 4; q++)
            ASSERT_EQ(out.x[i * 4 + q], want[i][q]);
    }
    free_ds(&out);
    /* Mean removal: {1,2,4,5} has mean 3. */
    s.remove_mean = 1;
    ASSERT_OK(sfb_data_patches(&im, &s, &out));
    ASSERT_EQ(out.x[0], -2);
    ASSERT_EQ(out.x[3], 2);
    ASSERT_EQ(out.x[12], -2); /* {5,6,8,9} − 7 */
    free_ds(&out);
    return 0;
}

/* Two 4 × 5 images (pixel = 100·i + 10·row + col), p = 3: 2·2·3 = 12
 * patches; every subset patch is one of them, in order, without repeats. */
static int test_rect_and_subset(void)
{
    float x[2 * 20];
    int32_t y[] = {0, 1};
    for (int i = 0; i < 2; i++)
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 5; c++)
                x[i * 20 + r * 5 + c] = (float)(100 * i + 10 * r + c);
    uint64_t rp[3];
    uint32_t col[40];
    float val[40];
    rp[0] = 0;
    int nz = 0;
    for (int i = 0; i < 2; i++) {
        for (int q = 0; q < 20; q++)
            if (x[i * 20 + q] != 0) col[nz] = (uint32_t)q, val[nz++] = x[i * 20 + q];
        rp[i + 1] = (uint64_t)nz;
    }
    struct sfb_dataset im = {.n = 2, .d = 20, .k = 2, .labels = y, .x = x};
    struct sfb_dataset sp = {
        .n = 2, .d = 20, .k = 2, .labels = y, .sparse = 1, .row_ptr = rp, .col = col, .val = val};
    struct sfb_patch_settings s;
    sfb_patch_default_settings(&s);
    s.h = 4;
    s.w = 5;
    s.p = 3;
    struct sfb_dataset all, all2, sub, sub2;
    ASSERT_OK(sfb_data_patches(&im, &s, &all));
    ASSERT_EQ(all.n, 12);
    ASSERT_EQ(all.d, 9);
    /* Patch 7: image 1, position 1 = row 0, col 1: top-left pixel 101. */
    ASSERT_EQ(all.x[7 * 9 + 0], 101);
    ASSERT_EQ(all.x[7 * 9 + 8], 123);
    ASSERT_EQ(all.labels[7], 1);
    ASSERT_EQ(all.x[5 * 9 + 4], 23);             /* image 0, row 1, col 2; centre at (2, 3) */
    ASSERT_OK(sfb_data_patches(&sp, &s, &all2)); /* CSR images: same patches */
    ASSERT(memcmp(all.x, all2.x, sizeof(float) * 12 * 9) == 0);
    s.max_patches = 5;
    s.seed = 9;
    ASSERT_OK(sfb_data_patches(&im, &s, &sub));
    ASSERT_OK(sfb_data_patches(&im, &s, &sub2));
    ASSERT_EQ(sub.n, 5);
    ASSERT(memcmp(sub.x, sub2.x, sizeof(float) * 5 * 9) == 0);
    int last = -1;
    for (int i = 0; i < 5; i++) {
        int hit = -1;
        for (int j = 0; j < 12 && hit < 0; j++)
            if (memcmp(sub.x + i * 9, all.x + j * 9, sizeof(float) * 9) == 0) hit = j;
        ASSERT_GT(hit, last);
        ASSERT_EQ(sub.labels[i], all.labels[hit]);
        last = hit;
    }
    s.max_patches = 100; /* more than exist: all of them */
    free_ds(&sub2);
    ASSERT_OK(sfb_data_patches(&im, &s, &sub2));
    ASSERT_EQ(sub2.n, 12);
    free_ds(&all);
    free_ds(&all2);
    free_ds(&sub);
    free_ds(&sub2);
    return 0;
}

static int test_errors(void)
{
    float x[12] = {0};
    struct sfb_dataset im = {.n = 1, .d = 12, .k = 1, .x = x};
    struct sfb_patch_settings s;
    sfb_patch_default_settings(&s);
    struct sfb_dataset out;
    s.p = 2;
    ASSERT_EQ(sfb_data_patches(&im, &s, &out), -SFB_ESHAPE); /* 12 is not a square */
    ASSERT_STR_CONTAINS(sfb_last_error(), "square");
    s.h = 3;
    s.w = 5;
    ASSERT_EQ(sfb_data_patches(&im, &s, &out), -SFB_ESHAPE);
    s.w = 4;
    s.p = 4;
    ASSERT_EQ(sfb_data_patches(&im, &s, &out), -EINVAL);
    s.p = 0;
    ASSERT_EQ(sfb_data_patches(&im, &s, &out), -EINVAL);
    s.p = 2;
    s.w = 0;
    ASSERT_EQ(sfb_data_patches(&im, &s, &out), -EINVAL);
    ASSERT(out.x == NULL && out.n == 0);
    s.w = 4;
    ASSERT_OK(sfb_data_patches(&im, &s, &out));
    ASSERT_EQ(out.n, 6);
    ASSERT_EQ(out.k, 1);
    free_ds(&out);
    return 0;
}

static const struct test_case tests[] = {
    {"hand_case", test_hand_case},
    {"rect_and_subset", test_rect_and_subset},
    {"errors", test_errors},
};

TEST_MAIN(tests)
