/* Start-up agreement verdict (src/boot/agree.h): equal texts agree; every
 * differing field is named with rank 0's value and the first other rank's;
 * the verdict does not depend on which rank computes it (it is a function
 * of all texts); other key layouts are reported. */
#include "src/boot/agree.h"
#include "src/base/util.h"
#include "test.h"

#include <string.h>

static int verdict(const char *const *texts, uint32_t world, char *out, size_t cap)
{
    size_t lens[8];
    for (uint32_t r = 0; r < world; r++) lens[r] = strlen(texts[r]);
    return sfb__agree_verdict(texts, lens, world, out, cap);
}

static int test_equal(void)
{
    const char *t[3] = {"a=1\nb=2\n", "a=1\nb=2\n", "a=1\nb=2\n"};
    char why[200] = "x";
    ASSERT_EQ(verdict(t, 3, why, sizeof why), 0);
    ASSERT_EQ(why[0], '\0');
    ASSERT_EQ(verdict(t, 1, why, sizeof why), 0);
    return 0;
}

static int test_fields_named(void)
{
    const char *t[4] = {"model=mlr\nfeatures=20\nlr=1\nclocks=20\n",
                        "model=mlr\nfeatures=30\nlr=1\nclocks=20\n",
                        "model=mlr\nfeatures=20\nlr=1\nclocks=10\n",
                        "model=mlr\nfeatures=40\nlr=1\nclocks=20\n"};
    char why[400];
    ASSERT_EQ(verdict(t, 4, why, sizeof why), -SFB_ECONFIG);
    ASSERT_STR_CONTAINS(why, "features: rank 0 has \"20\", rank 1 has \"30\" (2 ranks differ)");
    ASSERT_STR_CONTAINS(why, "clocks: rank 0 has \"20\", rank 2 has \"10\"");
    ASSERT(!strstr(why, "model"));
    ASSERT(!strstr(why, "lr:"));
    /* fields in rank 0's order */
    ASSERT(strstr(why, "features:") < strstr(why, "clocks:"));
    return 0;
}

static int test_empty_value_and_layout(void)
{
    const char *t[3] = {"data=x\ntest_data=\n", "data=x\ntest_data=y\n", "data=x\n"};
    char why[400];
    ASSERT_EQ(verdict(t, 3, why, sizeof why), -SFB_ECONFIG);
    ASSERT_STR_CONTAINS(why, "test_data: rank 0 has \"\", rank 1 has \"y\"");
    ASSERT_STR_CONTAINS(why, "rank 2 sends other settings than rank 0");
    return 0;
}

static int test_truncates(void)
{
    const char *t[2] = {"a=1\n", "a=2\n"};
    char why[8];
    ASSERT_EQ(verdict(t, 2, why, sizeof why), -SFB_ECONFIG);
    ASSERT_EQ(strlen(why), 7u);
    return 0;
}

static const struct test_case tests[] = {
    {"equal", test_equal},
    {"fields_named", test_fields_named},
    {"empty_value_and_layout", test_empty_value_and_layout},
    {"truncates", test_truncates},
};
TEST_MAIN(tests)
