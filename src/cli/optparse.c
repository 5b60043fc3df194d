/* The option-table parser (src/cli/opt.h). getopt_long is not used: it
 * accepts any unique prefix of a long option, so a typo could silently
 * select a different setting, and its state is global. */
#include "src/cli/optparse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void cli_opt_init(struct cli_optparse *p, int argc, char **argv, const char *cmd)
{
    memset(p, 0, sizeof *p);
    p->argc = argc;
    p->argv = argv;
    p->cmd = cmd;
    p->i = 1;
}

#define MAX_NAME 63

/* Levenshtein distance of two short strings (both <= MAX_NAME bytes). */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[MAX_NAME + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* How far `name` (len bytes) is from `cand`: the edit distance, at most 1
 * where name abbreviates cand (an abbreviation is the likeliest meaning,
 * however short). */
static size_t how_far(const char *cand, const char *name, size_t len)
{
    size_t d = distance(name, cand);
    if (len >= 2 && !strncmp(cand, name, len)) d = d < 1 ? d : 1;
    return d;
}

/* Whether a word best_d edits away is a likely typo of a name of len bytes:
 * a third of the letters wrong (at least 2). */
static int likely(size_t best_d, size_t len)
{
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    return best_d <= limit;
}

const struct cli_opt *cli_opt_closest(const struct cli_opt *table, const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > MAX_NAME) return NULL;
    const struct cli_opt *best = NULL;
    size_t best_d = (size_t)-1;
    for (const struct cli_opt *o = table; o->kind != CLI_END; o++) {
        if (!o->name || strlen(o->name) > MAX_NAME) continue;
        size_t d = how_far(o->name, name, len);
        if (d < best_d) {
            best_d = d;
            best = o;
        }
    }
    return likely(best_d, len) ? best : NULL;
}

const char *cli_closest_word(const char *const *words, size_t n, const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > MAX_NAME) return NULL;
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        if (strlen(words[i]) > MAX_NAME) continue;
        size_t d = how_far(words[i], name, len);
        if (d < best_d) {
            best_d = d;
            best = words[i];
        }
    }
    return likely(best_d, len) ? best : NULL;
}

static int unknown(struct cli_optparse *p, const struct cli_opt *table, const char *shown,
                   const char *name)
{
    const struct cli_opt *near = name ? cli_opt_closest(table, name) : NULL;
    if (near)
        fprintf(stderr, "sfb %s: unknown option \"%s\"; did you mean --%s? (see sfb %s --help)\n",
                p->cmd, shown, near->name, p->cmd);
    else
        fprintf(stderr, "sfb %s: unknown option \"%s\" (see sfb %s --help)\n", p->cmd, shown,
                p->cmd);
    return CLI_OPT_ERR;
}

static int needs_value(struct cli_optparse *p)
{
    fprintf(stderr, "sfb %s: %s needs a value (see sfb %s --help)\n", p->cmd, p->spelled, p->cmd);
    return CLI_OPT_ERR;
}

static int takes_value(const struct cli_opt *o)
{
    return o->kind != CLI_FLAG && o->kind != CLI_HELP;
}

/* The next character of a short-option cluster. */
static int next_short(struct cli_optparse *p, const struct cli_opt *table)
{
    char c = *p->cluster++;
    const struct cli_opt *o = table;
    while (o->kind != CLI_END && !(o->name && o->short_name == c))
        o++;
    if (o->kind == CLI_END) {
        char shown[3] = {'-', c, '\0'};
        p->cluster = NULL;
        return unknown(p, table, shown, NULL);
    }
    snprintf(p->spelled, sizeof p->spelled, "-%c", c);
    p->arg = NULL;
    if (takes_value(o)) {
        if (*p->cluster)
            p->arg = p->cluster;
        else if (p->i < p->argc)
            p->arg = p->argv[p->i++];
        p->cluster = NULL;
        if (!p->arg) return needs_value(p);
    } else if (!*p->cluster) {
        p->cluster = NULL;
    }
    return (int)(o - table) + 1;
}

static int unexpected(struct cli_optparse *p, const char *a)
{
    fprintf(stderr, "sfb %s: unexpected argument \"%s\" (see sfb %s --help)\n", p->cmd, a, p->cmd);
    return CLI_OPT_ERR;
}

