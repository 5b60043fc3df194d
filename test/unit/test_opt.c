/* The option-table parser (src/cli/optparse.c): every kind of row checks its
 * value and stores it where the row says; a bad value is exit 2 with the
 * option and the value named; --help lines come from the rows. */
#include "src/cli/optparse.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct dest {
    uint32_t u32;
    uint64_t u64;
    int i, e, flag;
    int64_t i64;
    double r;
    const char *s, *choice;
    int called;
    struct {
        uint32_t n, v[3];
    } list;
};

#define D(f) .off = offsetof(struct dest, f), .size = sizeof(((struct dest *)0)->f)

static int call_me(void *base, void *ctx, const struct cli_opt *o, const char *spelled,
                   const char *v)
{
    (void)o;
    if (strcmp(v, "ok")) return cli_opt_bad(ctx, spelled, v, "ok");
    ((struct dest *)base)->called++;
    return 0;
}

static const int colours[] = {10, 20, 30};

static const struct cli_opt table[] = {
    {.kind = CLI_SECTION, .help = "things:"},
    {.kind = CLI_UINT,
     .name = "small",
     .short_name = 's',
     D(u32),
     "N",
     "a small one",
     .umin = 1,
     .umax = 100},
    {.kind = CLI_UINT,
     .name = "big",
     D(u64),
     "N",
     "a big one\nover two lines",
     .umin = 0,
     .umax = UINT64_MAX,
     .want = "a non-negative integer"},
    {.kind = CLI_INT, .name = "signed", D(i), "I", "signed", .imin = -1, .imax = 5},
    {.kind = CLI_INT, .name = "wide", D(i64), "I", "wide", .imin = INT64_MIN, .imax = INT64_MAX},
    {.kind = CLI_REAL,
     .name = "rate",
     D(r),
     "R",
     "in (0, 1]",
     .lo = 0,
     .hi = 1,
     .open = CLI_OPEN_LO},
    {.kind = CLI_REAL,
     .name = "pos",
     D(r),
     "R",
     "> 0",
     .lo = 0,
     .hi = INFINITY,
     .open = CLI_OPEN_LO},
    {.kind = CLI_ENUM,
     .name = "colour",
     D(e),
     "red|green|blue",
     "a colour",
     .choices = "red|green|blue",
     .values = colours},
    {.kind = CLI_CHOICE, .name = "mode", D(choice), "a|b", "a mode", .choices = "a|b"},
    {.kind = CLI_STR, .name = "dir", D(s), "DIR", "not empty", .umin = 1, .want = "a directory"},
    {.kind = CLI_FLAG, .name = "flag", .short_name = 'f', D(flag), NULL, "a flag", .ival = 7},
    {.kind = CLI_UINT_LIST, .name = "sizes", D(list), "H[,H]", "up to 3", .umin = 1,
     .umax = 65536},
    {.kind = CLI_CALL, .name = "call", .size = 0, "X", "custom", .call = call_me},
    {.kind = CLI_HELP, .name = "help", .short_name = 'h', .size = 0, NULL, "this help"},
    {.kind = CLI_END},
};

/* Where parse() collects positional arguments (NULL: they are errors). */
static const char **parse_pos;

/* Parses argv (NULL-terminated, after the command name) with stderr
 * captured into err. */
static int parse(struct dest *d, char *err, size_t cap, struct cli_optparse *p, char **args)
{
    char *argv[32] = {"test"};
    int argc = 1;
    while (args[argc - 1]) {
        argv[argc] = args[argc - 1];
        argc++;
    }
    memset(d, 0, sizeof *d);
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    dup2(fileno(tmp), 2);
    cli_opt_init(p, argc, argv, "test");
    p->pos = parse_pos;
    int r = cli_opt_parse(p, table, d, (void *)"test");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(err, 1, cap - 1, tmp);
    err[n] = '\0';
    fclose(tmp);
    return r;
}

#define ARGS(...) ((char *[]){__VA_ARGS__, NULL})

