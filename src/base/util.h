/* Internal helpers shared by every module: error recording and logging
 * (error.c), time, environment numbers, version and size checks, checked
 * allocation (util.c). */
#ifndef SFB_SRC_UTIL_H
#define SFB_SRC_UTIL_H

#include <sfb/common.h>

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define SFB_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Records a detailed message for sfb_last_error() and returns `code` (which
 * must be negative), so call sites read `return sfb__error(-EINVAL, ...)`. */
int sfb__error(int code, const char *fmt, ...) SFB_PRINTF(2, 3);
void sfb__clear_error(void);

/* First lines of a public function (rule 13: validate before anything):
 * SFB_ENTER() clears this thread's message, so none of an earlier call can
 * be reported for this one; SFB_ARG(p) fails with -EINVAL naming the
 * argument; SFB_ARG_OR(p, v) records that message and returns v (getters;
 * `v` empty in void functions). */
#define SFB_ENTER() sfb__clear_error()
#define SFB_ARG(p)                                                              \
    do {                                                                       \
        if (!(p)) return sfb__error(-EINVAL, "%s: argument '%s' is NULL", __func__, #p); \
    } while (0)
#define SFB_ARG_OR(p, v)                                                        \
    do {                                                                       \
        if (!(p)) {                                                            \
            sfb__error(-EINVAL, "%s: argument '%s' is NULL", __func__, #p);    \
            return v;                                                          \
        }                                                                      \
    } while (0)

void sfb__log(enum sfb_log_level level, const char *fmt, ...) SFB_PRINTF(2, 3);
int sfb__log_enabled(enum sfb_log_level level);
int sfb__log_rank(void);

#define SFB_LOG_E(...) sfb__log(SFB_LOG_ERROR, __VA_ARGS__)
#define SFB_LOG_W(...) sfb__log(SFB_LOG_WARN, __VA_ARGS__)
#define SFB_LOG_I(...) sfb__log(SFB_LOG_INFO, __VA_ARGS__)
#define SFB_LOG_D(...)                                                          \
    do {                                                                       \
        if (sfb__log_enabled(SFB_LOG_DEBUG))                                   \
            sfb__log(SFB_LOG_DEBUG, __VA_ARGS__);                              \
    } while (0)

/* Monotonic clock in seconds. */
double sfb__now(void);
/* A periodic check's own gap: `now` minus its previous run (*last, then set
 * to now; 0 on the first run) when that exceeds `slack`, else 0. A check
 * that ran that late was not running meanwhile (the process stopped: Ctrl-Z
 * and fg, a debugger, Slurm's suspend, a paused VM), so what it watches
 * cannot be blamed for the time: liveness and timeouts count from now. */
double sfb__gap(double *last, double now, double slack);
/* Sleeps `sec` seconds (signals do not cut it short); <= 0: returns. */
void sfb__sleep(double sec);
/* The monotonic time `sec` seconds from now, for pthread_cond_timedwait on
 * a condition variable set to CLOCK_MONOTONIC. */
struct timespec;
void sfb__deadline(struct timespec *ts, double sec);

/* CPUs this process may run on (its affinity mask; else the online CPUs;
 * at least 1). */
unsigned sfb__cpus_allowed(void);

/* The address space this process maps now, in MiB (/proc/self/statm; 0 if
 * unreadable). */
unsigned long long sfb__mapped_mib(void);

/* A whole number read from the environment variable `name` (its value `s`):
 * decimal digits only (no sign, no blank), within lo..hi. 0 with *out set,
 * or -SFB_EUSAGE naming the variable, its value and the range (also when
 * `s` is NULL or empty). */
int sfb__parse_env_u64(const char *name, const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* Size arithmetic that reports overflow instead of wrapping (untrusted sizes
 * come from files and the network). Return 0 on success, -EOVERFLOW. */
int sfb__mul_size(size_t a, size_t b, size_t *out);

/* Grows *buf to hold at least `need` bytes (never shrinks). Amortised: keeps
 * the steady state free of allocations. Returns 0 or -ENOMEM. */
int sfb__reserve(void **buf, size_t *cap, size_t need);

/* Lets a higher layer name the error codes of a range it owns, for
 * sfb_strerror: codes in [lo, hi) (positive) go to fn, which returns NULL for
 * one it does not know. The network layer registers libfabric's codes this
 * way (src/transport/fi_errors.c) when the library is loaded, so the base layer
 * knows nothing of libfabric. One namer; a later call replaces it. Call
 * before threads start (a load-time constructor does). */
void sfb__error_names_register(int lo, int hi, const char *(*fn)(int code));

/* The versioned public structures (docs/api.md, "What is exported, and for
 * whom"). Settings carry `version` and reserved bytes: 0 when `version` is
 * `known` and every reserved byte is zero, else -SFB_EVERSION naming the
 * function `fn`, the structure `type` and the function that fills it
 * (`defaults`). */
int sfb__check_version(const char *fn, const char *type, const char *defaults, uint32_t version,
                       uint32_t known, const uint8_t *reserved, size_t n);
#define SFB_CHECK_VERSION(s, type, defaults, known)                                  \
    sfb__check_version(__func__, type, defaults, (s)->version, known, (s)->reserved, \
                       sizeof (s)->reserved)
/* Results the caller hands in to be filled lead with `uint32_t size`, the
 * caller's sizeof: 0 when `size` is at least `min` (the end of the first
 * version's last field), else -EINVAL naming fn, arg and type. A larger size
 * (a caller built against newer headers) is fine: the library writes the
 * fields it knows. */
int sfb__check_size(const char *fn, const char *arg, const char *type, uint32_t size, size_t min);
#define SFB_CHECK_SIZE(p, type, min) sfb__check_size(__func__, #p, type, (p)->size, min)
/* The end of `field` in `type`: the first version's size of a sized result
 * ends with its last field. */
#define SFB_END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
/* Copies the fields a sized result of `dst_size` bytes and one of
 * `src_size` bytes have in common, the leading size excepted: the library's
 * full copy out to the caller's (dst_size: the caller's size), or in, to
 * accumulate into (then the library's copy is zeroed first where the
 * caller's ends). */
void sfb__sized_copy(void *dst, size_t dst_size, const void *src, size_t src_size);

#define SFB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SFB_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SFB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The signals whose disposition a library's handler may take over (print a
 * backtrace and exit(1)): the sfb command sets them to the default before
 * anything else (src/cli/main.c), libfabric's load keeps the process's
 * (src/transport/fi_lazy.c). An initializer: include <signal.h>. */
#define SFB_TAKEN_SIGNALS {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}

#endif
