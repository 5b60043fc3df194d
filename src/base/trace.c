/* The training timeline's recorder (src/base/trace.h). */
#include "config.h"
#include "src/base/trace.h"
#include "src/base/util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* beyond this many events a rank drops the rest (and says so): ~64 B each */
#define TRACE_MAX_EVENTS (4u << 20)

struct ev {
    double ts, dur;
    const char *name; /* a literal, or `owned` */
    char *owned;
    int64_t clock;
    int32_t matrix, peer;
    uint64_t bytes;
    uint8_t track;
};

int sfb__trace_enabled;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ev *evs;
static size_t n_evs, cap_evs;
static uint64_t dropped;
static uint32_t trace_rank;
static char path[4096];

double sfb__trace_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void free_events(void)
{
    for (size_t i = 0; i < n_evs; i++) free(evs[i].owned);
    free(evs);
    evs = NULL;
    n_evs = cap_evs = 0;
    dropped = 0;
}

int sfb__trace_open(const char *pattern, uint32_t rank)
{
    char rs[16];
    snprintf(rs, sizeof rs, "%u", rank);
    const char *at = strstr(pattern, "%r");
    int w = at ? snprintf(path, sizeof path, "%.*s%s%s", (int)(at - pattern), pattern, rs, at + 2)
               : snprintf(path, sizeof path, "%s.%s", pattern, rs);
    if (w < 0 || (size_t)w >= sizeof path)
        return sfb__error(-ENAMETOOLONG, "SFB_TIMELINE=%s: the path is too long", pattern);
    pthread_mutex_lock(&lock);
    free_events();
    trace_rank = rank;
    pthread_mutex_unlock(&lock);
    __atomic_store_n(&sfb__trace_enabled, 1, __ATOMIC_RELEASE);
    return 0;
}

static void add(const struct ev *e)
{
    pthread_mutex_lock(&lock);
    if (n_evs == cap_evs && cap_evs < TRACE_MAX_EVENTS) {
        size_t cap = cap_evs ? 2 * cap_evs : 4096;
        struct ev *p = realloc(evs, cap * sizeof *p);
        if (p) {
            evs = p;
            cap_evs = cap;
        }
    }
    if (n_evs < cap_evs) {
        evs[n_evs++] = *e;
    } else {
        dropped++;
        free(e->owned);
    }
    pthread_mutex_unlock(&lock);
}

void sfb__trace_span(enum sfb__trace_track track, const char *name, double t0_us, int64_t clock,
                     int32_t matrix, int32_t peer, uint64_t bytes)
{
    if (!sfb__trace_on()) return;
    double t1 = sfb__trace_us();
    struct ev e = {t0_us, t1 - t0_us, name, NULL, clock, matrix, peer, bytes, (uint8_t)track};
    add(&e);
}

void sfb__trace_span_copy(enum sfb__trace_track track, const char *name, double t0_us,
                          double t1_us, int64_t clock)
{
    if (!sfb__trace_on()) return;
    char *own = strdup(name ? name : "");
    if (!own) return;
    struct ev e = {t0_us, t1_us - t0_us, own, own, clock, -1, -1, 0, (uint8_t)track};
    add(&e);
}

/* A name as a JSON string's body (a framework's names may hold anything). */
static void put_name(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

int sfb__trace_close(void)
{
    if (!sfb__trace_on()) return 0;
    __atomic_store_n(&sfb__trace_enabled, 0, __ATOMIC_RELEASE);
    pthread_mutex_lock(&lock);
    int ret = 0;
    FILE *f = fopen(path, "w");
    if (!f) {
        ret = sfb__error(-errno, "SFB_TIMELINE: cannot create %s: %s", path, strerror(errno));
        goto out;
    }
    static const char *const tracks[] = {"compute", "network", "user"};
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"args\":{\"name\":\"rank %u\"}}",
            trace_rank, trace_rank);
    for (int t = 0; t < 3; t++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%d,\"args\":"
                   "{\"name\":\"%s\"}}", trace_rank, t, tracks[t]);
    for (size_t i = 0; i < n_evs; i++) {
        const struct ev *e = &evs[i];
        fprintf(f, ",\n{\"name\":\"");
        put_name(f, e->name);
        fprintf(f, "\",\"ph\":\"X\",\"pid\":%u,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{"
                   "\"clock\":%" PRId64 ",\"matrix\":%d,\"peer\":%d,\"bytes\":%" PRIu64 "}}",
                trace_rank, e->track, e->ts, e->dur, e->clock, e->matrix, e->peer, e->bytes);
    }
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%u,\"dropped\":%" PRIu64
               "}}\n", trace_rank, dropped);
    if (ferror(f)) ret = -EIO;
    if (fclose(f) != 0 && !ret) ret = -errno;
    if (ret) sfb__error(ret, "SFB_TIMELINE: writing %s failed: %s", path, strerror(-ret));
    else if (dropped)
        SFB_LOG_W("SFB_TIMELINE: %s holds the first %zu events; %" PRIu64 " more were dropped",
                  path, n_evs, dropped);
out:
    free_events();
    pthread_mutex_unlock(&lock);
    return ret;
}
