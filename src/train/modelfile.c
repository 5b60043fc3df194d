/* Model files (format in docs/formats.md):
 *
 *   0   8  magic "SFBMODL1"
 *   8   4  format version (3 for a model with a list option (mlp's hidden
 *            sizes), else 2; 1 is still read)
 *   12  4  number of matrices n (1 … SFB_MODEL_MAX_MATRICES)
 *   16 16  model kind, NUL-padded
 *   32  4  d        36  4  k
 *   40  8  lambda (IEEE double)     48  8  seed
 *   56  8  clock (int64)
 *   64 16  version >= 2: rank, knn_k, dict_size, code_steps (u32 each)
 *   80 16  version 3 only: hidden.n, hidden.v[0..3) (u32 each, unused ones 0)
 *   h  8n  rows, cols of each matrix (u32 each); h = 96 (v3), 80 (v2), 64 (v1)
 *   …      matrices, float32, row-major
 *   end 8  XXH3-64 of every byte before it
 *
 * All little-endian. A version-1 file gets the default rank, knn_k,
 * dict_size and code_steps (it can only hold an mlr model anyway). Models
 * without a list option are written as version 2, byte for byte what they
 * were before version 3 existed. The loader checks size, magic, version and checksum
 * before it trusts any field, then checks every shape against the model the
 * header describes. */
#include "config.h"
#include <sfb/model.h>
#include "models/model_internal.h"
#include "src/base/bytes.h"
#include "src/base/util.h"
#include "src/base/fileio.h"
#include "src/train/modelfile.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#define MODEL_MAGIC "SFBMODL1"
#define MODEL_VERSION 3u
#define HDR_FIXED 96u /* version 3; version 2 has 80, version 1 64 */
#define HDR_FIXED_V2 80u
#define HDR_FIXED_V1 64u

/* The fixed header's length of a version. */
static size_t hdr_fixed(uint32_t version)
{
    return version == 1 ? HDR_FIXED_V1 : version == 2 ? HDR_FIXED_V2 : HDR_FIXED;
}

/* Version 3 for a model with a list option (its sizes are in the header),
 * else 2, so those files stay as they were. */
static uint32_t version_of(const struct sfb_model_ops *ops)
{
    return sfb__model_list_option(ops) ? 3 : 2;
}
#define MAX_MODEL_FILE ((size_t)1 << 40)

int sfb__model_encode(const struct sfb_model *m, int64_t clock, uint8_t **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    const struct sfb_model_settings *s = sfb_model_get_settings(m);
    uint32_t n = sfb_model_n_matrices(m);
    const uint32_t version = version_of(sfb_model_get_ops(m));
    const size_t hfix = hdr_fixed(version);
    uint8_t hdr[HDR_FIXED + 8 * SFB_MODEL_MAX_MATRICES];
    memset(hdr, 0, sizeof hdr);
    memcpy(hdr, MODEL_MAGIC, 8);
    sfb__put_u32(hdr + 8, version);
    sfb__put_u32(hdr + 12, n);
    strncpy((char *)hdr + 16, sfb_model_get_ops(m)->name, 15);
    sfb__put_u32(hdr + 32, s->d);
    sfb__put_u32(hdr + 36, s->k);
    sfb__put_f64(hdr + 40, s->lambda);
    sfb__put_u64(hdr + 48, s->seed);
    sfb__put_u64(hdr + 56, (uint64_t)clock);
    sfb__put_u32(hdr + 64, s->proj_dim);
    sfb__put_u32(hdr + 68, s->knn_k);
    sfb__put_u32(hdr + 72, s->dict_size);
    sfb__put_u32(hdr + 76, s->code_steps);
    if (version >= 3) {
        uint32_t nh = SFB_MIN(s->hidden.n, SFB_MODEL_LIST_MAX);
        sfb__put_u32(hdr + 80, nh);
        for (uint32_t i = 0; i < nh; i++) sfb__put_u32(hdr + 84 + 4 * i, s->hidden.v[i]);
    }
    size_t hlen = hfix + 8 * (size_t)n;
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct sfb_matrix *a = sfb__model_matrix_ro(m, i);
        sfb__put_u32(hdr + hfix + 8 * i, a->rows);
        sfb__put_u32(hdr + hfix + 8 * i + 4, a->cols);
        total += (size_t)a->rows * a->cols * sizeof(float);
    }
    uint8_t *buf = malloc(hlen + total + 8);
    if (!buf) return sfb__error(-ENOMEM, "model file: out of memory");
    memcpy(buf, hdr, hlen);
    size_t off = hlen;
    for (uint32_t i = 0; i < n; i++) {
        const struct sfb_matrix *a = sfb__model_matrix_ro(m, i);
        size_t cnt = (size_t)a->rows * a->cols;
        sfb__put_f32s(buf + off, a->data, cnt);
        off += cnt * sizeof(float);
    }
    sfb__put_u64(buf + off, XXH3_64bits(buf, off));
    *out = buf;
    *out_len = off + 8;
    return 0;
}

