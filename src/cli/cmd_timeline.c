/* `sfb timeline FILE...`: the training timeline's files (SFB_TIMELINE, one
 * per rank: src/base/trace.h) merged into one trace and each step accounted:
 *
 *   rank 0 step 12: 41.0 ms = compute 22.0 · apply 9.0 · network 6.0 · wait 4.0 (rank 2)
 *
 * A step t runs from the start of the job's wait for clock t to the start
 * of the wait for t + 1. wait: inside the job's waits and drains, less the
 * applies inside them, with the rank whose frame came last during the
 * longest of them; apply: rebuilding and adding updates; network: inside
 * publish (encoding, handing frames to the transport); compute: the rest
 * (the model's own work). Reads only the files sfb writes (one event per
 * line). */
#include "src/cli/cli.h"
#include "src/cli/optparse.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tev {
    double ts, dur;
    long long clock;
    int pid, tid, peer;
    char what; /* 'W' wait, 'w' drain, 'a' apply, 'p' publish, 'r' recv, 'u' other */
};

struct tl {
    struct tev *ev;
    size_t n, cap;
    FILE *merged;
    int first;
};

static int num(const char *line, const char *key, double *out)
{
    const char *p = strstr(line, key);
    if (!p) return -1;
    char *end;
    *out = strtod(p + strlen(key), &end);
    return end == p + strlen(key) ? -1 : 0;
}

/* One event line of a file: kept for the account, copied to the merge.
 * 1: an event line (every file SFB_TIMELINE writes has one: its rank's
 * process_name), 0: another line, -1: said on stderr. */
static int take_line(struct tl *t, const char *line, const char *file, long lineno)
{
    if (strncmp(line, "{\"name\":", 8) != 0) return 0;
    size_t len = strcspn(line, "\n");
    while (len && line[len - 1] == ',') len--;
    if (t->merged) {
        fprintf(t->merged, "%s%.*s", t->first ? "" : ",\n", (int)len, line);
        t->first = 0;
    }
    if (!strstr(line, "\"ph\":\"X\"")) return 1;
    double ts, dur, pid, tid, clock, peer;
    if (num(line, "\"ts\":", &ts) || num(line, "\"dur\":", &dur) || num(line, "\"pid\":", &pid) ||
        num(line, "\"tid\":", &tid) || num(line, "\"clock\":", &clock) ||
        num(line, "\"peer\":", &peer)) {
        fprintf(stderr, "sfb timeline: %s:%ld: not an event of an SFB_TIMELINE file\n", file,
                lineno);
        return -1;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        struct tev *p = realloc(t->ev, cap * sizeof *p);
        if (!p) {
            fprintf(stderr, "sfb timeline: out of memory\n");
            return -1;
        }
        t->ev = p;
        t->cap = cap;
    }
    const char *name = line + 9;
    char what = !strncmp(name, "wait\"", 5)    ? 'W' /* a step's boundary */
                : !strncmp(name, "drain\"", 6)   ? 'w'
                : !strncmp(name, "apply\"", 6)   ? 'a'
                : !strncmp(name, "publish\"", 8) ? 'p'
                : !strncmp(name, "recv\"", 5)    ? 'r'
                                                 : 'u';
    t->ev[t->n++] = (struct tev){ts, dur, (long long)clock, (int)pid, (int)tid, (int)peer, what};
    return 1;
}