static int test_values(void)
{
    struct dest d;
    struct cli_optparse p;
    char err[512];
    ASSERT_EQ(parse(&d, err, sizeof err, &p,
                    ARGS("-s7", "--big=18446744073709551615", "--signed", "-1", "--wide",
                         "-9000000000", "--rate", "1", "--colour", "blue", "--mode", "b", "--dir",
                         "x", "-f", "--call", "ok")),
              CLI_OPT_OK);
    ASSERT_EQ(d.u32, 7);
    ASSERT(d.u64 == UINT64_MAX);
    ASSERT_EQ(d.i, -1);
    ASSERT(d.i64 == -9000000000LL);
    ASSERT(d.r == 1.0);
    ASSERT_EQ(d.e, 30);
    ASSERT(strcmp(d.choice, "b") == 0 && strcmp(d.s, "x") == 0);
    ASSERT_EQ(d.flag, 7);
    ASSERT_EQ(d.called, 1);
    ASSERT(cli_opt_given(&p, table, "rate") && !cli_opt_given(&p, table, "pos"));
    ASSERT(strcmp(err, "") == 0);
    ASSERT_EQ(parse(&d, err, sizeof err, &p, ARGS("--small", "3", "-h", "--small", "x")),
              CLI_OPT_HELP);
    /* a list: the count and the values; given again, the last one holds */
    ASSERT_EQ(parse(&d, err, sizeof err, &p, ARGS("--sizes", "1024,5,65536")), CLI_OPT_OK);
    ASSERT_EQ(d.list.n, 3);
    ASSERT_EQ(d.list.v[0], 1024);
    ASSERT_EQ(d.list.v[1], 5);
    ASSERT_EQ(d.list.v[2], 65536);
    ASSERT_EQ(parse(&d, err, sizeof err, &p, ARGS("--sizes=9,8", "--sizes", "7")), CLI_OPT_OK);
    ASSERT_EQ(d.list.n, 1);
    ASSERT_EQ(d.list.v[0], 7);
    return 0;
}

/* Each bad value: exit 2, the option as spelled and the value named, and
 * what was wanted (from the row's range or choices unless it says). */
