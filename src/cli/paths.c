/* Where a job writes: the default paths built from --out-dir, their lengths
 * checked when the options are parsed, and every output location checked
 * writable before the first clock (a model that cannot be saved must not
 * cost a training run). */
#include "src/cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the library appends to a path it is given: the atomic writer's
 * ".tmp.<pid>.<8 hex digits>" (model files), a checkpoint's "/rank-R.clock-C.ckpt" plus the
 * same suffix. Paths are refused here unless these still fit. */
#define MODEL_SUFFIX 32
#define CKPT_SUFFIX 96

/* Expands every "%r" of `pattern` to `rank` into buf. 0, or -ENAMETOOLONG
 * when the result does not fit. */
int cli_path_for_rank(char *buf, size_t cap, const char *pattern, unsigned rank)
{
    size_t n = 0;
    for (const char *p = pattern; *p; p++) {
        int w;
        if (p[0] == '%' && p[1] == 'r') {
            w = snprintf(buf + n, n < cap ? cap - n : 0, "%u", rank);
            p++;
        } else {
            w = 1;
            if (n + 1 < cap) buf[n] = *p;
        }
        n += (size_t)w;
        if (n >= cap) return -ENAMETOOLONG;
    }
    buf[n] = '\0';
    return 0;
}

static int too_long(const char *cmd, const char *opt, const char *what, size_t len)
{
    fprintf(stderr, "sfb %s: %s: the %s path would be %zu bytes long; a path may have at most "
                    "%d\n", cmd, opt, what, len, PATH_MAX - 1);
    return 2;
}

/* DIR/NAME into buf (one of the job's PATH_MAX buffers), *out = buf; 2
 * (usage error, printed) when it does not fit. */
static int in_out_dir(const char *cmd, const char *dir, const char *name, const char *what,
                      char buf[4096], const char **out)
{
    int n = snprintf(buf, 4096, "%s/%s", dir, name);
    if (n < 0 || n >= 4096) return too_long(cmd, "--out-dir", what, (size_t)n);
    *out = buf;
    return 0;
}

/* Length of `pattern` with every %r expanded to a rank below `world`
 * (any rank when world is 0). */
static size_t expanded_len(const char *pattern, uint32_t world)
{
    char digits[16];
    size_t rlen = (size_t)snprintf(digits, sizeof digits, "%u", world ? world - 1 : UINT32_MAX);
    size_t n = 0;
    for (const char *p = pattern; *p; p++) {
        if (p[0] == '%' && p[1] == 'r') {
            n += rlen;
            p++;
        } else {
            n++;
        }
    }
    return n;
}

int cli_paths_build(struct cli_job *job, const char *cmd, uint32_t world)
{
    struct sfb_train_settings *t = &job->train;
    if (!*job->out_dir) {
        fprintf(stderr, "sfb %s: --out-dir: \"\" is not a directory\n", cmd);
        return 2;
    }
    if (t->model_out && !*t->model_out) {
        fprintf(stderr, "sfb %s: --model-out: \"\" is not a file name\n", cmd);
        return 2;
    }
    if (t->metrics_out && !*t->metrics_out) {
        fprintf(stderr, "sfb %s: --metrics-out: \"\" is not a file name\n", cmd);
        return 2;
    }
    job->out_dir_used = !t->model_out || !t->metrics_out;
    int ret;
    if (!t->model_out &&
        (ret = in_out_dir(cmd, job->out_dir, "model.sfb", "model", job->model_out_buf,
                          &t->model_out)))
        return ret;
    if (!t->metrics_out &&
        (ret = in_out_dir(cmd, job->out_dir, "metrics.%r.jsonl", "metrics",
                          job->metrics_out_buf, &t->metrics_out)))
        return ret;
    const char *model_opt = t->model_out == job->model_out_buf ? "--out-dir" : "--model-out";
    const char *metrics_opt = t->metrics_out == job->metrics_out_buf ? "--out-dir" : "--metrics-out";
    size_t len = expanded_len(t->model_out, world);
    if (len + MODEL_SUFFIX >= PATH_MAX) return too_long(cmd, model_opt, "model", len);
    len = expanded_len(t->metrics_out, world);
    if (len >= PATH_MAX) return too_long(cmd, metrics_opt, "metrics", len);
    if (t->checkpoint_every) {
        const char *dir = t->checkpoint_dir ? t->checkpoint_dir : t->resume_dir;
        const char *opt = t->checkpoint_dir ? "--checkpoint-dir" : "--resume";
        if (dir && strlen(dir) + CKPT_SUFFIX >= PATH_MAX)
            return too_long(cmd, opt, "checkpoint", strlen(dir) + CKPT_SUFFIX);
    }
    if (t->resume_dir && strlen(t->resume_dir) + CKPT_SUFFIX >= PATH_MAX)
        return too_long(cmd, "--resume", "checkpoint", strlen(t->resume_dir) + CKPT_SUFFIX);
    /* Every rank opens the metrics file for writing: without %r they would
     * all truncate and interleave one file (lines lost, lines cut). */
    if (world > 1 && !strstr(t->metrics_out, "%r")) {
        fprintf(stderr, "sfb %s: %s: \"%s\" has no %%r, so all %u workers would write this one "
                        "file; add %%r (it becomes the rank)\n", cmd, metrics_opt, t->metrics_out,
                world);
        return 2;
    }
    return 0;
}

static int mkdir_p(const char *dir)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -errno;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -errno;
    return 0;
}

