/* libsvm/svmlight text reader into CSR float32.
 *
 * The file is streamed through one large buffer and every line is scanned by
 * hand: per-token scanf/strtod costs dominate otherwise (a Fashion-MNIST sized
 * file has ~25M feature pairs). Decimal values take Clinger's exact fast path
 * (mantissa < 2^53, |exp10| <= 22); only unusual spellings fall back to
 * strtod_l in the "C" locale.
 *
 * Every reject names file:line:column; the result is built in private arrays
 * and handed over only when the whole file (and every deferred check) passed,
 * so a failure leaves nothing behind. */
#include "config.h"
#include "src/data/libsvm.h"

#include "src/base/util.h"
#include "src/base/fileio.h"

#include <fcntl.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Largest raw index accepted: keeps d = max index + 1 within uint32. */
#define MAX_RAW_INDEX 0xfffffffeu
#define READ_CHUNK (4u << 20)

struct loc {
    uint64_t line; /* 0: not recorded */
    size_t col;
};

struct parser {
    const char *path;
    uint64_t line;
    const char *line_start;
    int eof_no_newline; /* current line is the last one and has no '\n' */

    int base;         /* -1 auto, 0, 1 */
    uint32_t dim;     /* 0: infer */
    uint32_t classes; /* 0: infer */

    int32_t *labels;
    uint64_t *row_ptr;
    uint32_t *col;
    float *val;
    size_t labels_cap, row_cap, col_cap, val_cap; /* bytes */
    uint64_t n, nnz;
    const struct sfb_shard *shard; /* keep only its rows (NULL: all) */
    uint64_t rows;                 /* samples parsed, kept or not */

    uint32_t max_raw;
    int any_index, saw_zero;
    struct loc zero_at;   /* first index 0 */
    struct loc eqdim_at;  /* first raw index == dim (auto base only) */
    uint32_t eqdim_raw;
    int32_t max_label;
    struct loc neg_at;    /* first label -1 */
    struct loc other_at;  /* first label outside {-1, +1} */
    int32_t other_label;

    locale_t c_locale;
};

static size_t col_of(const struct parser *p, const char *at)
{
    return (size_t)(at - p->line_start) + 1;
}

