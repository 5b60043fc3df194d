/* Set-up and teardown timeline of one worker process (src/base/timeline.h). */
#include "config.h"
#include "src/base/timeline.h"
#include "src/base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double at[SFB__PH_COUNT];
static int origins_taken, from_launcher;

static const char *const names[SFB__PH_COUNT] = {
    [SFB__PH_LAUNCH] = "launch",   [SFB__PH_EXEC] = "exec",
    [SFB__PH_MAIN] = "main",       [SFB__PH_BOOT] = "bootstrap",
    [SFB__PH_HOSTS] = "hosts",     [SFB__PH_FABRIC] = "fabric",
    [SFB__PH_NAMES] = "names",     [SFB__PH_READY] = "ready",
    [SFB__PH_DATA] = "data",       [SFB__PH_AGREE] = "agree",
    [SFB__PH_SHAPES] = "shapes",   [SFB__PH_ENGINE] = "engine",
    [SFB__PH_FIRST_CLOCK] = "first_clock",
    [SFB__PH_LAST_CLOCK] = "last_clock", [SFB__PH_DRAINED] = "drain",
    [SFB__PH_FLUSHED] = "flush",   [SFB__PH_BYE] = "bye",
    [SFB__PH_FINAL] = "final_barrier", [SFB__PH_REPORTED] = "report",
    [SFB__PH_CLOSED] = "close",
};

const char *sfb__phase_name(enum sfb__phase ph)
{
    return (unsigned)ph < SFB__PH_COUNT ? names[ph] : "?";
}

/* This process's start on CLOCK_MONOTONIC: /proc/self/stat's starttime
 * counts clock ticks on CLOCK_BOOTTIME. 0 where it cannot be read. */
static double process_start(void)
{
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return 0;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p) return 0;
    unsigned long long start = 0;
    /* after ")": field 3 (state) ... field 22 (starttime) */
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                      "%*d %llu",
               &start) != 1)
        return 0;
    long hz = sysconf(_SC_CLK_TCK);
    struct timespec b, m;
    if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &b) || clock_gettime(CLOCK_MONOTONIC, &m))
        return 0;
    double boot_minus_mono = (double)(b.tv_sec - m.tv_sec) + 1e-9 * (double)(b.tv_nsec - m.tv_nsec);
    return (double)start / (double)hz - boot_minus_mono;
}

static void take_origins(void)
{
    if (origins_taken) return;
    origins_taken = 1;
    at[SFB__PH_EXEC] = process_start();
    const char *s = getenv(SFB__LAUNCH_T0_ENV);
    char *end = NULL;
    double t0 = s && *s ? strtod(s, &end) : 0;
    /* a launcher's stamp from before this process started, or none */
    from_launcher = end && *end == 0 && t0 > 0 && t0 <= sfb__now();
    at[SFB__PH_LAUNCH] = from_launcher ? t0 : at[SFB__PH_EXEC];
    /* the start is whole clock ticks: never before the fork that made it */
    if (at[SFB__PH_EXEC] < at[SFB__PH_LAUNCH]) at[SFB__PH_EXEC] = at[SFB__PH_LAUNCH];
}

void sfb__phase_reset(void)
{
    memset(at, 0, sizeof at);
    origins_taken = 0;
    take_origins();
}

static int prev_marked(enum sfb__phase ph)
{
    int p = (int)ph - 1;
    while (p >= 0 && at[p] == 0) p--;
    return p;
}

void sfb__phase_mark(enum sfb__phase ph)
{
    if ((unsigned)ph >= SFB__PH_COUNT) return;
    take_origins();
    at[ph] = sfb__now();
    int p = prev_marked(ph);
    if (p >= 0) SFB_LOG_D("timeline: %s %.3f s (%.3f s since launch)", names[ph], at[ph] - at[p],
                          at[SFB__PH_LAUNCH] ? at[ph] - at[SFB__PH_LAUNCH] : 0.0);
}

int sfb__phase_from_launcher(void)
{
    take_origins();
    return from_launcher;
}

double sfb__phase_at(enum sfb__phase ph)
{
    if ((unsigned)ph >= SFB__PH_COUNT) return 0;
    take_origins();
    return at[ph];
}

double sfb__phase_span(enum sfb__phase from, enum sfb__phase to)
{
    double a = sfb__phase_at(from), b = sfb__phase_at(to);
    return a > 0 && b > 0 ? b - a : -1;
}

char *sfb__phase_json(enum sfb__phase from, enum sfb__phase to, char *buf, size_t len)
{
    take_origins();
    size_t used = 0;
    if (len) buf[0] = 0;
    for (int ph = (int)from; ph <= (int)to && ph < SFB__PH_COUNT; ph++) {
        int p = prev_marked((enum sfb__phase)ph);
        if (at[ph] == 0 || p < 0) continue;
        int n = snprintf(buf + used, len > used ? len - used : 0, "%s\"%s\":%.6f",
                         used ? "," : "", names[ph], at[ph] - at[p]);
        if (n < 0 || (size_t)n >= len - used) {
            if (len) buf[used] = 0; /* whole members only */
            break;
        }
        used += (size_t)n;
    }
    return buf;
}