/* The directory part of `path` ("." when it has none) into buf. */
static void dir_of(char *buf, size_t cap, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, cap, ".");
    else if (slash == path) snprintf(buf, cap, "/");
    else snprintf(buf, cap, "%.*s", (int)(slash - path), path);
}

/* `dir` must be a directory this process may create files in. With
 * `may_create`, a directory that does not exist yet is fine when its
 * nearest existing ancestor is one (the library creates it). */
static int check_dir(const char *cmd, const char *opt, const char *dir, int may_create)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    struct stat st;
    while (stat(buf, &st) != 0) {
        int e = errno;
        if (e != ENOENT && e != ENOTDIR) {
            fprintf(stderr, "sfb %s: %s: cannot use %s: %s\n", cmd, opt, buf, strerror(e));
            return 2;
        }
        /* ENOTDIR: a file on the way; walk up to name it */
        if (e == ENOENT && !may_create) {
            fprintf(stderr, "sfb %s: %s: the directory %s does not exist\n", cmd, opt, buf);
            return 2;
        }
        char up[PATH_MAX];
        dir_of(up, sizeof up, buf);
        if (!strcmp(up, buf)) break;
        snprintf(buf, sizeof buf, "%s", up);
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "sfb %s: %s: %s is not a directory\n", cmd, opt, buf);
        return 2;
    }
    if (access(buf, W_OK | X_OK) != 0) {
        fprintf(stderr, "sfb %s: %s: cannot write in %s: %s\n", cmd, opt, buf, strerror(errno));
        return 2;
    }
    return 0;
}

/* An output file: its directory must exist and be writable, and the file
 * itself, if there, must be one we can replace without blocking (a FIFO
 * would block the open) or failing (a directory). */
static int same_dir(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    while (la > 1 && a[la - 1] == '/') la--;
    while (lb > 1 && b[lb - 1] == '/') lb--;
    return la == lb && !strncmp(a, b, la);
}

/* `will_create`: a directory that sfb creates (--out-dir) before writing. */
static int check_file(const char *cmd, const char *opt, const char *pattern, unsigned rank,
                      const char *will_create)
{
    char path[PATH_MAX], dir[PATH_MAX];
    if (cli_path_for_rank(path, sizeof path, pattern, rank)) return too_long(cmd, opt, "output", strlen(pattern));
    dir_of(dir, sizeof dir, path);
    int r = check_dir(cmd, opt, dir, will_create && same_dir(dir, will_create));
    if (r) return r;
    struct stat st;
    if (stat(path, &st) == 0 && (S_ISDIR(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
        fprintf(stderr, "sfb %s: %s: %s is %s, not a regular file\n", cmd, opt, path,
                S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a socket");
        return 2;
    }
    return 0;
}

int cli_prepare_outputs(struct cli_job *job, const char *cmd, unsigned rank_lo, unsigned rank_hi)
{
    struct sfb_train_settings *t = &job->train;
    int r = 0;
    /* Everything is checked before anything is created: a refused job
     * leaves no empty output directory behind. */
    if (job->out_dir_used) r = check_dir(cmd, "--out-dir", job->out_dir, 1);
    if (!r && t->checkpoint_every) {
        const char *dir = t->checkpoint_dir ? t->checkpoint_dir
                          : t->resume_dir   ? t->resume_dir
                                            : "sfb-ckpt";
        const char *opt = t->checkpoint_dir ? "--checkpoint-dir"
                          : t->resume_dir   ? "--resume"
                                            : "--checkpoint-every (default directory sfb-ckpt)";
        r = check_dir(cmd, opt, dir, 1);
    }
    /* the timeline's files are written at the end: a directory they cannot
     * go in is a bad command line now, not a failed job later (a pattern
     * without %r: PATTERN.RANK, as the job names them) */
    char timeline[PATH_MAX];
    if (job->timeline && snprintf(timeline, sizeof timeline, strstr(job->timeline, "%r") ?
                                  "%s" : "%s.%%r", job->timeline) >= (int)sizeof timeline)
        return too_long(cmd, "--timeline", "output", strlen(job->timeline));
    for (uint64_t rank = rank_lo; job->timeline && rank <= rank_hi && !r; rank++)
        r = check_file(cmd, "--timeline", timeline, (unsigned)rank,
                       job->out_dir_used ? job->out_dir : NULL);
    int model_default = t->model_out == job->model_out_buf;
    int metrics_default = t->metrics_out == job->metrics_out_buf;
    int per_rank_model = strstr(t->model_out, "%r") != NULL;
    const char *out_dir = job->out_dir_used ? job->out_dir : NULL;
    /* explicit paths first (their directories must exist), then, once
     * --out-dir is created, the default ones */
    for (int pass = 0; pass < 2 && !r; pass++) {
        if (pass == 1 && job->out_dir_used && (r = mkdir_p(job->out_dir))) {
            fprintf(stderr, "sfb %s: --out-dir: cannot create %s: %s\n", cmd, job->out_dir,
                    strerror(-r));
            return 2;
        }
        /* 64-bit: rank_hi + 1 must not wrap to 0 */
        for (uint64_t rank = rank_lo; rank <= rank_hi && !r; rank++) {
            if (model_default == pass && (per_rank_model || rank == 0))
                r = check_file(cmd, model_default ? "--out-dir" : "--model-out", t->model_out,
                               (unsigned)rank, out_dir);
            if (!r && metrics_default == pass)
                r = check_file(cmd, metrics_default ? "--out-dir" : "--metrics-out",
                               t->metrics_out, (unsigned)rank, out_dir);
        }
    }
    return r;
}
