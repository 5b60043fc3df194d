/* Errors and logging: what include/sfb/common.h promises (sfb_last_error,
 * sfb_error_message, sfb_strerror, the log sink) and util.h's recorders
 * (sfb__error, sfb__log); sfb_version. The rest of util.h is util.c. */
#include "config.h"
#include "src/base/util.h"
#include <sfb/version.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