static int by_rank_time(const void *a, const void *b)
{
    const struct tev *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* The rank whose frame came last within [t0, t1] on rank `pid`. */
static int last_sender(const struct tev *ev, size_t lo, size_t hi, int pid, double t0, double t1)
{
    int who = -1;
    for (size_t i = lo; i < hi; i++)
        if (ev[i].pid == pid && ev[i].what == 'r' && ev[i].ts >= t0 && ev[i].ts <= t1)
            who = ev[i].peer;
    return who;
}

/* Rank events [lo, hi): one line per step, then the means. */
static void account(const struct tev *ev, size_t lo, size_t hi)
{
    int pid = ev[lo].pid;
    double sum[5] = {0};
    long steps = 0;
    size_t start = hi;
    for (size_t i = lo; i < hi; i++)
        if (ev[i].what == 'W' && ev[i].tid == 0) {
            start = i;
            break;
        }
    while (start < hi) {
        size_t next = hi;
        for (size_t i = start + 1; i < hi; i++)
            if (ev[i].what == 'W' && ev[i].tid == 0) {
                next = i;
                break;
            }
        if (next == hi) break;
        double t0 = ev[start].ts, t1 = ev[next].ts, total = (t1 - t0) / 1e3;
        double wait = 0, apply = 0, inwait = 0, net = 0, longest = 0, lw0 = 0, lw1 = 0;
        for (size_t i = start; i < next; i++) {
            const struct tev *e = &ev[i];
            if (e->tid != 0) continue;
            if (e->what == 'w' || e->what == 'W') {
                wait += e->dur;
                if (e->dur > longest) {
                    longest = e->dur;
                    lw0 = e->ts;
                    lw1 = e->ts + e->dur;
                }
            } else if (e->what == 'a') {
                apply += e->dur;
                for (size_t j = start; j < next; j++) /* inside a wait or drain? */
                    if ((ev[j].what == 'w' || ev[j].what == 'W') && ev[j].tid == 0 &&
                        e->ts >= ev[j].ts && e->ts + e->dur <= ev[j].ts + ev[j].dur) {
                        inwait += e->dur;
                        break;
                    }
            } else if (e->what == 'p') {
                net += e->dur;
            }
        }
        wait = (wait - inwait) / 1e3;
        apply /= 1e3;
        net /= 1e3;
        double compute = total - wait - apply - net;
        if (compute < 0) compute = 0;
        int who = longest > 0 ? last_sender(ev, lo, hi, pid, lw0, lw1) : -1;
        printf("rank %d step %lld: %.1f ms = compute %.1f · apply %.1f · network %.1f · wait %.1f",
               pid, ev[start].clock, total, compute, apply, net, wait);
        if (who >= 0 && wait > 0.05) printf(" (rank %d)", who);
        putchar('\n');
        double v[5] = {total, compute, apply, net, wait};
        for (int k = 0; k < 5; k++) sum[k] += v[k];
        steps++;
        start = next;
    }
    if (steps)
        printf("rank %d mean of %ld steps: %.2f ms = compute %.2f · apply %.2f · network %.2f · "
               "wait %.2f\n", pid, steps, sum[0] / steps, sum[1] / steps, sum[2] / steps,
               sum[3] / steps, sum[4] / steps);
    else
        printf("rank %d: no complete step (a step is the time between two waits)\n", pid);
}

struct timeline_opts {
    const char *output;
};

static const struct cli_opt timeline_table[] = {
    {.kind = CLI_STR, .name = "output", .short_name = 'o', .off = offsetof(struct timeline_opts, output),
     .size = sizeof(const char *), .metavar = "FILE",
     .help = "write the merged trace here (Chrome trace-event JSON\nfor Perfetto or chrome://tracing)",
     .umin = 1},
    {.kind = CLI_HELP, .name = "help", .short_name = 'h', .help = "this text"},
    {.kind = CLI_END},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: sfb timeline [-o FILE] FILE...\n"
               "\n"
               "Merges the per-rank files of a training timeline (SFB_TIMELINE=FILE, one\n"
               "per rank) into one trace (-o) and prints each step's account per rank:\n"
               "  rank 0 step 12: 41.0 ms = compute 22.0 · apply 9.0 · network 6.0 · wait 4.0 (rank 2)\n"
               "(wait: for peers' updates, with the rank whose frame came last; apply:\n"
               "rebuilding updates; network: publishing; compute: the rest), then the\n"
               "means. Options may come before, between or after the files; every\n"
               "argument after -- is a file.\n"
               "\n"
               "options:\n");
    cli_opt_help(f, timeline_table);
}