/* "--name" or "--name=VALUE" (a). */
static int next_long(struct cli_optparse *p, const struct cli_opt *table, const char *a)
{
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const struct cli_opt *o = table;
    while (o->kind != CLI_END &&
           !(o->name && strlen(o->name) == len && !strncmp(o->name, name, len)))
        o++;
    if (o->kind == CLI_END) {
        char buf[MAX_NAME + 1];
        if (len > MAX_NAME) return unknown(p, table, a, NULL);
        memcpy(buf, name, len);
        buf[len] = '\0';
        char shown[MAX_NAME + 3];
        snprintf(shown, sizeof shown, "--%s", buf);
        return unknown(p, table, shown, buf);
    }
    snprintf(p->spelled, sizeof p->spelled, "--%s", o->name);
    p->arg = NULL;
    if (!takes_value(o)) {
        if (eq) {
            fprintf(stderr, "sfb %s: %s takes no value (see sfb %s --help)\n", p->cmd,
                    p->spelled, p->cmd);
            return CLI_OPT_ERR;
        }
        return (int)(o - table) + 1;
    }
    if (eq)
        p->arg = eq + 1;
    else if (p->i < p->argc)
        p->arg = p->argv[p->i++];
    if (!p->arg) return needs_value(p);
    return (int)(o - table) + 1;
}

int cli_opt_next(struct cli_optparse *p, const struct cli_opt *table)
{
    if (p->cluster) return next_short(p, table);
    for (;;) {
        if (p->i >= p->argc) return CLI_OPT_END;
        const char *a = p->argv[p->i++];
        if (!strcmp(a, "--")) {
            if (!p->pos) return p->i < p->argc ? unexpected(p, p->argv[p->i]) : CLI_OPT_END;
            /* the rest are arguments, whatever they look like */
            while (p->i < p->argc) p->pos[p->npos++] = p->argv[p->i++];
            return CLI_OPT_END;
        }
        if (a[0] == '-' && a[1] == '-') return next_long(p, table, a);
        if (a[0] == '-' && a[1] != '\0') {
            p->cluster = a + 1;
            return next_short(p, table);
        }
        if (!p->pos) return unexpected(p, a);
        p->pos[p->npos++] = a; /* "-" too */
    }
}

int cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    /* digits only: strtoull would also take a sign or leading blanks */
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

static int parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int cli_parse_rate(const char *s, double *bytes_s, const char **why)
{
    /* prefixes, matched without case; "bit" (any case) counts bits, a
     * final capital B bytes */
    static const struct {
        const char *prefix;
        double mult;
    } prefixes[] = {{"", 1}, {"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"t", 1e12},
                    {"ki", 1024.0}, {"mi", 1048576.0}, {"gi", 1073741824.0}};
    *why = "a rate such as 200mbit, 1gbit or 25MB/s";
    if (!s || !*s || *s == '-' || *s == '+') return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v)) return -1;
    if (!(v > 0)) {
        *why = "a positive rate (without --bandwidth there is no budget)";
        return -1;
    }
    size_t n = strlen(end);
    if (n >= 2 && !strcmp(end + n - 2, "/s")) n -= 2;
    if (n == 0) {
        *why = "a rate with its unit (bit, kbit, mbit, gbit; B/s, KB/s, MB/s, GB/s, MiB/s)";
        return -1;
    }
    size_t plen;
    double per; /* bytes per unit before the prefix */
    if (n >= 3 && !strncasecmp(end + n - 3, "bit", 3)) {
        plen = n - 3;
        per = 0.125;
    } else if (end[n - 1] == 'B') {
        plen = n - 1;
        per = 1;
    } else {
        if (n >= 3 && !strncasecmp(end + n - 3, "bps", 3))
            *why = "an unambiguous rate (\"mbps\" is megabytes/s to tc, megabits/s to most "
                   "people: write 200mbit or 25MB/s)";
        return -1;
    }
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        if (strlen(prefixes[i].prefix) != plen || strncasecmp(end, prefixes[i].prefix, plen))
            continue;
        if (per < 1 && plen == 2) break; /* no "kibit" */
        *bytes_s = v * prefixes[i].mult * per;
        return 0;
    }
    return -1;
}

int cli_opt_bad(const char *cmd, const char *spelled, const char *v, const char *want)
{
    fprintf(stderr, "sfb %s: %s: \"%s\" is not %s\n", cmd, spelled, v, want);
    return CLI_OPT_USAGE;
}

/* "a|b|c" as "a, b or c". */
static void choices_words(const char *choices, char *buf, size_t cap)
{
    size_t n = 0, bars = 0, len = 0;
    for (const char *c = choices; *c; c++)
        bars += *c == '|';
    buf[0] = '\0';
    for (const char *c = choices; *c && len + 4 < cap; c++) {
        if (*c != '|') {
            buf[len++] = *c;
        } else {
            const char *sep = ++n == bars ? " or " : ", ";
            len += (size_t)snprintf(buf + len, cap - len, "%s", sep);
        }
        buf[len] = '\0';
    }
}