static int test_bad_values(void)
{
    static const struct {
        const char *opt, *val, *msg;
    } cases[] = {
        {"--small", "0", "test: --small: \"0\" is not an integer in 1..100\n"},
        {"-s", "101", "test: -s: \"101\" is not an integer in 1..100\n"},
        {"--small", "+5", "\"+5\" is not an integer in 1..100"},
        {"--small", "5x", "\"5x\" is not"},
        {"--big", "-1", "test: --big: \"-1\" is not a non-negative integer\n"},
        {"--signed", "6", "--signed: \"6\" is not an integer in -1..5"},
        {"--wide", "9223372036854775808", "--wide: \"9223372036854775808\" is not"},
        {"--rate", "0", "--rate: \"0\" is not a number in (0, 1]"},
        {"--rate", "nan", "--rate: \"nan\" is not a number in (0, 1]"},
        {"--pos", "-2", "--pos: \"-2\" is not a number > 0"},
        {"--pos", "inf", "--pos: \"inf\" is not a number > 0"},
        {"--colour", "Red", "--colour: \"Red\" is not red, green or blue"},
        {"--mode", "c", "--mode: \"c\" is not a or b"},
        {"--dir", "", "--dir: \"\" is not a directory"},
        {"--call", "no", "--call: \"no\" is not ok"},
        {"--sizes", "0", "test: --sizes: \"0\": value 1 \"0\" is not an integer in 1..65536\n"},
        {"--sizes", "", "--sizes: \"\": value 1 \"\" is not an integer in 1..65536"},
        {"--sizes", "1024,,5", "--sizes: \"1024,,5\": value 2 \"\" is not an integer"},
        {"--sizes", "1024,", "--sizes: \"1024,\": value 2 \"\" is not"},
        {"--sizes", "8,x1", "--sizes: \"8,x1\": value 2 \"x1\" is not"},
        {"--sizes", "65537", "value 1 \"65537\" is not an integer in 1..65536"},
        {"--sizes", "-3", "value 1 \"-3\" is not"},
        {"--sizes", "1,2,3,4", "test: --sizes: \"1,2,3,4\" has more than 3 values\n"},
        {"--sizes", "1,99999999999999999999999999999999999", "value 2 \"9999999999"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct dest d;
        struct cli_optparse p;
        char err[512];
        char *args[] = {(char *)cases[i].opt, (char *)cases[i].val, NULL};
        ASSERT_EQ(parse(&d, err, sizeof err, &p, args), CLI_OPT_USAGE);
        ASSERT_STR_CONTAINS(err, cases[i].msg);
        ASSERT_STR_CONTAINS(err, "sfb test: ");
    }
    struct dest d;
    struct cli_optparse p;
    char err[512];
    ASSERT_EQ(parse(&d, err, sizeof err, &p, ARGS("--flag=1")), CLI_OPT_USAGE);
    ASSERT_STR_CONTAINS(err, "--flag takes no value");
    ASSERT_EQ(parse(&d, err, sizeof err, &p, ARGS("--colur", "red")), CLI_OPT_USAGE);
    ASSERT_STR_CONTAINS(err, "unknown option \"--colur\"; did you mean --colour?");
    ASSERT_EQ(parse(&d, err, sizeof err, &p, ARGS("--small")), CLI_OPT_USAGE);
    ASSERT_STR_CONTAINS(err, "--small needs a value");
    return 0;
}

/* Positional arguments: a usage error naming the first, unless the caller
 * collects them (sfb timeline's files): then they may stand before,
 * between and after the options, and all after "--" are arguments. */
static int test_positional(void)
{
    struct dest d;
    struct cli_optparse p;
    char err[512];
    ASSERT_EQ(parse(&d, err, sizeof err, &p, ARGS("-s", "3", "a.json")), CLI_OPT_USAGE);
    ASSERT_STR_CONTAINS(err, "sfb test: unexpected argument \"a.json\"");
    ASSERT_EQ(parse(&d, err, sizeof err, &p, ARGS("--", "-s")), CLI_OPT_USAGE);
    ASSERT_STR_CONTAINS(err, "unexpected argument \"-s\"");
    ASSERT_EQ(parse(&d, err, sizeof err, &p, ARGS("-s", "3", "--")), CLI_OPT_OK);
    const char *pos[32];
    parse_pos = pos;
    ASSERT_EQ(parse(&d, err, sizeof err, &p,
                    ARGS("a", "-s", "3", "b", "--dir=x", "-", "-fs4", "c", "--", "-s", "--dir")),
              CLI_OPT_OK);
    ASSERT_EQ(p.npos, 6);
    const char *want[] = {"a", "b", "-", "c", "-s", "--dir"};
    for (int i = 0; i < 6; i++) ASSERT(strcmp(pos[i], want[i]) == 0);
    ASSERT_EQ(d.u32, 4);
    ASSERT_EQ(d.flag, 7);
    ASSERT(strcmp(d.s, "x") == 0);
    ASSERT(strcmp(err, "") == 0);
    /* an option's value is never an argument, a missing one still an error */
    ASSERT_EQ(parse(&d, err, sizeof err, &p, ARGS("--dir", "a", "b")), CLI_OPT_OK);
    ASSERT_EQ(p.npos, 1);
    ASSERT(strcmp(pos[0], "b") == 0 && strcmp(d.s, "a") == 0);
    ASSERT_EQ(parse(&d, err, sizeof err, &p, ARGS("a", "-s")), CLI_OPT_USAGE);
    ASSERT_STR_CONTAINS(err, "-s needs a value");
    parse_pos = NULL;
    return 0;
}

/* --help from the rows: headings, short names, metavars, the help column
 * and continuation lines. */
static int test_help(void)
{
    char buf[4096];
    FILE *f = tmpfile();
    ASSERT(f != NULL);
    cli_opt_help(f, table);
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    ASSERT_STR_CONTAINS(buf, "things:\n"
                             "  -s, --small N          a small one\n"
                             "  --big N                a big one\n"
                             "                         over two lines\n");
    ASSERT_STR_CONTAINS(buf, "\n  --colour red|green|blue  a colour\n");
    ASSERT_STR_CONTAINS(buf, "\n  -f, --flag             a flag\n");
    ASSERT_STR_CONTAINS(buf, "\n  -h, --help             this help\n");
    ASSERT(strstr(buf, "--call X") != NULL);
    return 0;
}

static const struct test_case tests[] = {
    {"values", test_values},
    {"bad_values", test_bad_values},
    {"help", test_help},
    {"positional", test_positional},
};

TEST_MAIN(tests)