int sfb_model_save(const struct sfb_model *m, const char *path, int64_t clock)
{
    SFB_ENTER();
    SFB_ARG(m);
    SFB_ARG(path);
    uint8_t *buf;
    size_t len;
    int ret = sfb__model_encode(m, clock, &buf, &len);
    if (ret) return sfb__error(ret, "%s: out of memory", path);
    struct sfb__piece piece = {buf, len};
    ret = sfb__write_file_atomic(path, &piece, 1);
    free(buf);
    return ret;
}

/* Size, magic, version, matrix count, the sizes the shapes imply and the
 * checksum: everything before any field is trusted. Sets *hfix_out (the
 * fixed header's length) and *n_out (matrices). */
static int check_frame(const uint8_t *buf, size_t len, const char *path, size_t *hfix_out,
                       uint32_t *n_out)
{
    if (len < HDR_FIXED_V1 + 8) {
        return sfb__error(-SFB_ETRUNC, "%s: %zu bytes is too short for a model file (truncated?)",
                         path, len);
    }
    if (memcmp(buf, MODEL_MAGIC, 8) != 0) {
        return sfb__error(-SFB_EFORMAT, "%s: not an sfb model file (bad magic)", path);
    }
    uint32_t version = sfb__get_u32(buf + 8);
    if (version < 1 || version > MODEL_VERSION) {
        return sfb__error(-SFB_EVERSION, "%s: model file version %u, this sfb reads 1 to %u",
                         path, version, MODEL_VERSION);
    }
    const size_t hfix = hdr_fixed(version);
    *hfix_out = hfix;
    if (len < hfix + 8) {
        return sfb__error(-SFB_ETRUNC, "%s: %zu bytes is too short for a model file (truncated?)",
                         path, len);
    }
    uint32_t n = sfb__get_u32(buf + 12);
    *n_out = n;
    if (n == 0 || n > SFB_MODEL_MAX_MATRICES) {
        return sfb__error(-SFB_EFORMAT, "%s: field n_matrices = %u is out of range", path, n);
    }
    size_t hlen = hfix + 8 * (size_t)n;
    if (len < hlen + 8) {
        return sfb__error(-SFB_ETRUNC, "%s: truncated inside the header", path);
    }
    /* Checksum before any further field is trusted. A truncated file fails
     * here too unless the size check below catches it first. */
    uint64_t want = sfb__get_u64(buf + len - 8);
    uint64_t got = XXH3_64bits(buf, len - 8);

    size_t body = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t r = sfb__get_u32(buf + hfix + 8 * i);
        uint64_t c = sfb__get_u32(buf + hfix + 8 * i + 4);
        body += (size_t)(r * c * sizeof(float));
        if (r * c > (uint64_t)MAX_MODEL_FILE) {
            return sfb__error(-SFB_EFORMAT, "%s: matrix %u shape %llux%llu is impossible", path, i,
                             (unsigned long long)r, (unsigned long long)c);
        }
    }
    if (len != hlen + body + 8) {
        return sfb__error(len < hlen + body + 8 ? -SFB_ETRUNC : -SFB_EFORMAT,
                         "%s: file is %zu bytes but its header describes %zu (%s)", path, len,
                         hlen + body + 8, len < hlen + body + 8 ? "truncated" : "trailing bytes");
    }
    if (want != got) {
        return sfb__error(-SFB_ECHECKSUM,
                         "%s: checksum mismatch (stored %016llx, computed %016llx): file is "
                         "corrupted",
                         path, (unsigned long long)want, (unsigned long long)got);
    }
    return 0;
}

/* The stored shapes against those the header's settings describe
 * (ops->shapes), before sfb_model_open: it allocates (and for dml/sc fills)
 * what the settings say, so a file whose checksum is right but whose d and
 * k say 2^31 would make the loader allocate exabytes (fuzz_modelfile found
 * it). The stored shapes are already bounded by the file size. A model whose
 * first shape is 0 is left to sfb_model_open to refuse. */