/* Copies a token for a message: at most 32 bytes, non-printables as '?'. */
static void token_str(const char *s, const char *end, char *buf, size_t cap)
{
    size_t n = 0;
    while (s < end && *s != ' ' && *s != '\t' && n + 4 < cap) {
        unsigned char c = (unsigned char)*s++;
        buf[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
        if (n >= 32 && s < end && *s != ' ' && *s != '\t') {
            memcpy(buf + n, "...", 3);
            n += 3;
            break;
        }
    }
    buf[n] = '\0';
}

static int fail_at(const struct parser *p, uint64_t line, size_t col, const char *fmt, ...)
    SFB_PRINTF(4, 5);
static int fail_at(const struct parser *p, uint64_t line, size_t col, const char *fmt, ...)
{
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return sfb__error(-SFB_EFORMAT, "%s:%" PRIu64 ":%zu: %s", p->path, line, col, reason);
}

#define FAIL(p, at, ...) fail_at((p), (p)->line, col_of((p), (at)), __VA_ARGS__)

static inline int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static inline int is_digit(char c)
{
    return (unsigned)(c - '0') < 10u;
}

static const double pow10_tab[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* Parses a decimal floating-point token at [s, end) that must end at a blank
 * or `end`. Returns 0 and sets *out and *next, or 1 when the token is not a
 * number, 2 when it spells NaN/Inf. */
static int parse_value(const struct parser *p, const char *s, const char *end, double *out,
                       const char **next)
{
    const char *q = s;
    int neg = 0;
    if (q < end && (*q == '+' || *q == '-')) neg = *q++ == '-';
    if (q < end && (*q == 'n' || *q == 'N' || *q == 'i' || *q == 'I')) return 2;
    uint64_t m = 0;
    int digits = 0, sig = 0, dropped = 0;
    int64_t exp10 = 0;
    while (q < end && is_digit(*q)) {
        digits++;
        if (sig < 19) {
            m = m * 10 + (uint64_t)(*q - '0');
            if (m) sig++;
        } else {
            dropped = 1;
            exp10++;
        }
        q++;
    }
    if (q < end && *q == '.') {
        q++;
        while (q < end && is_digit(*q)) {
            digits++;
            if (sig < 19) {
                m = m * 10 + (uint64_t)(*q - '0');
                if (m) sig++;
                exp10--;
            } else {
                dropped = 1;
            }
            q++;
        }
    }
    if (!digits) return 1;
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        int eneg = 0;
        if (q < end && (*q == '+' || *q == '-')) eneg = *q++ == '-';
        if (q >= end || !is_digit(*q)) return 1;
        int64_t e = 0;
        while (q < end && is_digit(*q)) {
            if (e < 100000) e = e * 10 + (*q - '0');
            q++;
        }
        exp10 += eneg ? -e : e;
    }
    if (q < end && !is_blank(*q)) return 1;
    *next = q;
    double v;
    if (!dropped && m <= (1ull << 53) && exp10 >= -22 && exp10 <= 22) {
        /* Clinger: both operands exact, so one rounding. */
        v = (double)m;
        v = exp10 < 0 ? v / pow10_tab[-exp10] : v * pow10_tab[exp10];
    } else if (m == 0) {
        v = 0.0;
    } else {
        char tmp[128];
        size_t len = (size_t)(q - s);
        if (len >= sizeof tmp) return 1;
        memcpy(tmp, s, len);
        tmp[len] = '\0';
        v = strtod_l(tmp, NULL, p->c_locale);
        neg = 0; /* strtod saw the sign */
    }
    *out = neg ? -v : v;
    return 0;
}

static int grow(void **buf, size_t *cap, uint64_t count, size_t elem)
{
    size_t need;
    if (count >= SIZE_MAX / elem || sfb__mul_size((size_t)count + 1, elem, &need)) return -ENOMEM;
    return sfb__reserve(buf, cap, need);
}

/* Label token: [+-]digits with an optional all-zero fraction ("3.0"). */
static int parse_label(struct parser *p, const char *s, const char *end, const char **next)
{
    const char *q = s;
    int neg = 0;
    char tok[48];
    if (q < end && (*q == '+' || *q == '-')) neg = *q++ == '-';
    if (q >= end || !is_digit(*q)) {
        token_str(s, end, tok, sizeof tok);
        return FAIL(p, s, "bad label '%s': expected an integer class index", tok);
    }
    int64_t v = 0;
    while (q < end && is_digit(*q)) {
        if (v <= INT32_MAX) v = v * 10 + (*q - '0');
        q++;
    }
    int nonint = 0;
    if (q < end && *q == '.') {
        q++;
        while (q < end && is_digit(*q)) nonint |= *q++ != '0';
    }
    if (q < end && !is_blank(*q)) {
        token_str(s, end, tok, sizeof tok);
        return FAIL(p, s, "bad label '%s': expected an integer class index", tok);
    }
    if (nonint) {
        token_str(s, end, tok, sizeof tok);
        return FAIL(p, s, "label '%s' is not an integer class index", tok);
    }
    if (v > INT32_MAX) {
        token_str(s, end, tok, sizeof tok);
        return FAIL(p, s, "label '%s' out of range", tok);
    }
    int32_t lab = (int32_t)(neg ? -v : v);
    if (lab < -1) {
        return FAIL(p, s, "label %" PRId32 " is negative (labels are class indices in [0, k); "
                          "only binary {-1,+1} labels are mapped to {0,1})", lab);
    }
    if (p->classes && lab >= 0 && (uint32_t)lab >= p->classes) {
        return FAIL(p, s, "label %" PRId32 " out of range [0, %" PRIu32 ")", lab, p->classes);
    }
    if (lab == -1 && !p->neg_at.line) {
        p->neg_at = (struct loc){p->line, col_of(p, s)};
        if (p->other_at.line) {
            return FAIL(p, s, "label -1 in a file that also has label %" PRId32 " (line %" PRIu64
                              "): negative labels are allowed only when the labels are exactly "
                              "{-1,+1}", p->other_label, p->other_at.line);
        }
    }
    if (lab != -1 && lab != 1 && !p->other_at.line) {
        p->other_at = (struct loc){p->line, col_of(p, s)};
        p->other_label = lab;
        if (p->neg_at.line) {
            return FAIL(p, s, "label %" PRId32 " in a file that also has label -1 (line %" PRIu64
                              "): negative labels are allowed only when the labels are exactly "
                              "{-1,+1}", lab, p->neg_at.line);
        }
    }
    if (lab > p->max_label) p->max_label = lab;
    if (grow((void **)&p->labels, &p->labels_cap, p->n, sizeof *p->labels)) return -ENOMEM;
    p->labels[p->n] = lab;
    *next = q;
    return 0;
}

static int parse_line(struct parser *p, const char *s, const char *end)
{
    char tok[48];
    p->line_start = s;
    if (end > s && end[-1] == '\r') end--;
    while (s < end && is_blank(*s)) s++;
    if (s == end || *s == '#') return 0;

    int r = parse_label(p, s, end, &s);
    if (r) return r;
    const uint64_t row_start = p->nnz; /* rolled back if the row is not kept */

    uint64_t prev = 0;
    int first = 1;
    for (;;) {
        while (s < end && is_blank(*s)) s++;
        if (s == end || *s == '#') break;
        const char *tok_start = s;
        if (!is_digit(*s)) {
            if (end - s >= 4 && memcmp(s, "qid:", 4) == 0) { /* svmlight query id */
                s += 4;
                while (s < end && !is_blank(*s)) s++;
                continue;
            }
            token_str(s, end, tok, sizeof tok);
            return FAIL(p, s, "bad token '%s': expected index:value", tok);
        }
        uint64_t idx = 0;
        while (s < end && is_digit(*s)) {
            if (idx <= MAX_RAW_INDEX) idx = idx * 10 + (uint64_t)(*s - '0');
            s++;
        }
        if (idx > MAX_RAW_INDEX) {
            token_str(tok_start, end, tok, sizeof tok);
            return FAIL(p, tok_start, "feature index in '%s' overflows 32 bits (max %u)", tok,
                        MAX_RAW_INDEX);
        }
        if (s == end && p->eof_no_newline) {
            return FAIL(p, s, "truncated file: ends inside a feature pair after index %" PRIu64,
                        idx);
        }
        if (s == end || *s != ':') {
            token_str(tok_start, end, tok, sizeof tok);
            return FAIL(p, s, "bad token '%s': expected ':' after feature index", tok);
        }
        s++;
        if (s == end && p->eof_no_newline) {
            return FAIL(p, s, "truncated file: ends after '%" PRIu64 ":' without a value", idx);
        }
        if (s == end || is_blank(*s)) {
            return FAIL(p, s, "missing value after '%" PRIu64 ":'", idx);
        }
        double v;
        const char *vs = s;
        r = parse_value(p, vs, end, &v, &s);
        if (r == 2) {
            token_str(vs, end, tok, sizeof tok);
            return FAIL(p, vs, "value '%s' is not finite", tok);
        }
        if (r) {
            token_str(vs, end, tok, sizeof tok);
            return FAIL(p, vs, "bad value '%s': expected a decimal number", tok);
        }
        /* Anything at or above FLT_MAX + half an ulp rounds to Inf. */
        if (!(fabs(v) < 0x1.ffffffp127)) {
            token_str(vs, end, tok, sizeof tok);
            return FAIL(p, vs, "value '%s' overflows float32", tok);
        }
        float f = (float)v;
        if (!first && idx <= prev) {
            return FAIL(p, tok_start, "index %" PRIu64 " not greater than previous index %" PRIu64,
                        idx, prev);
        }
        if (idx == 0) {
            if (p->base == 1) return FAIL(p, tok_start, "index 0 in a file with 1-based indices");
            if (!p->saw_zero) p->zero_at = (struct loc){p->line, col_of(p, tok_start)};
            p->saw_zero = 1;
        }
        if (p->dim) {
            /* With an auto base, raw == dim is valid only if the file turns
             * out 1-based: decide at the end. */
            uint64_t limit = p->base == 0 ? (uint64_t)p->dim - 1 : (uint64_t)p->dim;
            if (idx > limit) {
                return FAIL(p, tok_start, "index %" PRIu64 " beyond feature dimension %" PRIu32
                            " (%s indices)", idx, p->dim,
                            p->base == 0 ? "0-based" : p->base == 1 ? "1-based" : "auto-based");
            }
            if (p->base < 0 && idx == p->dim && !p->eqdim_at.line) {
                p->eqdim_at = (struct loc){p->line, col_of(p, tok_start)};
                p->eqdim_raw = (uint32_t)idx;
            }
        }
        if (p->nnz * sizeof(uint32_t) >= p->col_cap &&
            (grow((void **)&p->col, &p->col_cap, p->nnz, sizeof *p->col) ||
             grow((void **)&p->val, &p->val_cap, p->nnz, sizeof *p->val))) {
            return -ENOMEM;
        }
        p->col[p->nnz] = (uint32_t)idx;
        p->val[p->nnz] = f;
        p->nnz++;
        if (idx > p->max_raw) p->max_raw = (uint32_t)idx;
        p->any_index = 1;
        prev = idx;
        first = 0;
    }
    /* Another shard's row: parsed and checked like ours (so every rank
     * reports a bad line, and infers d and k from the whole file), not kept. */
    if (p->shard && sfb_shard_owner(p->shard, p->rows++) != p->shard->rank) {
        p->nnz = row_start;
        return 0;
    }
    if (!p->shard) p->rows++;
    p->n++;
    if (grow((void **)&p->row_ptr, &p->row_cap, p->n, sizeof *p->row_ptr)) return -ENOMEM;
    p->row_ptr[p->n] = p->nnz;
    return 0;
}

static int read_all(struct parser *p, int fd)
{
    size_t cap = READ_CHUNK, len = 0;
    char *buf = malloc(cap);
    if (!buf) return -ENOMEM;
    int r = 0;
    for (;;) {
        ssize_t got = read(fd, buf + len, cap - len);
        if (got < 0) {
            if (errno == EINTR) continue;
            r = sfb__error(-EIO, "%s: read error after line %" PRIu64 ": %s", p->path, p->line,
                           sfb_strerror(errno));
            break;
        }
        len += (size_t)got;
        const char *s = buf, *end = buf + len, *nl;
        while ((nl = memchr(s, '\n', (size_t)(end - s)))) {
            p->line++;
            if ((r = parse_line(p, s, nl))) goto out;
            s = nl + 1;
        }
        if (got == 0) {
            if (s < end) {
                p->line++;
                p->eof_no_newline = 1;
                r = parse_line(p, s, end);
            }
            break;
        }
        size_t rem = (size_t)(end - s);
        memmove(buf, s, rem);
        len = rem;
        if (len == cap) { /* one line longer than the buffer */
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                r = -ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
out:
    free(buf);
    return r;
}

void sfb_libsvm_default_settings(struct sfb_libsvm_settings *s)
{
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->version = SFB_LIBSVM_SETTINGS_VERSION;
    s->index_base = SFB_INDEX_AUTO;
    s->use_meta = 1;
}

int sfb__libsvm_read(const char *path, const struct sfb_libsvm_settings *settings,
                     const struct sfb_shard *shard, struct sfb_dataset *out, int *base_used,
                     uint64_t *rows)
{
    memset(out, 0, sizeof *out);
    if (!path) return sfb__error(-EINVAL, "libsvm: no path");
    struct sfb_libsvm_settings s;
    if (settings) s = *settings;
    else sfb_libsvm_default_settings(&s);
    if (s.index_base != SFB_INDEX_AUTO && s.index_base != SFB_INDEX_0 &&
        s.index_base != SFB_INDEX_1) {
        return sfb__error(-EINVAL, "%s: invalid index base %d", path, (int)s.index_base);
    }
    uint64_t num_train = 0;
    int r = 0;
    if (s.use_meta && (r = sfb__libsvm_read_meta(path, &s, &num_train))) return r;

    int fd;
    if ((r = sfb__open_regular(path, "a libsvm data file", &fd, NULL))) return r;

    struct parser p = {
        .path = path,
        .base = (int)s.index_base,
        .dim = s.dim,
        .classes = s.classes,
        .max_label = -1,
        .shard = shard && shard->world > 1 ? shard : NULL,
    };
    p.c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (!p.c_locale) r = -ENOMEM;
    /* Reserve from the meta file's count (bounded: it is a hint). */
    if (!r && num_train && num_train < (1u << 28))
        r = grow((void **)&p.labels, &p.labels_cap,
                 p.shard ? sfb_shard_rows(p.shard, num_train) : num_train, sizeof *p.labels);
    if (!r) r = grow((void **)&p.row_ptr, &p.row_cap, 0, sizeof *p.row_ptr);
    if (!r) {
        p.row_ptr[0] = 0;
        r = read_all(&p, fd);
    }
    close(fd);

    int base = p.base;
    if (!r) {
        if (base < 0) base = p.saw_zero ? 0 : 1;
        if (p.rows == 0) {
            r = sfb__error(-SFB_EFORMAT, "%s: no samples", path);
        } else if (base == 0 && p.eqdim_at.line) {
            r = fail_at(&p, p.eqdim_at.line, p.eqdim_at.col,
                        "index %" PRIu32 " beyond feature dimension %" PRIu32
                        " (indices are 0-based: index 0 at line %" PRIu64 ")",
                        p.eqdim_raw, p.dim, p.zero_at.line);
        } else if (p.neg_at.line && p.classes && p.classes < 2) {
            r = fail_at(&p, p.neg_at.line, p.neg_at.col,
                        "binary labels {-1,+1} need 2 classes, %" PRIu32 " given", p.classes);
        }
    }
    if (r) {
        if (r == -ENOMEM) r = sfb__error(-ENOMEM, "%s: out of memory at line %" PRIu64, path, p.line);
        free(p.labels);
        free(p.row_ptr);
        free(p.col);
        free(p.val);
        if (p.c_locale) freelocale(p.c_locale);
        return r;
    }
    freelocale(p.c_locale);

    if (p.neg_at.line) { /* exactly {-1,+1}: map to {0,1} */
        for (uint64_t i = 0; i < p.n; i++) p.labels[i] = p.labels[i] > 0;
        p.max_label = 1;
    }
    if (base == 1) {
        for (uint64_t i = 0; i < p.nnz; i++) p.col[i] -= 1;
    }
    if (num_train && num_train != p.rows) {
        SFB_LOG_W("%s: meta file says num_train_total %" PRIu64 ", file has %" PRIu64 " samples",
                  path, num_train, p.rows);
    }
    out->n = p.n;
    out->d = p.dim ? p.dim : p.any_index ? p.max_raw - (uint32_t)base + 1 : 0;
    out->k = p.classes ? p.classes : (uint32_t)(p.max_label + 1);
    out->labels = p.labels;
    out->sparse = 1;
    out->row_ptr = p.row_ptr;
    out->col = p.col;
    out->val = p.val;
    if (!out->col) { /* no features at all: keep valid (non-NULL) arrays */
        out->col = malloc(sizeof *out->col);
        out->val = malloc(sizeof *out->val);
        if (!out->col || !out->val) {
            sfb_dataset_free(out);
            return sfb__error(-ENOMEM, "%s: out of memory", path);
        }
    }
    if (base_used) *base_used = base;
    if (rows) *rows = p.rows;
    return 0;
}

int sfb_libsvm_read(const char *path, const struct sfb_libsvm_settings *s,
                    struct sfb_dataset *out)
{
    SFB_ENTER();
    SFB_ARG(path);
    SFB_ARG(out);
    memset(out, 0, sizeof *out);
    int ret = s ? SFB_CHECK_VERSION(s, "sfb_libsvm_settings", "sfb_libsvm_default_settings",
                                    SFB_LIBSVM_SETTINGS_VERSION)
                : 0;
    return ret ? ret : sfb__libsvm_read(path, s, NULL, out, NULL, NULL);
}
