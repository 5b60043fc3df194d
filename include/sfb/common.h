/* sfb — common definitions: export macro, error codes, logging.
 *
 * Every function returns 0 or a negative errno-style code. Codes in the errno
 * range are the system's; libfabric's -FI_E* codes pass through unchanged;
 * sfb's own codes start at SFB_ERR_BASE. sfb_strerror() names any of them.
 *
 * Pointer arguments are checked on entry (unless documented as optional): a
 * NULL one makes a function returning int fail with -EINVAL and the message
 * "FUNCTION: argument 'NAME' is NULL"; a getter returns what it returns for
 * an out-of-range argument (0, NULL, UINT32_MAX or NaN) and records that
 * message for -EINVAL; close and free functions, like free(), and
 * *_default_settings(NULL) do nothing.
 */
#ifndef SFB_COMMON_H
#define SFB_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SFB_BUILDING)
#define SFB_API __attribute__((visibility("default")))
#else
#define SFB_API
#endif

/* sfb's own error codes (negated when returned). One table generates the
 * enum and the strings of sfb_strerror(). */
#define SFB_ERR_BASE 4096
#define SFB_ERRORS(X)                                                           \
    X(SFB_EFORMAT, 0, "malformed input")                                        \
    X(SFB_ECHECKSUM, 1, "checksum mismatch")                                    \
    X(SFB_ESHAPE, 2, "shape mismatch")                                          \
    X(SFB_EVERSION, 3, "unsupported version")                                   \
    X(SFB_EJOBKEY, 4, "wrong job key")                                          \
    X(SFB_EPEER, 5, "peer failed or went silent")                               \
    X(SFB_EUSAGE, 6, "invalid usage")                                           \
    X(SFB_ENOTIMPL, 7, "not implemented in this version")                       \
    X(SFB_ETRUNC, 8, "truncated input")                                         \
    X(SFB_ECONFIG, 9, "configuration mismatch")                                 \
    X(SFB_EABORT, 10, "job aborted")

enum sfb_error_code {
#define SFB_ERR_ENUM(name, off, str) name = SFB_ERR_BASE + (off),
    SFB_ERRORS(SFB_ERR_ENUM)
#undef SFB_ERR_ENUM
};

/* A short description of any code returned by sfb (sign ignored). Thread-safe;
 * the string is static. */
SFB_API const char *sfb_strerror(int code);

/* The detailed message of the last failure in the calling thread (for example
 * "train.libsvm:12:7: index 3 not greater than previous index 5"), or "" if
 * none was recorded. Every public function that can fail clears it on entry;
 * valid until the next sfb call in this thread. */
SFB_API const char *sfb_last_error(void);

/* The detailed message of `code` (sign ignored), a code an sfb call just
 * returned: the calling thread's last message if it was recorded for this
 * code, else sfb_strerror(code). Never the message of another failure, so
 * this, not sfb_last_error(), is what to report (or send to peers). The
 * string is valid until the next sfb call in this thread. */
SFB_API const char *sfb_error_message(int code);

/* Log levels, most severe first. */
enum sfb_log_level {
    SFB_LOG_ERROR = 0,
    SFB_LOG_WARN = 1,
    SFB_LOG_INFO = 2,
    SFB_LOG_DEBUG = 3,
};

/* Log sink. `rank` is the calling process's rank or -1 before it is known.
 * May be called from any sfb thread, concurrently. */
typedef void (*sfb_log_fn)(void *user, enum sfb_log_level level, int rank, const char *msg);

/* Installs the log sink and the most verbose level passed to it (NULL: drop
 * every message). The default sink is sfb_log_stderr with warnings and
 * errors, so a program that installs none still hears, for example, why a
 * peer's update was refused. Call before starting any sfb thread. */
SFB_API void sfb_log_set(sfb_log_fn fn, void *user, enum sfb_log_level max_level);

/* A sink writing each message as one line to stderr: "sfb[RANK]: LEVEL:
 * message" ("sfb: LEVEL: message" before the rank is known), one fprintf
 * per message so that threads' lines do not mix. `user` is unused. */
SFB_API void sfb_log_stderr(void *user, enum sfb_log_level level, int rank, const char *msg);

/* Sets the rank shown with every message of this process. */
SFB_API void sfb_log_set_rank(int rank);

/* The loaded library's version string, e.g. "0.1.0" (<sfb/version.h> has
 * the headers' as SFB_VERSION_STRING and numbers). */
SFB_API const char *sfb_version(void);

#ifdef __cplusplus
}
#endif
#endif