static int check_shapes(const uint8_t *shapes, uint32_t n, const struct sfb_model_settings *s,
                        const struct sfb_model_ops *ops, const char *path)
{
    uint64_t want_r[SFB_MODEL_MAX_MATRICES] = {0}, want_c[SFB_MODEL_MAX_MATRICES] = {0};
    uint32_t want_n = ops->shapes ? ops->shapes(s, want_r, want_c) : 0;
    if (want_n == 0 || want_r[0] == 0) return 0;
    uint32_t bad = want_n == n ? 0 : UINT32_MAX;
    for (uint32_t i = 0; bad == 0 && i < n; i++)
        if (sfb__get_u32(shapes + 8 * i) != want_r[i] || sfb__get_u32(shapes + 8 * i + 4) != want_c[i])
            bad = i + 1;
    if (bad == 0) return 0;
    uint32_t i = bad == UINT32_MAX ? 0 : bad - 1;
    return sfb__error(-SFB_ESHAPE, "%s: %u matrices, matrix %u %ux%u, but its header "
                      "describes %u %s matri%s, matrix %u %llux%llu", path, n, i,
                      sfb__get_u32(shapes + 8 * i), sfb__get_u32(shapes + 8 * i + 4), want_n,
                      ops->name, want_n == 1 ? "x" : "ces", i, (unsigned long long)want_r[i],
                      (unsigned long long)want_c[i]);
}

/* The settings a header stores (kind points into `kind`, 17 bytes). */
static void header_settings(const uint8_t *buf, uint32_t version, char *kind,
                            struct sfb_model_settings *s)
{
    memcpy(kind, buf + 16, 16);
    kind[16] = '\0';
    sfb_model_default_settings(s);
    s->kind = kind;
    s->d = sfb__get_u32(buf + 32);
    s->k = sfb__get_u32(buf + 36);
    s->lambda = sfb__get_f64(buf + 40);
    s->seed = sfb__get_u64(buf + 48);
    if (version >= 2) {
        s->proj_dim = sfb__get_u32(buf + 64);
        s->knn_k = sfb__get_u32(buf + 68);
        s->dict_size = sfb__get_u32(buf + 72);
        s->code_steps = sfb__get_u32(buf + 76);
    }
    if (version >= 3) {
        /* A count over the room is kept as it is: the model refuses it
         * (header settings rejected), nothing past v[] is read. */
        s->hidden.n = sfb__get_u32(buf + 80);
        for (uint32_t i = 0; i < SFB_MODEL_LIST_MAX; i++)
            s->hidden.v[i] = sfb__get_u32(buf + 84 + 4 * i);
    }
}

int sfb__model_decode(const uint8_t *buf, size_t len, const char *path, struct sfb_model **out,
                      int64_t *clock)
{
    *out = NULL;
    struct sfb_model *m = NULL;
    size_t hfix = 0;
    uint32_t n = 0;
    int ret = check_frame(buf, len, path, &hfix, &n);
    if (ret) return ret;
    size_t hlen = hfix + 8 * (size_t)n;
    char kind[17];
    struct sfb_model_settings s;
    header_settings(buf, sfb__get_u32(buf + 8), kind, &s);
    const struct sfb_model_ops *ops = sfb_model_find(kind);
    if (!ops) return sfb__error(-SFB_EFORMAT, "%s: unknown model kind \"%s\"", path, kind);
    if ((ret = check_shapes(buf + hfix, n, &s, ops, path))) return ret;
    ret = sfb_model_open(&m, &s);
    if (ret == -EINVAL) { /* the header's settings (d = 0, lambda < 0, …): a bad file */
        char why[256];
        snprintf(why, sizeof why, "%s", sfb_error_message(ret));
        ret = sfb__error(-SFB_EFORMAT, "%s: header settings rejected: %s", path, why);
    }
    if (ret) goto fail;
    if (sfb_model_n_matrices(m) != n) {
        ret = sfb__error(-SFB_ESHAPE, "%s: %u matrices stored, model %s has %u", path, n, kind,
                         sfb_model_n_matrices(m));
        goto fail;
    }
    size_t off = hlen;
    for (uint32_t i = 0; i < n; i++) {
        struct sfb_matrix *a = sfb_model_matrix(m, i);
        uint32_t r = sfb__get_u32(buf + hfix + 8 * i);
        uint32_t c = sfb__get_u32(buf + hfix + 8 * i + 4);
        if (r != a->rows || c != a->cols) {
            ret = sfb__error(-SFB_ESHAPE, "%s: matrix %u is %ux%u, model expects %ux%u", path, i,
                             r, c, a->rows, a->cols);
            goto fail;
        }
        sfb__get_f32s(a->data, buf + off, (size_t)r * c);
        off += (size_t)r * c * sizeof(float);
    }
    if (clock) *clock = (int64_t)sfb__get_u64(buf + 56);
    *out = m;
    return 0;
fail:
    sfb_model_close(&m);
    return ret;
}

int sfb_model_load(struct sfb_model **out, const char *path, int64_t *clock)
{
    SFB_ENTER();
    SFB_ARG(out);
    SFB_ARG(path);
    *out = NULL;
    uint8_t *buf;
    size_t len;
    int ret = sfb__read_file(path, MAX_MODEL_FILE, &buf, &len);
    if (ret) return ret;
    ret = sfb__model_decode(buf, len, path, out, clock);
    free(buf);
    return ret;
}