/* How a bad value of row `o` is described when the row does not say. */
static const char *want_text(const struct cli_opt *o, char *buf, size_t cap)
{
    if (o->want) return o->want;
    if (o->kind == CLI_UINT)
        snprintf(buf, cap, "an integer in %llu..%llu", (unsigned long long)o->umin,
                 (unsigned long long)o->umax);
    else if (o->kind == CLI_INT)
        snprintf(buf, cap, "an integer in %lld..%lld", (long long)o->imin, (long long)o->imax);
    else if (o->kind == CLI_REAL && isinf(o->hi))
        snprintf(buf, cap, "a number %s %g", o->open & CLI_OPEN_LO ? ">" : ">=", o->lo);
    else if (o->kind == CLI_REAL)
        snprintf(buf, cap, "a number in %c%g, %g%c", o->open & CLI_OPEN_LO ? '(' : '[', o->lo,
                 o->hi, o->open & CLI_OPEN_HI ? ')' : ']');
    else if (o->choices)
        choices_words(o->choices, buf, cap);
    else
        snprintf(buf, cap, "a value");
    return buf;
}

/* Index of `v` among the '|'-separated choices, or -1. */
static int choice_index(const char *choices, const char *v)
{
    size_t vl = strlen(v);
    int i = 0;
    for (const char *c = choices;; i++) {
        const char *bar = strchr(c, '|');
        size_t l = bar ? (size_t)(bar - c) : strlen(c);
        if (l == vl && !memcmp(c, v, l)) return i;
        if (!bar) return -1;
        c = bar + 1;
    }
}

static int in_range(const struct cli_opt *o, double d)
{
    if (o->open & CLI_OPEN_LO ? !(d > o->lo) : !(d >= o->lo)) return 0;
    if (o->open & CLI_OPEN_HI ? !(d < o->hi) : !(d <= o->hi)) return 0;
    return 1;
}

/* A CLI_UINT_LIST value: "a,b,c" into a count and the values at dst (room
 * for size/4 − 1 values). On a bad value prints what is wrong with which
 * element and returns CLI_OPT_USAGE. */
static int store_list(const struct cli_optparse *p, const struct cli_opt *o, char *dst,
                      const char *v)
{
    const uint32_t cap = (uint32_t)(o->size / sizeof(uint32_t)) - 1;
    uint32_t vals[64], n = 0;
    char el[32], want[96];
    if (cap == 0 || cap > 64) abort(); /* a table bug */
    snprintf(want, sizeof want, "an integer in %llu..%llu", (unsigned long long)o->umin,
             (unsigned long long)o->umax);
    for (const char *c = v;; n++) {
        const char *comma = strchr(c, ',');
        size_t l = comma ? (size_t)(comma - c) : strlen(c);
        uint64_t u;
        if (n == cap) {
            fprintf(stderr, "sfb %s: %s: \"%s\" has more than %u values\n", p->cmd, p->spelled,
                    v, cap);
            return CLI_OPT_USAGE;
        }
        snprintf(el, sizeof el, "%.*s", (int)(l < 31 ? l : 31), c);
        if (l >= sizeof el || cli_parse_u64(el, o->umin, o->umax, &u)) {
            fprintf(stderr, "sfb %s: %s: \"%s\": value %u \"%.*s\" is not %s\n", p->cmd,
                    p->spelled, v, n + 1, (int)l, c, want);
            return CLI_OPT_USAGE;
        }
        vals[n] = (uint32_t)u;
        if (!comma) break;
        c = comma + 1;
    }
    n++;
    memcpy(dst, &n, sizeof n);
    memcpy(dst + sizeof n, vals, n * sizeof *vals);
    return CLI_OPT_OK;
}

