#include "config.h"
#include "src/base/util.h"
#include <sfb/version.h>

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The last detailed message of this thread and the code it was recorded
 * for: a lookup by code (sfb_error_message) never returns a message that
 * belongs to another failure, whatever path returned the code. */
static _Thread_local char last_error[1024];
static _Thread_local int last_code;

static sfb_log_fn log_fn = sfb_log_stderr;
static void *log_user;
static enum sfb_log_level log_max = SFB_LOG_WARN;
static int log_rank = -1;

static const char *(*names_fn)(int code);
static int names_lo, names_hi;

void sfb__error_names_register(int lo, int hi, const char *(*fn)(int code))
{
    names_lo = lo;
    names_hi = hi;
    names_fn = fn;
}

const char *sfb_strerror(int code)
{
    if (code < 0) code = -code;
    if (code == 0) return "success";
    switch (code) {
#define SFB_ERR_CASE(name, off, str)                                            \
    case name:                                                                 \
        return str;
        SFB_ERRORS(SFB_ERR_CASE)
#undef SFB_ERR_CASE
    default:
        break;
    }
    /* Codes of a higher layer (libfabric's, registered by src/transport). */
    if (names_fn && code >= names_lo && code < names_hi) {
        const char *s = names_fn(code);
        if (s) return s;
    }
    /* strerror() is not thread-safe everywhere; strerrordesc_np is. */
    const char *s = strerrordesc_np(code);
    return s ? s : "unknown error";
}

const char *sfb_last_error(void)
{
    return last_error;
}

const char *sfb_error_message(int code)
{
    if (code > 0) code = -code;
    if (code != 0 && code == last_code && last_error[0]) return last_error;
    return sfb_strerror(code);
}

int sfb__error(int code, const char *fmt, ...)
{
    /* formatted aside first: an argument may be the old message itself
     * (a caller wrapping it: "matrix 1: %s", sfb_last_error()) */
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, strlen(msg) + 1);
    last_code = code > 0 ? -code : code;
    return code;
}

void sfb__clear_error(void)
{
    last_error[0] = '\0';
    last_code = 0;
}

void sfb_log_stderr(void *user, enum sfb_log_level level, int rank, const char *msg)
{
    static const char *const name[] = {"error", "warning", "info", "debug"};
    const char *lv = (unsigned)level < 4 ? name[level] : "log";
    (void)user;
    if (rank >= 0)
        fprintf(stderr, "sfb[%d]: %s: %s\n", rank, lv, msg);
    else
        fprintf(stderr, "sfb: %s: %s\n", lv, msg);
}

void sfb_log_set(sfb_log_fn fn, void *user, enum sfb_log_level max_level)
{
    log_fn = fn;
    log_user = user;
    log_max = max_level;
}

void sfb_log_set_rank(int rank)
{
    log_rank = rank;
}

int sfb__log_rank(void)
{
    return log_rank;
}

int sfb__log_enabled(enum sfb_log_level level)
{
    return log_fn && level <= log_max;
}

void sfb__log(enum sfb_log_level level, const char *fmt, ...)
{
    if (!sfb__log_enabled(level)) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_fn(log_user, level, log_rank, msg);
}

const char *sfb_version(void)
{
    return SFB_VERSION_STRING;
}

double sfb__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

unsigned sfb__cpus_allowed(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (unsigned)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

unsigned long long sfb__mapped_mib(void)
{
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu", &pages) != 1) pages = 0;
        fclose(f);
    }
    return pages * (unsigned long long)sysconf(_SC_PAGESIZE) >> 20;
}

void sfb__deadline(struct timespec *ts, double sec)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    double s = (double)ts->tv_sec + 1e-9 * (double)ts->tv_nsec + sec;
    ts->tv_sec = (time_t)s;
    ts->tv_nsec = (long)((s - (double)ts->tv_sec) * 1e9);
}

void sfb__sleep(double sec)
{
    if (!(sec > 0)) return;
    struct timespec ts = {(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int sfb__parse_env_u64(const char *name, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    uint64_t v = 0;
    int ok = s && *s;
    for (const char *p = s; ok && *p; p++) {
        unsigned d = (unsigned)(*p - '0');
        ok = d <= 9 && v <= (UINT64_MAX - d) / 10;
        v = v * 10 + d;
    }
    if (!ok || v < lo || v > hi)
        return sfb__error(-SFB_EUSAGE, "%s='%s': expected an integer in %llu..%llu", name,
                          s ? s : "", (unsigned long long)lo, (unsigned long long)hi);
    *out = v;
    return 0;
}

int sfb__check_version(const char *fn, const char *type, const char *defaults, uint32_t version,
                       uint32_t known, const uint8_t *reserved, size_t n)
{
    if (version != known)
        return sfb__error(-SFB_EVERSION, "%s: struct %s version %u, this library (sfb %s) knows "
                          "version %u: fill the structure with %s first", fn, type, version,
                          SFB_VERSION_STRING, known, defaults);
    for (size_t i = 0; i < n; i++)
        if (reserved[i])
            return sfb__error(-SFB_EVERSION, "%s: struct %s: reserved byte %zu is set (reserved "
                              "for fields of later versions; fill the structure with %s first)",
                              fn, type, i, defaults);
    return 0;
}

int sfb__check_size(const char *fn, const char *arg, const char *type, uint32_t size, size_t min)
{
    if (size < min)
        return sfb__error(-EINVAL, "%s: %s->size is %u, less than any struct %s (set it to "
                          "sizeof(struct %s), at least %zu)", fn, arg, size, type, type, min);
    return 0;
}

void sfb__sized_copy(void *dst, size_t dst_size, const void *src, size_t src_size)
{
    const size_t head = sizeof(uint32_t); /* the leading size stays */
    size_t n = SFB_MIN(dst_size, src_size);
    if (n > head) memcpy((char *)dst + head, (const char *)src + head, n - head);
    if (dst_size > n) memset((char *)dst + n, 0, dst_size - n);
}

int sfb__mul_size(size_t a, size_t b, size_t *out)
{
    if (__builtin_mul_overflow(a, b, out)) return -EOVERFLOW;
    return 0;
}

int sfb__reserve(void **buf, size_t *cap, size_t need)
{
    if (need <= *cap && *buf) return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need) {
        if (n > SIZE_MAX / 2) {
            n = need;
            break;
        }
        n *= 2;
    }
    void *p = realloc(*buf, n);
    if (!p) return -ENOMEM;
    *buf = p;
    *cap = n;
    return 0;
}