int cli_timeline(int argc, char **argv)
{
    struct timeline_opts o = {0};
    struct cli_optparse p;
    cli_opt_init(&p, argc, argv, "timeline");
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    if (!files) {
        fprintf(stderr, "sfb timeline: out of memory\n");
        return 1;
    }
    p.pos = files;
    int r = cli_opt_parse(&p, timeline_table, &o, NULL);
    if (r == CLI_OPT_HELP) {
        usage(stdout);
        free(files);
        return 0;
    }
    if (!r && !p.npos)
        fprintf(stderr, "sfb timeline: no file (the files SFB_TIMELINE wrote, one per rank; "
                        "see sfb timeline --help)\n");
    if (r || !p.npos) {
        free(files);
        return 2;
    }
    const char *out = o.output;
    struct tl t = {.first = 1};
    int rc = 0;
    if (out && !(t.merged = fopen(out, "w"))) {
        fprintf(stderr, "sfb timeline: cannot create %s: %s\n", out, strerror(errno));
        free(files);
        return 1;
    }
    if (t.merged) fprintf(t.merged, "{\"traceEvents\":[\n");
    char line[4096];
    int *rank_of = calloc((size_t)p.npos + 1, sizeof *rank_of); /* each file's rank */
    if (!rank_of) {
        fprintf(stderr, "sfb timeline: out of memory\n");
        rc = 1;
    }
    for (int i = 0; i < p.npos && !rc; i++) {
        FILE *f = fopen(files[i], "r");
        if (!f) {
            fprintf(stderr, "sfb timeline: cannot open %s: %s\n", files[i], strerror(errno));
            rc = 1;
            break;
        }
        long lineno = 0, events = 0;
        int whole = 0; /* its closing line: the file was written to its end */
        double pid = -1;
        while (!rc && fgets(line, sizeof line, f)) {
            lineno++;
            double v;
            if (pid < 0 && !strncmp(line, "{\"name\":", 8) && !num(line, "\"pid\":", &v)) pid = v;
            whole = !strncmp(line, "],\"displayTimeUnit\"", 19);
            int got = take_line(&t, line, files[i], lineno);
            if (got < 0) rc = 1;
            else events += got;
        }
        fclose(f);
        if (!rc && !events) {
            fprintf(stderr, "sfb timeline: %s: no trace events: not a file SFB_TIMELINE or "
                            "--timeline wrote\n", files[i]);
            rc = 1;
        } else if (!rc && !whole) {
            fprintf(stderr, "sfb timeline: %s: truncated after line %ld (no closing line): "
                            "not a whole file SFB_TIMELINE or --timeline wrote\n", files[i],
                    lineno);
            rc = 1;
        }
        rank_of[i] = (int)pid;
        for (int j = 0; j < i && !rc; j++)
            if (rank_of[j] == rank_of[i]) {
                fprintf(stderr, "sfb timeline: %s and %s both hold rank %d's timeline (give "
                                "one file per rank)\n", files[j], files[i], rank_of[i]);
                rc = 1;
            }
    }
    free(rank_of);
    if (t.merged) {
        fprintf(t.merged, "\n],\"displayTimeUnit\":\"ms\"}\n");
        if (fclose(t.merged) != 0 && !rc) {
            fprintf(stderr, "sfb timeline: writing %s failed: %s\n", out, strerror(errno));
            rc = 1;
        }
    }
    if (!rc && t.n) {
        qsort(t.ev, t.n, sizeof *t.ev, by_rank_time);
        for (size_t lo = 0, hi; lo < t.n; lo = hi) {
            for (hi = lo; hi < t.n && t.ev[hi].pid == t.ev[lo].pid; hi++) {}
            account(t.ev, lo, hi);
        }
    }
    free(t.ev);
    free(files);
    return rc;
}
