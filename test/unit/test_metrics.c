/* Per-worker metrics (src/train/metrics.c): the JSON lines written parse
 * back with every field and its value (NaN and infinity as null), events
 * carry their name, rank and fields, "%r" names the file per rank, and a
 * failed open or write is reported with the file's path. */
#include "src/base/util.h"
#include "src/train/metrics.h"
#include "test.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/sfb_metrics_XXXXXX";

/* One flat JSON object: members whose values are numbers, strings or null. */
struct member {
    char key[32];
    int type; /* 'n' number, 's' string, '0' null */
    double num;
    char str[64];
};

struct object {
    struct member m[40];
    int n;
};

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static const char *parse_string(const char *p, char *out, size_t cap)
{
    if (*p++ != '"') return NULL;
    size_t n = 0;
    while (*p && *p != '"') {
        if (*p == '\\' || (unsigned char)*p < 0x20 || n + 1 >= cap) return NULL;
        out[n++] = *p++;
    }
    out[n] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

/* Parses one line strictly; 0 or -1 (with where it broke on stderr). */
static int parse_line(const char *line, struct object *o)
{
    const char *p = skip_ws(line);
    o->n = 0;
    if (*p++ != '{') goto bad;
    for (;;) {
        if (o->n == (int)SFB_ARRAY_LEN(o->m)) goto bad;
        struct member *m = &o->m[o->n++];
        p = skip_ws(p);
        if (!(p = parse_string(p, m->key, sizeof m->key))) goto bad;
        p = skip_ws(p);
        if (*p++ != ':') goto bad;
        p = skip_ws(p);
        if (*p == '"') {
            m->type = 's';
            if (!(p = parse_string(p, m->str, sizeof m->str))) goto bad;
        } else if (!strncmp(p, "null", 4)) {
            m->type = '0';
            p += 4;
        } else {
            char *end;
            m->type = 'n';
            m->num = strtod(p, &end);
            /* JSON numbers: no nan, inf, hex or leading '+' */
            if (end == p || *p == '+' || strpbrk(p, "nNiIxX") == p) goto bad;
            for (const char *q = p; q < end; q++)
                if (!strchr("-0123456789.eE+", *q)) goto bad;
            p = end;
        }
        p = skip_ws(p);
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p++ != '}') goto bad;
        p = skip_ws(p);
        if (*p && *p != '\n') goto bad;
        return 0;
    }
bad:
    fprintf(stderr, "  not a flat JSON object at byte %td: %s", p - line, line);
    return -1;
}

static const struct member *get(const struct object *o, const char *key)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->m[i].key, key)) return &o->m[i];
    return NULL;
}

#define ASSERT_NUM(o, key, want)                                                                   \
    do {                                                                                           \
        const struct member *m_ = get(o, key);                                                     \
        if (!m_ || m_->type != 'n') TEST_FAIL_AT("no number \"%s\"", key);                         \
        ASSERT_NEAR(m_->num, want, fabs((double)(want)) * 1e-5);                                   \
    } while (0)

