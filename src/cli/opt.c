/* The option-table parser (src/cli/opt.h). getopt_long is not used: it
 * accepts any unique prefix of a long option, so a typo could silently
 * select a different setting, and its state is global. */
#include "src/cli/opt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    for (size_t j = 0; j <= lb; j++) row[j] = j;
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

const struct cli_opt *cli_opt_closest(const struct cli_opt *table, const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > MAX_NAME) return NULL;
    const struct cli_opt *best = NULL;
    size_t best_d = (size_t)-1;
    for (const struct cli_opt *o = table; o->name; o++) {
        if (strlen(o->name) > MAX_NAME) continue;
        size_t d = distance(name, o->name);
        /* an abbreviation is the likeliest meaning, however short */
        if (len >= 2 && !strncmp(o->name, name, len)) d = d < 1 ? d : 1;
        if (d < best_d) {
            best_d = d;
            best = o;
        }
    }
    /* a third of the letters wrong (at least 2) is still a likely typo */
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    return best_d <= limit ? best : NULL;
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

/* The next character of a short-option cluster. */
static int next_short(struct cli_optparse *p, const struct cli_opt *table)
{
    char c = *p->cluster++;
    const struct cli_opt *o = table;
    while (o->name && o->short_name != c) o++;
    if (!o->name) {
        char shown[3] = {'-', c, '\0'};
        p->cluster = NULL;
        return unknown(p, table, shown, NULL);
    }
    snprintf(p->spelled, sizeof p->spelled, "-%c", c);
    p->arg = NULL;
    if (o->has_arg) {
        if (*p->cluster) p->arg = p->cluster;
        else if (p->i < p->argc) p->arg = p->argv[p->i++];
        p->cluster = NULL;
        if (!p->arg) return needs_value(p);
    } else if (!*p->cluster) {
        p->cluster = NULL;
    }
    return o->id;
}

int cli_opt_next(struct cli_optparse *p, const struct cli_opt *table)
{
    if (p->cluster) return next_short(p, table);
    if (p->i >= p->argc) return CLI_OPT_END;
    const char *a = p->argv[p->i++];
    if (!strcmp(a, "--")) {
        if (p->i >= p->argc) return CLI_OPT_END;
        a = p->argv[p->i];
        goto positional;
    }
    if (a[0] == '-' && a[1] == '-') {
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct cli_opt *o = table;
        while (o->name && !(strlen(o->name) == len && !strncmp(o->name, name, len))) o++;
        if (!o->name) {
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
        if (!o->has_arg) {
            if (eq) {
                fprintf(stderr, "sfb %s: %s takes no value (see sfb %s --help)\n", p->cmd,
                        p->spelled, p->cmd);
                return CLI_OPT_ERR;
            }
            return o->id;
        }
        if (eq) p->arg = eq + 1;
        else if (p->i < p->argc) p->arg = p->argv[p->i++];
        if (!p->arg) return needs_value(p);
        return o->id;
    }
    if (a[0] == '-' && a[1] != '\0') {
        p->cluster = a + 1;
        return next_short(p, table);
    }
positional:
    fprintf(stderr, "sfb %s: unexpected argument \"%s\" (see sfb %s --help)\n", p->cmd, a, p->cmd);
    return CLI_OPT_ERR;
}

int cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
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
