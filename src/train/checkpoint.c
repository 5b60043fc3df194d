/* Checkpoint files (format in docs/formats.md, header in src/train/checkpoint.h):
 *
 *   0    8  magic "SFBCKPT1"
 *   8    4  format version (1)
 *   12   4  rank          16  4  world size
 *   20   4  flags (0)
 *   24   8  clock: the next clock to compute (int64)
 *   32   8  data cursor: samples this rank has read (clock × batch)
 *   40   8  config hash: XXH3-64 of the configuration text
 *   48  32  RNG state s[0..3]      80  8  RNG spare (double)
 *   88   4  RNG has_spare          92  4  configuration text length C
 *   96   4  model state length M   100 4  reserved (0)
 *   104  8  embedded model file length F
 *   112  C  configuration text ("key=value\n" lines)
 *   …    M  model private state (e.g. dml: the pair-stream step)
 *   …    F  a complete model file (src/train/modelfile.c): the replica
 *   end  8  XXH3-64 of every byte before it
 *
 * All little-endian. The loader checks size, magic, version, the lengths and
 * the checksum before it trusts any other field, then the embedded model
 * file with the model file's own checks. Choosing the clock to resume at
 * across ranks: ckpt_resume.c. */
#include "config.h"
#include "src/train/checkpoint.h"

#include "models/model_internal.h"
#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/base/fileio.h"
#include "src/train/modelfile.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MAX_CKPT_FILE ((size_t)1 << 40)

static int add_line(char *out, size_t cap, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int add_line(char *out, size_t cap, size_t *off, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + *off, cap - *off, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap - *off) return -ENAMETOOLONG;
    *off += (size_t)n;
    return 0;
}

/* The shortest of %.15g / %.17g that reads back as v ("0.3", not
 * "0.29999999999999999"). */
static const char *num(char buf[32], double v)
{
    snprintf(buf, 32, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, 32, "%.17g", v);
    return buf;
}

int sfb__ckpt_config(const struct sfb_train_settings *s, uint32_t world, uint32_t batch,
                     uint64_t n, uint32_t d, uint32_t k, char *out, size_t cap)
{
    static const char *const sched[] = {"constant", "invsqrt", "step"};
    char n1[32], n2[32], n3[32];
    size_t off = 0;
    int apply_early = s->apply_early < 0 ? s->staleness != 0 : s->apply_early;
    if (!cap) return -ENAMETOOLONG;
    out[0] = '\0';
    /* One setting per line; what a resume may change (--clocks, --epochs,
     * outputs, logging, threads, timeouts, debug delays) is left out. */
    int ret = add_line(out, cap, &off,
                       "model=%s\ndata=%s\ntest_data=%s\ntrain_samples=%" PRIu64
                       "\nfeatures=%u\nclasses=%u\nlayout=%d\npatches=%u\nworld=%u\nbatch=%u\n",
                       s->model ? s->model : "", s->data ? s->data : "",
                       s->test_data ? s->test_data : "", n, d, k, (int)s->layout, s->patch, world,
                       batch);
    if (!ret)
        ret = add_line(out, cap, &off,
                       "sync=%s\nstaleness=%lld\napply_early=%d\ntopology=%s\ndegree=%u\n"
                       "flush=%s\nseed=%" PRIu64 "\n",
                       s->sync ? s->sync : "sfb", (long long)s->staleness, apply_early,
                       s->topology ? s->topology : "full", s->degree,
                       s->flush_clock ? "clock" : "eager", s->seed);
    if (!ret)
        ret = add_line(out, cap, &off,
                       "lr=%s\nlr_schedule=%s\nlr_period=%" PRIu64 "\nlr_decay=%s\n"
                       "lambda=%s\nrank=%u\nknn_k=%u\ndict_size=%u\ncode_steps=%u\n"
                       "simi_pairs=%s\ndiff_pairs=%s\n",
                       num(n1, sfb_train_lr0(s)),
                       (unsigned)s->lr_schedule < 3 ? sched[s->lr_schedule] : "?", s->lr_period,
                       num(n2, s->lr_decay), num(n3, s->lambda), s->proj_dim, s->knn_k, s->dict_size, s->code_steps,
                       s->simi_pairs ? s->simi_pairs : "", s->diff_pairs ? s->diff_pairs : "");
    /* Only for a model with a list option, so the configs (and their
     * hashes) of the others stay what they were; not given: the default. */
    const struct sfb_model_ops *ops = sfb_model_find(s->model ? s->model : "");
    struct sfb_model_settings ms;
    sfb_model_default_settings(&ms);
    if (s->hidden.n) ms.hidden = s->hidden;
    for (uint32_t i = 0; !ret && sfb__model_list_option(ops) && i < ms.hidden.n &&
                         i < SFB_MODEL_LIST_MAX; i++)
        ret = add_line(out, cap, &off, "%s%u%s", i ? "," : "hidden=", ms.hidden.v[i],
                       i + 1 == ms.hidden.n ? "\n" : "");
    return ret;
}

