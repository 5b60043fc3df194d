#include "config.h"
#include "src/train/metrics.h"
#include "src/base/util.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/resource.h>

/* pattern with each %r (16 at most) replaced by `r`. */
static char *path_for(const char *pattern, const char *r)
{
    size_t n = strlen(pattern);
    char *out = malloc(n + 16 * strlen(r) + 1);
    if (!out) return NULL;
    char *o = out;
    int reps = 0;
    for (const char *p = pattern; *p; p++) {
        if (p[0] == '%' && p[1] == 'r' && reps < 16) {
            o += sprintf(o, "%s", r);
            p++;
            reps++;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return out;
}

char *sfb__path_for_rank(const char *pattern, uint32_t rank)
{
    char r[16];
    snprintf(r, sizeof r, "%u", rank);
    return path_for(pattern, r);
}

static int open_path(struct sfb__metrics *m, char *path);

int sfb__metrics_open_joined(struct sfb__metrics *m, const char *pattern, uint32_t rank,
                             int64_t clock)
{
    memset(m, 0, sizeof *m);
    m->rank = rank;
    if (!pattern) return 0;
    char r[48];
    snprintf(r, sizeof r, "%u.joined-%lld", rank, (long long)clock);
    return open_path(m, path_for(pattern, r));
}

int sfb__metrics_open(struct sfb__metrics *m, const char *pattern, uint32_t rank)
{
    memset(m, 0, sizeof *m);
    m->rank = rank;
    if (!pattern) return 0;
    return open_path(m, sfb__path_for_rank(pattern, rank));
}

static int open_path(struct sfb__metrics *m, char *path)
{
    m->path = path;
    if (!m->path) return sfb__error(-ENOMEM, "out of memory");
    m->f = fopen(m->path, "w");
    if (!m->f) {
        int e = errno;
        sfb__error(-e, "%s: cannot open metrics file: %s", m->path, strerror(e));
        free(m->path);
        m->path = NULL;
        return -e;
    }
    setvbuf(m->f, NULL, _IOFBF, 1 << 16);
    return 0;
}

const char *sfb__json_num(char buf[32], double v)
{
    if (isfinite(v))
        snprintf(buf, 32, "%.6g", v);
    else
        snprintf(buf, 32, "null");
    return buf;
}

static void put_num(FILE *f, const char *key, double v)
{
    char b[32];
    fprintf(f, ",\"%s\":%s", key, sfb__json_num(b, v));
}

void sfb__metrics_clock(struct sfb__metrics *m, const struct sfb__clock_metrics *c)
{
    if (!m->f) return;
    FILE *f = m->f;
    fprintf(f, "{\"rank\":%u,\"clock\":%lld,\"epoch\":%u", m->rank, (long long)c->clock,
            c->epoch);
    put_num(f, "wall", c->wall);
    fprintf(f, ",\"t_begin\":%.6f,\"t_publish\":%.6f", c->t_begin, c->t_publish);
    put_num(f, "compute_s", c->compute_s);
    put_num(f, "wait_s", c->wait_s);
    put_num(f, "budget_wait_s", c->budget_wait_s);
    fprintf(f, ",\"queued_bytes\":%llu", (unsigned long long)c->queued_bytes);
    put_num(f, "apply_s", c->apply_s);
    fprintf(f,
            ",\"bytes_sent\":%llu,\"bytes_recv\":%llu,\"msgs_sent\":%llu,\"msgs_recv\":%llu,"
            "\"staleness\":%lld,\"min_applied\":%lld,\"applied_early\":%llu",
            (unsigned long long)c->bytes_sent, (unsigned long long)c->bytes_recv,
            (unsigned long long)c->msgs_sent, (unsigned long long)c->msgs_recv,
            (long long)c->staleness, (long long)c->min_applied,
            (unsigned long long)c->applied_early);
    fprintf(f, ",\"data_msgs\":%llu,\"data_bytes\":%llu", (unsigned long long)c->data_msgs,
            (unsigned long long)c->data_bytes);
    put_num(f, "objective", c->objective);
    put_num(f, "samples_per_s", c->samples_per_s);
    put_num(f, "lr", c->lr);
    fputs("}\n", f);
}

void sfb__metrics_event(struct sfb__metrics *m, const char *name, const char *fields, ...)
{
    if (!m->f) return;
    fprintf(m->f, "{\"event\":\"%s\",\"rank\":%u,", name, m->rank);
    va_list ap;
    va_start(ap, fields);
    vfprintf(m->f, fields, ap);
    va_end(ap);
    fputs("}\n", m->f);
    /* events are rare and worth having on disk at once; a failure here is
     * remembered with its errno (ferror() keeps no errno) for close */
    if (fflush(m->f) != 0 && !m->err) m->err = errno ? errno : EIO;
}

int sfb__metrics_close(struct sfb__metrics *m)
{
    int ret = 0;
    if (m->f) {
        /* Every way a buffered write can fail: an earlier flush, this one,
         * a sticky stream error, the close. The first errno wins. */
        int e = m->err;
        if (fflush(m->f) != 0 && !e) e = errno ? errno : EIO;
        if (ferror(m->f) && !e) e = EIO;
        if (fclose(m->f) != 0 && !e) e = errno ? errno : EIO;
        if (e) ret = sfb__error(-e, "%s: cannot write the metrics: %s", m->path, strerror(e));
    }
    free(m->path);
    memset(m, 0, sizeof *m);
    return ret;
}

/* Pss from /proc/self/smaps_rollup: shared pages (peers' shm regions, a
 * data set mapped by every rank of the host) divided among the processes
 * mapping them, so the ranks' sum is the host's real cost. */
uint64_t sfb__pss_bytes(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "re");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "Pss: %llu kB", &kb) == 1;
    fclose(f);
    return found ? (uint64_t)kb * 1024u : 0;
}

uint64_t sfb__peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0 || ru.ru_maxrss < 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* KiB on Linux */
}
