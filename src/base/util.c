/* util.h's helpers other than errors and logging (error.c): time and
 * sleeping, CPUs and mapped memory, environment numbers, the public
 * structures' version and size checks, checked sizes and growing buffers. */
#include "config.h"
#include "src/base/util.h"
#include <sfb/version.h>

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double sfb__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double sfb__gap(double *last, double now, double slack)
{
    double gap = *last > 0 ? now - *last : 0;
    *last = now;
    return gap > slack ? gap : 0;
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