char *sfb__ckpt_path(const char *dir, uint32_t rank, int64_t clock)
{
    size_t len = strlen(dir) + 64;
    char *p = malloc(len);
    if (p) snprintf(p, len, "%s/rank-%u.clock-%012lld.ckpt", dir, rank, (long long)clock);
    return p;
}

int sfb__ckpt_encode(const struct sfb__ckpt_state *st, const char *config, struct sfb_model *m,
                     uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    size_t clen = strlen(config);
    if (clen > SFB__CKPT_CONFIG_MAX || st->model_state_len > SFB_MODEL_STATE_MAX || st->clock < 0)
        return sfb__error(-EINVAL, "checkpoint: configuration or model state too long");
    uint8_t *mf;
    size_t mlen;
    int ret = sfb__model_encode(m, st->clock, &mf, &mlen);
    if (ret) return ret;
    size_t total = SFB__CKPT_HDR + clen + st->model_state_len + mlen + 8;
    uint8_t *b = calloc(1, total);
    if (!b) {
        free(mf);
        return sfb__error(-ENOMEM, "checkpoint: out of memory");
    }
    memcpy(b, SFB__CKPT_MAGIC, 8);
    sfb__put_u32(b + 8, SFB__CKPT_VERSION);
    sfb__put_u32(b + 12, st->rank);
    sfb__put_u32(b + 16, st->world);
    sfb__put_u64(b + 24, (uint64_t)st->clock);
    sfb__put_u64(b + 32, st->cursor);
    sfb__put_u64(b + 40, XXH3_64bits(config, clen));
    for (int i = 0; i < 4; i++) sfb__put_u64(b + 48 + 8 * i, st->rng.s[i]);
    sfb__put_f64(b + 80, st->rng.spare);
    sfb__put_u32(b + 88, (uint32_t)st->rng.has_spare);
    sfb__put_u32(b + 92, (uint32_t)clen);
    sfb__put_u32(b + 96, st->model_state_len);
    sfb__put_u64(b + 104, mlen);
    size_t off = SFB__CKPT_HDR;
    memcpy(b + off, config, clen);
    off += clen;
    memcpy(b + off, st->model_state, st->model_state_len);
    off += st->model_state_len;
    memcpy(b + off, mf, mlen);
    off += mlen;
    free(mf);
    sfb__put_u64(b + off, XXH3_64bits(b, off));
    *out = b;
    *len = total;
    return 0;
}

void sfb__ckpt_free(struct sfb__ckpt *c)
{
    if (c) sfb_model_close(&c->model);
}