static int test_clock_and_event_lines(void)
{
    char pattern[128], path[128];
    snprintf(pattern, sizeof pattern, "%s/m_%%r.jsonl", dir);
    snprintf(path, sizeof path, "%s/m_3.jsonl", dir);
    struct sfb__metrics m;
    ASSERT_OK(sfb__metrics_open(&m, pattern, 3));
    struct sfb__clock_metrics c = {.clock = 7,
                                   .epoch = 2,
                                   .wall = 1.5,
                                   .t_begin = 100.25,
                                   .t_publish = 100.75,
                                   .compute_s = 0.125,
                                   .wait_s = 0.25,
                                   .budget_wait_s = 0.125,
                                   .queued_bytes = 65536,
                                   .apply_s = 0.0625,
                                   .bytes_sent = 123456789012ull,
                                   .bytes_recv = 42,
                                   .msgs_sent = 5,
                                   .msgs_recv = 6,
                                   .data_msgs = 4,
                                   .data_bytes = 4096,
                                   .staleness = 1,
                                   .min_applied = 5,
                                   .applied_early = 3,
                                   .objective = NAN,
                                   .samples_per_s = INFINITY,
                                   .lr = 0.01};
    sfb__metrics_clock(&m, &c);
    sfb__metrics_event(&m, "eval", "\"clock\":%d,\"accuracy\":%s", 8, "0.875");
    ASSERT_OK(sfb__metrics_close(&m));

    FILE *f = fopen(path, "r");
    ASSERT(f != NULL);
    char line[4096];
    struct object o;
    ASSERT(fgets(line, sizeof line, f));
    ASSERT_EQ(parse_line(line, &o), 0);
    ASSERT_NUM(&o, "rank", 3);
    ASSERT_NUM(&o, "clock", 7);
    ASSERT_NUM(&o, "epoch", 2);
    ASSERT_NUM(&o, "wall", 1.5);
    ASSERT_NUM(&o, "t_begin", 100.25);
    ASSERT_NUM(&o, "t_publish", 100.75);
    ASSERT_NUM(&o, "compute_s", 0.125);
    ASSERT_NUM(&o, "wait_s", 0.25);
    ASSERT_NUM(&o, "budget_wait_s", 0.125);
    ASSERT_NUM(&o, "queued_bytes", 65536);
    ASSERT_NUM(&o, "apply_s", 0.0625);
    ASSERT_NUM(&o, "bytes_sent", 123456789012.0);
    ASSERT_NUM(&o, "bytes_recv", 42);
    ASSERT_NUM(&o, "msgs_sent", 5);
    ASSERT_NUM(&o, "msgs_recv", 6);
    ASSERT_NUM(&o, "data_msgs", 4);
    ASSERT_NUM(&o, "data_bytes", 4096);
    ASSERT_NUM(&o, "staleness", 1);
    ASSERT_NUM(&o, "min_applied", 5);
    ASSERT_NUM(&o, "applied_early", 3);
    ASSERT_NUM(&o, "lr", 0.01);
    ASSERT(get(&o, "objective") && get(&o, "objective")->type == '0');
    ASSERT(get(&o, "samples_per_s") && get(&o, "samples_per_s")->type == '0');
    ASSERT_EQ(o.n, 23); /* nothing else, nothing twice */
    ASSERT(fgets(line, sizeof line, f));
    ASSERT_EQ(parse_line(line, &o), 0);
    ASSERT(get(&o, "event") && !strcmp(get(&o, "event")->str, "eval"));
    ASSERT_NUM(&o, "rank", 3);
    ASSERT_NUM(&o, "clock", 8);
    ASSERT_NUM(&o, "accuracy", 0.875);
    ASSERT_EQ(o.n, 4);
    ASSERT(!fgets(line, sizeof line, f));
    fclose(f);
    ASSERT_EQ(unlink(path), 0);
    return 0;
}

static int test_path_for_rank(void)
{
    char *p = sfb__path_for_rank("out/%r/m_%r.jsonl", 12);
    ASSERT(p != NULL);
    ASSERT(!strcmp(p, "out/12/m_12.jsonl"));
    free(p);
    p = sfb__path_for_rank("plain%", 1);
    ASSERT(p != NULL);
    ASSERT(!strcmp(p, "plain%"));
    free(p);
    /* no pattern: nothing is recorded, nothing fails */
    struct sfb__metrics m;
    ASSERT_OK(sfb__metrics_open(&m, NULL, 0));
    struct sfb__clock_metrics c = {0};
    sfb__metrics_clock(&m, &c);
    ASSERT_OK(sfb__metrics_close(&m));
    return 0;
}

static int test_errors_name_the_file(void)
{
    char pattern[128];
    snprintf(pattern, sizeof pattern, "%s/missing/m_%%r.jsonl", dir);
    struct sfb__metrics m;
    ASSERT_EQ(sfb__metrics_open(&m, pattern, 1), -ENOENT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "/missing/m_1.jsonl");
    ASSERT_STR_CONTAINS(sfb_last_error(), "cannot open metrics file");
    /* a full device: the writes fail at the latest when closing */
    if (access("/dev/full", W_OK) != 0) return 0;
    ASSERT_OK(sfb__metrics_open(&m, "/dev/full", 0));
    struct sfb__clock_metrics c = {.clock = 1};
    sfb__metrics_clock(&m, &c);
    ASSERT_EQ(sfb__metrics_close(&m), -ENOSPC);
    ASSERT_STR_CONTAINS(sfb_last_error(), "/dev/full");
    ASSERT_STR_CONTAINS(sfb_last_error(), "cannot write the metrics");
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        {"clock_and_event_lines", test_clock_and_event_lines},
        {"path_for_rank", test_path_for_rank},
        {"errors_name_the_file", test_errors_name_the_file},
    };
    if (!mkdtemp(dir)) return 1;
    int ret = test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
    rmdir(dir);
    return ret;
}
