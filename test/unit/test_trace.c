/* The training timeline's recorder (src/base/trace.c): the file it writes
 * (events, names escaped, the rank in the path), a second open replacing the
 * first's events, the names of a framework's spans interned with the
 * recorder's memory out of the process's heap (a strdup per span and a
 * growing array there fragmented glibc's heap among sfb.torch's tensors),
 * and the names past its table dropped and counted. */
#include "src/base/trace.h"
#include "src/base/util.h"
#include "tmp_dir.h"
#include "test.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The file's text (NUL-terminated), or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* needle's occurrences in hay (not strstr in a loop: ASan's measures the
 * whole rest of hay on every call) */
static int count(const char *hay, const char *needle)
{
    size_t n = strlen(hay), k = strlen(needle);
    int found = 0;
    for (size_t i = 0; i + k <= n; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, k)) found++, i += k - 1;
    return found;
}

static int writes_events(void)
{
    const char *pattern = tu_path("tl.%r.json"), *file = tu_path("tl.3.json");
    ASSERT_OK(sfb__trace_open(pattern, 3));
    ASSERT(sfb__trace_on());
    double t0 = sfb__trace_us();
    sfb__trace_span(SFB__TRACK_COMPUTE, "wait", t0, 7, -1, 2, 0);
    sfb__trace_span(SFB__TRACK_NETWORK, "recv", t0, 7, 1, 0, 4096);
    char name[32];
    snprintf(name, sizeof name, "forward \"a\\b\"\n");
    sfb__trace_span_copy(SFB__TRACK_USER, name, t0, t0 + 5, 7);
    memset(name, 'x', sizeof name); /* the recorder kept its own copy */
    sfb__trace_span_copy(SFB__TRACK_USER, "step", t0, t0 + 9, 7);
    ASSERT_OK(sfb__trace_close());
    ASSERT(!sfb__trace_on());
    char *s = slurp(file);
    ASSERT(s != NULL);
    ASSERT_EQ(count(s, "\"ph\":\"X\""), 4);
    ASSERT_STR_CONTAINS(s, "{\"name\":\"forward \\\"a\\\\b\\\"\\u000a\",\"ph\":\"X\",\"pid\":3,"
                           "\"tid\":2");
    ASSERT_STR_CONTAINS(s, "\"name\":\"recv\",\"ph\":\"X\",\"pid\":3,\"tid\":1");
    ASSERT_STR_CONTAINS(s, "\"bytes\":4096");
    ASSERT_STR_CONTAINS(s, "\"name\":\"step\"");
    ASSERT_STR_CONTAINS(s, "\"dropped\":0}");
    free(s);
    return 0;
}

static int second_open_replaces(void)
{
    const char *pattern = tu_path("re.json"), *file = tu_path("re.json.0");
    ASSERT_OK(sfb__trace_open(pattern, 0));
    double t0 = sfb__trace_us();
    for (int i = 0; i < 100; i++) sfb__trace_span_copy(SFB__TRACK_USER, "old", t0, t0 + 1, i);
    ASSERT_OK(sfb__trace_open(pattern, 0));
    sfb__trace_span_copy(SFB__TRACK_USER, "new", t0, t0 + 1, 0);
    ASSERT_OK(sfb__trace_close());
    char *s = slurp(file);
    ASSERT(s != NULL);
    ASSERT_EQ(count(s, "\"ph\":\"X\""), 1);
    ASSERT_EQ(count(s, "\"old\""), 0);
    free(s);
    return 0;
}

static size_t heap_in_use(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

/* 200,000 spans, half of them named by a framework (20 names): the heap in
 * use does not grow (it grew by ~20 MB: a copy of each name and the array).
 * (Under ASan or valgrind mallinfo2 says 0 throughout.) */
static int memory_outside_heap(void)
{
    ASSERT_OK(sfb__trace_open(tu_path("mem.json"), 0));
    size_t before = heap_in_use();
    double t0 = sfb__trace_us();
    char name[64];
    for (int i = 0; i < 100000; i++) {
        snprintf(name, sizeof name, "backward m.enc.layers.%d.linear1", i % 20);
        sfb__trace_span_copy(SFB__TRACK_USER, name, t0, t0 + 1, i);
        sfb__trace_span(SFB__TRACK_NETWORK, "send", t0, i, 0, 1, 64);
    }
    size_t after = heap_in_use();
    ASSERT_OK(sfb__trace_close());
    ASSERT_LT(after, before + 64 * 1024);
    char *s = slurp(tu_path("mem.json.0"));
    ASSERT(s != NULL);
    ASSERT_EQ(count(s, "\"ph\":\"X\""), 200000);
    ASSERT_EQ(count(s, "\"name\":\"backward m.enc.layers.19.linear1\""), 5000);
    free(s);
    return 0;
}

/* More distinct names than the table holds (2^15): the rest dropped and
 * counted in the file, every span with a literal name kept. */
static int names_past_the_table(void)
{
    ASSERT_OK(sfb__trace_open(tu_path("many.json"), 0));
    double t0 = sfb__trace_us();
    char name[32];
    for (int i = 0; i < 40000; i++) {
        snprintf(name, sizeof name, "span %d", i);
        sfb__trace_span_copy(SFB__TRACK_USER, name, t0, t0 + 1, i);
        sfb__trace_span(SFB__TRACK_COMPUTE, "wait", t0, i, -1, -1, 0);
    }
    sfb__trace_span_copy(SFB__TRACK_USER, "span 7", t0, t0 + 1, 0); /* known: kept */
    ASSERT_OK(sfb__trace_close());
    char *s = slurp(tu_path("many.json.0"));
    ASSERT(s != NULL);
    ASSERT_EQ(count(s, "\"name\":\"wait\""), 40000);
    ASSERT_EQ(count(s, "\"name\":\"span 7\""), 2);
    ASSERT_EQ(count(s, "\"name\":\"span 32767\""), 1);
    ASSERT_EQ(count(s, "\"name\":\"span 32768\""), 0);
    ASSERT_STR_CONTAINS(s, "\"dropped\":7232}");
    free(s);
    return 0;
}

static const struct test_case tests[] = {
    {"writes_events", writes_events},
    {"second_open_replaces", second_open_replaces},
    {"memory_outside_heap", memory_outside_heap},
    {"names_past_the_table", names_past_the_table},
};

TEST_MAIN(tests)