int sfb__ckpt_decode(const uint8_t *buf, size_t len, const char *path, struct sfb__ckpt *out)
{
    memset(out, 0, sizeof *out);
    if (len < SFB__CKPT_HDR + 8)
        return sfb__error(-SFB_ETRUNC, "%s: %zu bytes is too short for a checkpoint (truncated?)",
                          path, len);
    if (memcmp(buf, SFB__CKPT_MAGIC, 8) != 0)
        return sfb__error(-SFB_EFORMAT, "%s: not an sfb checkpoint (bad magic)", path);
    uint32_t version = sfb__get_u32(buf + 8);
    if (version != SFB__CKPT_VERSION)
        return sfb__error(-SFB_EVERSION, "%s: checkpoint version %u, this sfb reads %u", path,
                          version, SFB__CKPT_VERSION);
    uint64_t clen = sfb__get_u32(buf + 92), slen = sfb__get_u32(buf + 96);
    uint64_t mlen = sfb__get_u64(buf + 104);
    if (clen > SFB__CKPT_CONFIG_MAX || slen > SFB_MODEL_STATE_MAX || mlen > MAX_CKPT_FILE)
        return sfb__error(-SFB_EFORMAT, "%s: field %s is out of range", path,
                          clen > SFB__CKPT_CONFIG_MAX ? "config length"
                          : slen > SFB_MODEL_STATE_MAX ? "model state length"
                                                       : "model file length");
    uint64_t want_len = SFB__CKPT_HDR + clen + slen + mlen + 8;
    if (len != want_len)
        return sfb__error(len < want_len ? -SFB_ETRUNC : -SFB_EFORMAT,
                          "%s: file is %zu bytes but its header describes %llu (%s)", path, len,
                          (unsigned long long)want_len,
                          len < want_len ? "truncated" : "trailing bytes");
    uint64_t want = sfb__get_u64(buf + len - 8), got = XXH3_64bits(buf, len - 8);
    if (want != got)
        return sfb__error(-SFB_ECHECKSUM,
                          "%s: checksum mismatch (stored %016llx, computed %016llx): the "
                          "checkpoint is corrupted",
                          path, (unsigned long long)want, (unsigned long long)got);
    if (sfb__get_u32(buf + 20) != 0 || sfb__get_u32(buf + 100) != 0)
        return sfb__error(-SFB_EFORMAT, "%s: reserved fields are not zero", path);
    struct sfb__ckpt_state *st = &out->st;
    st->rank = sfb__get_u32(buf + 12);
    st->world = sfb__get_u32(buf + 16);
    st->clock = (int64_t)sfb__get_u64(buf + 24);
    st->cursor = sfb__get_u64(buf + 32);
    out->config_hash = sfb__get_u64(buf + 40);
    for (int i = 0; i < 4; i++) st->rng.s[i] = sfb__get_u64(buf + 48 + 8 * i);
    st->rng.spare = sfb__get_f64(buf + 80);
    uint32_t has_spare = sfb__get_u32(buf + 88);
    if (st->world == 0 || st->rank >= st->world || st->clock < 0 || has_spare > 1)
        return sfb__error(-SFB_EFORMAT,
                          "%s: field %s is out of range (rank %u, world %u, clock %lld)", path,
                          st->world == 0 || st->rank >= st->world ? "rank/world"
                          : st->clock < 0                         ? "clock"
                                                                  : "rng has_spare",
                          st->rank, st->world, (long long)st->clock);
    st->rng.has_spare = (int)has_spare;
    const uint8_t *p = buf + SFB__CKPT_HDR;
    memcpy(out->config, p, clen);
    out->config[clen] = '\0';
    if (memchr(p, '\0', clen) || XXH3_64bits(p, clen) != out->config_hash)
        return sfb__error(-SFB_EFORMAT, "%s: configuration text does not match its hash", path);
    p += clen;
    memcpy(st->model_state, p, slen);
    st->model_state_len = (uint32_t)slen;
    p += slen;
    int64_t mclock = -1;
    int ret = sfb__model_decode(p, (size_t)mlen, path, &out->model, &mclock);
    if (ret) return ret;
    if (mclock != st->clock) {
        sfb__ckpt_free(out);
        return sfb__error(-SFB_EFORMAT, "%s: embedded model is of clock %lld, checkpoint of %lld",
                          path, (long long)mclock, (long long)st->clock);
    }
    return 0;
}

/* Parses "rank-<R>.clock-<C>.ckpt" exactly (temp files and others are not
 * checkpoints). */
static int parse_name(const char *name, uint32_t *rank, int64_t *clock)
{
    unsigned r;
    long long c;
    int n = 0;
    if (sscanf(name, "rank-%u.clock-%lld.ckpt%n", &r, &c, &n) != 2 || name[n] != '\0' || c < 0)
        return -1;
    char again[96];
    snprintf(again, sizeof again, "rank-%u.clock-%012lld.ckpt", r, c);
    if (strcmp(again, name)) return -1;
    *rank = r;
    *clock = c;
    return 0;
}

static int cmp_desc(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a > b ? -1 : a < b;
}

int sfb__ckpt_list(const char *dir, uint32_t rank, int64_t *clocks, size_t max)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        return sfb__error(-errno, "%s: cannot read the checkpoint directory: %s", dir,
                          strerror(errno));
    }
    int64_t *all = NULL;
    size_t n = 0, cap = 0;
    int ret = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint32_t r;
        int64_t c;
        if (parse_name(e->d_name, &r, &c) || r != rank) continue;
        if (sfb__reserve((void **)&all, &cap, (n + 1) * sizeof *all)) {
            ret = -ENOMEM;
            break;
        }
        all[n++] = c;
    }
    closedir(d);
    if (!ret) {
        if (n) qsort(all, n, sizeof *all, cmp_desc);
        n = SFB_MIN(n, max);
        if (n) memcpy(clocks, all, n * sizeof *all);
        ret = (int)n;
    }
    free(all);
    return ret;
}

static int mkdir_p(const char *dir)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return sfb__error(-ENAMETOOLONG, "%s: path too long", dir);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return sfb__error(-errno, "cannot create the checkpoint directory %s: %s", buf,
                              strerror(errno));
        *p = c;
        if (!c) return 0;
    }
}

