/* The training timeline's recorder (src/base/trace.h). Its memory is kept
 * out of the process's heap: the events and the names of a framework's
 * spans live in pages of their own (mmap, reserved at open and touched as
 * they fill), the names interned. A strdup per span and a growing events
 * array among a framework's large tensors fragmented glibc's heap: with
 * sfb.torch's spans on, a Transformer's workers grew to 3.2 GB (0.9
 * without) and faulted 3 x the pages (20 % slower). */
#include "config.h"
#include "src/base/trace.h"
#include "src/base/util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* beyond this many events a rank drops the rest (and says so): 56 B each */
#define TRACE_MAX_EVENTS (4u << 20)
/* the framework's distinct span names (a power of two; half may be used)
 * and their bytes: past either, such spans are dropped (and counted) */
#define TRACE_NAME_SLOTS (1u << 16)
#define TRACE_NAME_BYTES (4u << 20)

struct ev {
    double ts, dur;
    const char *name; /* a literal, or an interned name */
    int64_t clock;
    int32_t matrix, peer;
    uint64_t bytes;
    uint8_t track;
};

int sfb__trace_enabled;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ev *evs;      /* TRACE_MAX_EVENTS reserved */
static char *name_bytes;    /* TRACE_NAME_BYTES reserved */
static const char **slots;  /* TRACE_NAME_SLOTS: the interned names, open addressing */
static size_t n_evs, n_names, name_used;
static uint64_t dropped;
static uint32_t trace_rank;
static char path[4096];

static void *reserve(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void release(void *p, size_t len)
{
    if (p) munmap(p, len);
}

double sfb__trace_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void free_events(void)
{
    release(evs, (size_t)TRACE_MAX_EVENTS * sizeof *evs);
    release(name_bytes, TRACE_NAME_BYTES);
    release(slots, (size_t)TRACE_NAME_SLOTS * sizeof *slots);
    evs = NULL;
    name_bytes = NULL;
    slots = NULL;
    n_evs = n_names = name_used = 0;
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
    /* the file is written at close: a directory it cannot be created in is
     * said now, not after the run */
    char dir[sizeof path];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = 0;
    if (access(slash ? dir : ".", W_OK | X_OK) != 0)
        return sfb__error(-errno, "SFB_TIMELINE=%s: cannot create %s: %s", pattern, path,
                          strerror(errno));
    pthread_mutex_lock(&lock);
    free_events();
    trace_rank = rank;
    evs = reserve((size_t)TRACE_MAX_EVENTS * sizeof *evs);
    name_bytes = reserve(TRACE_NAME_BYTES);
    slots = reserve((size_t)TRACE_NAME_SLOTS * sizeof *slots);
    int ok = evs && name_bytes && slots;
    if (!ok) free_events();
    pthread_mutex_unlock(&lock);
    if (!ok)
        return sfb__error(-ENOMEM, "SFB_TIMELINE=%s: cannot reserve the recorder's memory",
                          pattern);
    __atomic_store_n(&sfb__trace_enabled, 1, __ATOMIC_RELEASE);
    return 0;
}

/* Under the lock: e recorded, or counted as dropped. */
static void add(const struct ev *e)
{
    if (evs && n_evs < TRACE_MAX_EVENTS && e->name) evs[n_evs++] = *e;
    else dropped++;
}

/* Under the lock: name's one copy in name_bytes, or NULL (full). */
static const char *intern(const char *name)
{
    if (!slots) return NULL;
    size_t len = strlen(name);
    size_t i = (size_t)XXH3_64bits(name, len) & (TRACE_NAME_SLOTS - 1);
    for (; slots[i]; i = (i + 1) & (TRACE_NAME_SLOTS - 1))
        if (!strcmp(slots[i], name)) return slots[i];
    if (n_names >= TRACE_NAME_SLOTS / 2 || len + 1 > TRACE_NAME_BYTES - name_used) return NULL;
    char *own = name_bytes + name_used;
    memcpy(own, name, len + 1);
    name_used += len + 1;
    n_names++;
    return slots[i] = own;
}

void sfb__trace_span(enum sfb__trace_track track, const char *name, double t0_us, int64_t clock,
                     int32_t matrix, int32_t peer, uint64_t bytes)
{
    if (!sfb__trace_on()) return;
    double t1 = sfb__trace_us();
    struct ev e = {t0_us, t1 - t0_us, name, clock, matrix, peer, bytes, (uint8_t)track};
    pthread_mutex_lock(&lock);
    add(&e);
    pthread_mutex_unlock(&lock);
}

void sfb__trace_span_copy(enum sfb__trace_track track, const char *name, double t0_us,
                          double t1_us, int64_t clock)
{
    if (!sfb__trace_on()) return;
    pthread_mutex_lock(&lock);
    struct ev e = {t0_us, t1_us - t0_us, intern(name ? name : ""), clock, -1, -1, 0,
                   (uint8_t)track};
    add(&e);
    pthread_mutex_unlock(&lock);
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
        SFB_LOG_W("SFB_TIMELINE: %s holds %zu events; %" PRIu64 " were dropped (past %u events "
                  "or %u distinct span names)", path, n_evs, dropped, TRACE_MAX_EVENTS,
                  TRACE_NAME_SLOTS / 2);
out:
    free_events();
    pthread_mutex_unlock(&lock);
    return ret;
}