/* Checks `v` against row `o` and stores it at base + o->off. */
static int store(const struct cli_optparse *p, const struct cli_opt *o, void *base, void *ctx,
                 const char *v)
{
    char *dst = (char *)base + o->off, buf[160];
    uint64_t u;
    int64_t l;
    double d;
    int i, ok = 1;
    /* a flag or enum row must name an int (or enum) field: a table bug */
    if ((o->kind == CLI_FLAG || o->kind == CLI_ENUM) && o->size != sizeof(int)) abort();
    switch (o->kind) {
    case CLI_FLAG:
        memcpy(dst, &o->ival, sizeof(int));
        break;
    case CLI_STR:
        if ((ok = !(o->umin && !*v))) memcpy(dst, &v, sizeof v);
        break;
    case CLI_CHOICE:
        if ((ok = choice_index(o->choices, v) >= 0)) memcpy(dst, &v, sizeof v);
        break;
    case CLI_ENUM:
        if ((ok = (i = choice_index(o->choices, v)) >= 0)) memcpy(dst, &o->values[i], sizeof(int));
        break;
    case CLI_UINT:
        if ((ok = !cli_parse_u64(v, o->umin, o->umax, &u))) {
            uint32_t u32 = (uint32_t)u;
            if (o->size == sizeof u32)
                memcpy(dst, &u32, sizeof u32);
            else
                memcpy(dst, &u, sizeof u);
        }
        break;
    case CLI_INT:
        if ((ok = !parse_i64(v, o->imin, o->imax, &l))) {
            int li = (int)l;
            if (o->size == sizeof li)
                memcpy(dst, &li, sizeof li);
            else
                memcpy(dst, &l, sizeof l);
        }
        break;
    case CLI_REAL:
        if ((ok = !cli_parse_double(v, &d) && in_range(o, d))) memcpy(dst, &d, sizeof d);
        break;
    case CLI_UINT_LIST:
        return store_list(p, o, dst, v);
    case CLI_CALL:
        return o->call(base, ctx, o, p->spelled, v);
    default:
        break;
    }
    return ok ? CLI_OPT_OK : cli_opt_bad(p->cmd, p->spelled, v, want_text(o, buf, sizeof buf));
}

int cli_opt_parse(struct cli_optparse *p, const struct cli_opt *table, void *base, void *ctx)
{
    int c;
    while ((c = cli_opt_next(p, table)) > 0) {
        const struct cli_opt *o = &table[c - 1];
        if (c - 1 < CLI_OPT_MAX) p->given[c - 1] = 1;
        if (o->kind == CLI_HELP) return CLI_OPT_HELP;
        int r = store(p, o, base, ctx, p->arg);
        if (r) return r;
    }
    return c == CLI_OPT_ERR ? CLI_OPT_USAGE : CLI_OPT_OK;
}

int cli_opt_given(const struct cli_optparse *p, const struct cli_opt *table, const char *name)
{
    for (size_t i = 0; table[i].kind != CLI_END && i < CLI_OPT_MAX; i++)
        if (table[i].name && !strcmp(table[i].name, name)) return p->given[i];
    return 0;
}

#define HELP_COLUMN 25

void cli_opt_help(FILE *f, const struct cli_opt *table)
{
    for (const struct cli_opt *o = table; o->kind != CLI_END; o++) {
        if (o->kind == CLI_SECTION) {
            fprintf(f, "%s\n", o->help);
            continue;
        }
        char left[128];
        int n = o->short_name ? snprintf(left, sizeof left, "  -%c, --%s", o->short_name, o->name)
                              : snprintf(left, sizeof left, "  --%s", o->name);
        if (o->metavar && n > 0 && (size_t)n < sizeof left)
            n += snprintf(left + n, sizeof left - (size_t)n, " %s", o->metavar);
        fputs(left, f);
        const char *h = o->help ? o->help : "";
        int col = n < 0 ? 0 : n;
        for (int line = 0; *h || line == 0; line++) {
            const char *nl = strchr(h, '\n');
            int len = nl ? (int)(nl - h) : (int)strlen(h);
            if (line > 0) col = 0;
            int pad = col + 2 <= HELP_COLUMN ? HELP_COLUMN - col : 2;
            fprintf(f, "%*s%.*s\n", pad, "", len, h);
            h += len + (nl ? 1 : 0);
        }
    }
}

int cli_opt_canonical(struct cli_optparse *p, const struct cli_opt *table, const char *drop,
                      char **out, size_t cap)
{
    size_t n = 0;
    int c;
    while ((c = cli_opt_next(p, table)) > 0) {
        const struct cli_opt *o = &table[c - 1];
        if (drop && !strcmp(o->name, drop)) continue;
        size_t len = strlen(o->name) + 4 + (p->arg ? strlen(p->arg) : 0);
        char *a = n < cap ? malloc(len) : NULL;
        if (!a) break;
        if (p->arg)
            snprintf(a, len, "--%s=%s", o->name, p->arg);
        else
            snprintf(a, len, "--%s", o->name);
        out[n++] = a;
    }
    if (c == CLI_OPT_END) return (int)n;
    while (n)
        free(out[--n]);
    return -1;
}