static void remove_file(const char *dir, uint32_t rank, int64_t clock)
{
    char *p = sfb__ckpt_path(dir, rank, clock);
    if (p && unlink(p) != 0 && errno != ENOENT)
        SFB_LOG_W("cannot remove old checkpoint %s: %s", p, strerror(errno));
    free(p);
}

int sfb__ckpt_write(const char *dir, const struct sfb__ckpt_state *st, const char *config,
                    struct sfb_model *m)
{
    int ret = mkdir_p(dir);
    if (ret) return ret;
    uint8_t *buf;
    size_t len;
    if ((ret = sfb__ckpt_encode(st, config, m, &buf, &len))) return ret;
    char *path = sfb__ckpt_path(dir, st->rank, st->clock);
    if (!path) {
        free(buf);
        return -ENOMEM;
    }
    struct sfb__piece piece = {buf, len};
    ret = sfb__write_file_atomic(path, &piece, 1);
    free(buf);
    free(path);
    if (ret) return ret;
    /* Keep this one and the newest older one, remove the rest. Why two
     * suffice: every rank drains, passes a barrier, then writes. A rank
     * that has written clock c got through the barrier of c, which every
     * rank entered only after finishing its write of the previous
     * checkpoint c' — so c' is complete on every rank, while c may not be
     * (another rank can die while writing it). Resuming needs a clock valid
     * on every rank: c if all have it, else c'. Anything older than c' is
     * never needed again. */
    int64_t clocks[64];
    int n = sfb__ckpt_list(dir, st->rank, clocks, SFB_ARRAY_LEN(clocks));
    int kept_older = 0;
    for (int i = 0; i < n; i++) {
        if (clocks[i] == st->clock) continue;
        if (clocks[i] < st->clock && !kept_older) {
            kept_older = 1;
            continue;
        }
        remove_file(dir, st->rank, clocks[i]);
    }
    return 0;
}

void sfb__ckpt_remove_after(const char *dir, uint32_t rank, int64_t clock)
{
    int64_t clocks[64];
    int n = sfb__ckpt_list(dir, rank, clocks, SFB_ARRAY_LEN(clocks));
    for (int i = 0; i < n; i++)
        if (clocks[i] > clock) remove_file(dir, rank, clocks[i]);
}

/* The first line where two configuration texts differ, as
 * "field: X in the checkpoint, Y now". */
static void config_diff(const char *was, const char *now, char *why, size_t cap)
{
    const char *a = was, *b = now;
    while (*a || *b) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
        if (la != lb || memcmp(a, b, la)) {
            const char *qa = memchr(a, '=', la), *qb = memchr(b, '=', lb);
            size_t ka = qa ? (size_t)(qa - a) : la, kb = qb ? (size_t)(qb - b) : lb;
            if (ka == kb && !memcmp(a, b, ka) && qa && qb)
                snprintf(why, cap, "%.*s is \"%.*s\" in the checkpoint, \"%.*s\" now", (int)ka,
                         a, (int)(la - ka - 1), qa + 1, (int)(lb - kb - 1), qb + 1);
            else
                snprintf(why, cap, "the checkpoint has \"%.*s\" where this run has \"%.*s\"",
                         (int)SFB_MIN(la, 80), a, (int)SFB_MIN(lb, 80), b);
            return;
        }
        a += la + (ea != NULL);
        b += lb + (eb != NULL);
    }
    snprintf(why, cap, "configuration hash differs");
}

/* A run with --sync auto stored its choice as the last line, "engines=…":
 * moved to c->engines, so the rest compares with this run's settings. */
static void take_engines(struct sfb__ckpt *c)
{
    char *eng = strstr(c->config, "engines=");
    if (!eng || (eng != c->config && eng[-1] != '\n')) return;
    size_t len = strcspn(eng + 8, "\n");
    if (eng[8 + len] != '\n' || eng[9 + len] || len >= sizeof c->engines) return;
    memcpy(c->engines, eng + 8, len);
    c->engines[len] = '\0';
    *eng = '\0';
    c->config_hash = XXH3_64bits(c->config, strlen(c->config));
}

