/* SSP clock table: in-order and out-of-order marking, duplicates, the
 * readiness condition for BSP, bounded staleness and asynchronous mode. */
#include "src/base/util.h"
#include "src/ssp/ssp.h"
#include "test.h"

#include <stdint.h>

static int test_in_order(void)
{
    struct sfb__ssp t;
    ASSERT_OK(sfb__ssp_init(&t, 3, 0, 0));
    ASSERT_EQ(sfb__ssp_min_applied(&t), -1);
    ASSERT(sfb__ssp_ready(&t, 0));
    ASSERT(!sfb__ssp_ready(&t, 1));
    for (uint32_t o = 0; o < 3; o++) ASSERT_OK(sfb__ssp_mark(&t, o, 0));
    ASSERT_EQ(sfb__ssp_min_applied(&t), 0);
    ASSERT(sfb__ssp_ready(&t, 1));
    ASSERT(!sfb__ssp_ready(&t, 2));
    sfb__ssp_fini(&t);
    return 0;
}

static int test_out_of_order(void)
{
    struct sfb__ssp t;
    ASSERT_OK(sfb__ssp_init(&t, 2, 2, 0));
    /* clocks 0..199 of origin 1 arrive in a scrambled order */
    int order[200];
    for (int i = 0; i < 200; i++) order[i] = (i * 73) % 200;
    int64_t expect_prefix = -1;
    uint8_t seen[200] = {0};
    for (int i = 0; i < 200; i++) {
        ASSERT_OK(sfb__ssp_mark(&t, 1, order[i]));
        seen[order[i]] = 1;
        while (expect_prefix + 1 < 200 && seen[expect_prefix + 1]) expect_prefix++;
        ASSERT_EQ(sfb__ssp_applied(&t, 1), expect_prefix);
    }
    ASSERT_EQ(sfb__ssp_applied(&t, 1), 199);
    ASSERT_EQ(sfb__ssp_applied(&t, 0), -1);
    ASSERT_EQ(sfb__ssp_min_applied(&t), -1);
    /* staleness 2: clock 2 may start with nothing applied, clock 3 may not */
    ASSERT(sfb__ssp_ready(&t, 2));
    ASSERT(!sfb__ssp_ready(&t, 3));
    sfb__ssp_fini(&t);
    return 0;
}

static int test_duplicates(void)
{
    struct sfb__ssp t;
    ASSERT_OK(sfb__ssp_init(&t, 2, 0, 10));
    ASSERT_EQ(sfb__ssp_applied(&t, 0), 9);
    ASSERT_EQ(sfb__ssp_mark(&t, 0, 5), -EALREADY); /* before the start: replay */
    ASSERT_OK(sfb__ssp_mark(&t, 0, 12));
    ASSERT_EQ(sfb__ssp_mark(&t, 0, 12), -EALREADY);
    ASSERT(sfb__ssp_is_applied(&t, 0, 12));
    ASSERT(!sfb__ssp_is_applied(&t, 0, 11));
    ASSERT_EQ(sfb__ssp_mark(&t, 2, 0), -EINVAL);
    ASSERT_OK(sfb__ssp_mark(&t, 0, 10));
    ASSERT_OK(sfb__ssp_mark(&t, 0, 11));
    ASSERT_EQ(sfb__ssp_applied(&t, 0), 12);
    sfb__ssp_fini(&t);
    return 0;
}

static int test_async_and_record(void)
{
    struct sfb__ssp t;
    ASSERT_OK(sfb__ssp_init(&t, 4, -1, 0));
    ASSERT(sfb__ssp_ready(&t, 1000000));
    ASSERT_EQ(sfb__ssp_required(&t, 5), INT64_MIN);
    ASSERT_OK(sfb__ssp_record(&t, 3));
    ASSERT_EQ(t.record_len, 4);
    ASSERT_EQ(t.record[3], -1);
    ASSERT_EQ(t.record[0], INT64_MIN); /* never recorded */
    for (uint32_t o = 0; o < 4; o++) ASSERT_OK(sfb__ssp_mark(&t, o, 0));
    ASSERT_OK(sfb__ssp_record(&t, 700));
    ASSERT_EQ(t.record[700], 0);
    sfb__ssp_fini(&t);
    return 0;
}

static int test_long_gap(void)
{
    /* a gap wider than one bitmap word closes correctly */
    struct sfb__ssp t;
    ASSERT_OK(sfb__ssp_init(&t, 1, -1, 0));
    for (int c = 1; c < 300; c++) ASSERT_OK(sfb__ssp_mark(&t, 0, c));
    ASSERT_EQ(sfb__ssp_applied(&t, 0), -1);
    ASSERT_OK(sfb__ssp_mark(&t, 0, 0));
    ASSERT_EQ(sfb__ssp_applied(&t, 0), 299);
    ASSERT_OK(sfb__ssp_mark(&t, 0, 300));
    ASSERT_EQ(sfb__ssp_applied(&t, 0), 300);
    sfb__ssp_fini(&t);
    return 0;
}

static const struct test_case tests[] = {
    {"in_order", test_in_order},
    {"out_of_order", test_out_of_order},
    {"duplicates", test_duplicates},
    {"async_and_record", test_async_and_record},
    {"long_gap", test_long_gap},
};
TEST_MAIN(tests)