int sfb__ckpt_read(const char *dir, uint32_t rank, uint32_t world, int64_t clock,
                   const char *config, struct sfb__ckpt *out)
{
    memset(out, 0, sizeof *out);
    char *path = sfb__ckpt_path(dir, rank, clock);
    if (!path) return -ENOMEM;
    uint8_t *buf;
    size_t len;
    int ret = sfb__read_file(path, MAX_CKPT_FILE, &buf, &len);
    if (!ret) {
        ret = sfb__ckpt_decode(buf, len, path, out);
        free(buf);
    }
    if (!ret && (out->st.rank != rank || out->st.clock != clock))
        ret = sfb__error(-SFB_EFORMAT, "%s: holds rank %u clock %lld, not what its name says",
                         path, out->st.rank, (long long)out->st.clock);
    else if (!ret && out->st.world != world)
        ret = sfb__error(-SFB_ECONFIG,
                         "%s: configuration differs: world is %u in the checkpoint, %u now "
                         "(resume with -n %u)",
                         path, out->st.world, world, out->st.world);
    if (!ret) take_engines(out);
    if (!ret && (out->config_hash != XXH3_64bits(config, strlen(config)) ||
                 strcmp(out->config, config))) {
        char why[400];
        config_diff(out->config, config, why, sizeof why);
        ret = sfb__error(-SFB_ECONFIG, "%s: configuration differs: %s", path, why);
    }
    if (ret) sfb__ckpt_free(out);
    free(path);
    return ret;
}

int sfb__ckpt_scan(const char *dir, uint32_t rank, uint32_t world, const char *config,
                   int64_t *clocks, size_t max, uint32_t *ckpt_world)
{
    int64_t all[64];
    *ckpt_world = 0;
    int n = sfb__ckpt_list(dir, rank, all, SFB_ARRAY_LEN(all));
    if (n < 0) return n;
    size_t got = 0;
    for (int i = 0; i < n && got < max; i++) {
        struct sfb__ckpt *c = malloc(sizeof *c);
        if (!c) return sfb__error(-ENOMEM, "checkpoint: out of memory");
        int ret = sfb__ckpt_read(dir, rank, world, all[i], config, c);
        /* a valid file of another world size: the whole set is of another
         * job shape, which every rank must report alike (sfb__ckpt_agree) */
        if (ret == -SFB_ECONFIG && c->st.world != world) *ckpt_world = c->st.world;
        sfb__ckpt_free(c);
        free(c);
        if (ret == -SFB_ECONFIG || ret == -ENOMEM) return ret;
        if (ret) {
            SFB_LOG_W("rank %u: skipping checkpoint: %s", rank, sfb_error_message(ret));
            continue;
        }
        clocks[got++] = all[i];
    }
    return (int)got;
}

int sfb__ckpt_restore_model(const struct sfb__ckpt *c, struct sfb_model *m)
{
    uint32_t n = sfb_model_n_matrices(m);
    /* one ops table per registered model: the same pointer is the same model */
    if (sfb_model_get_ops(c->model) != sfb_model_get_ops(m) || sfb_model_n_matrices(c->model) != n)
        return sfb__error(-SFB_ESHAPE, "checkpoint holds a %s model, this run trains %s",
                          sfb_model_get_ops(c->model)->name, sfb_model_get_ops(m)->name);
    for (uint32_t i = 0; i < n; i++) {
        const struct sfb_matrix *src = sfb_model_matrix(c->model, i);
        struct sfb_matrix *dst = sfb_model_matrix(m, i);
        if (src->rows != dst->rows || src->cols != dst->cols)
            return sfb__error(-SFB_ESHAPE, "checkpoint matrix %u is %ux%u, the model's %ux%u", i,
                              src->rows, src->cols, dst->rows, dst->cols);
    }
    const struct sfb_model_ops *ops = sfb_model_get_ops(m);
    if (c->st.model_state_len && (!ops->state_load ||
                                  ops->state_load(sfb__model_priv(m), c->st.model_state,
                                                  c->st.model_state_len)))
        return sfb__error(-EINVAL, "checkpoint: model %s refuses its private state (%u bytes)",
                          ops->name, c->st.model_state_len);
    if (!c->st.model_state_len && ops->state_save)
        return sfb__error(-EINVAL, "checkpoint: model %s needs its private state, none stored",
                          ops->name);
    for (uint32_t i = 0; i < n; i++) {
        const struct sfb_matrix *src = sfb_model_matrix(c->model, i);
        memcpy(sfb_model_matrix(m, i)->data, src->data,
               (size_t)src->rows * src->cols * sizeof(float));
    }
    return 0;
}

void sfb__ckpt_save_model_state(struct sfb_model *m, struct sfb__ckpt_state *st)
{
    const struct sfb_model_ops *ops = sfb_model_get_ops(m);
    st->model_state_len = 0;
    if (ops->state_save)
        st->model_state_len = (uint32_t)SFB_MIN(
            ops->state_save(sfb__model_priv(m), st->model_state, SFB_MODEL_STATE_MAX),
            (size_t)SFB_MODEL_STATE_MAX);
}
