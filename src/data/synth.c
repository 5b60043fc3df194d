/* Synthetic MLR data with a hidden true model.
 *
 * W (k × d) has N(0, LOGIT_STD²/m) entries where m = density·d is the
 * expected number of non-zeros per sample, and the features are N(0, 1) on
 * the chosen support, so every logit (W·x)_c has standard deviation LOGIT_STD
 * whatever d and density are, and `noise` has a fixed meaning: with the
 * default 0.1 about 2-3% of the labels (k = 10) differ from argmax W·x, so a
 * good linear model reaches ~97%. Sample i is drawn
 * from its own PRNG stream (seed, i), so the data do not depend on generation
 * order, and every step uses src/base/rng.c's portable arithmetic: the same
 * settings give bitwise the same dataset on every machine. */
#include "config.h"
#include "src/data/synth.h"

#include "src/base/util.h"
#include "src/base/rng.h"

#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LOGIT_STD 4.0

/* Stream tags keep the model and the samples apart for any seed. */
#define TAG_MODEL 0x6d6f64656cull   /* "model" */
#define TAG_SAMPLE 0x73616d706cull  /* "sampl" */

void sfb_synth_default_settings(struct sfb_synth_settings *s)
{
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->version = SFB_SYNTH_SETTINGS_VERSION;
    s->k = 10;
    s->d = 100;
    s->n = 1000;
    s->density = 1.0;
    s->noise = 0.1;
    s->seed = 1;
}

static int parse_u64(const char *v, size_t len, uint64_t *out)
{
    uint64_t x = 0;
    if (len == 0) return -1;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9') return -1;
        if (x > (UINT64_MAX - (uint64_t)(v[i] - '0')) / 10) return -1;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    *out = x;
    return 0;
}

static int parse_double(const char *v, size_t len, double *out)
{
    char tmp[64];
    if (len == 0 || len >= sizeof tmp) return -1;
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (!c) return -1;
    char *end;
    double x = strtod_l(tmp, &end, c);
    freelocale(c);
    if (*end != '\0' || !isfinite(x)) return -1;
    *out = x;
    return 0;
}

int sfb_synth_parse(const char *spec, struct sfb_synth_settings *s)
{
    SFB_ENTER();
    SFB_ARG(spec);
    SFB_ARG(s);
    sfb_synth_default_settings(s);
    const char *p = spec;
    if (strncmp(p, "synth", 5) == 0) {
        p += 5;
        if (*p == ':') p++;
        else if (*p != '\0') return sfb__error(-SFB_EFORMAT, "%s: expected 'synth:key=value,...'", spec);
    }
    while (*p) {
        const char *item = p;
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        p = *end ? end + 1 : end;
        if (end == item) continue; /* empty item, e.g. a trailing comma */
        const char *eq = memchr(item, '=', (size_t)(end - item));
        if (!eq) {
            return sfb__error(-SFB_EFORMAT, "%s: item '%.*s' is not key=value", spec,
                              (int)(end - item), item);
        }
        size_t klen = (size_t)(eq - item), vlen = (size_t)(end - eq - 1);
        const char *v = eq + 1;
        uint64_t u = 0;
        double x = 0;
        const char *want = NULL;
#define IS(key) (klen == strlen(key) && memcmp(item, key, klen) == 0)
        if (IS("k")) {
            if (parse_u64(v, vlen, &u) || u < 2 || u > UINT32_MAX) want = "an integer in [2, 2^32)";
            else s->k = (uint32_t)u;
        } else if (IS("d")) {
            if (parse_u64(v, vlen, &u) || u < 1 || u > UINT32_MAX) want = "an integer in [1, 2^32)";
            else s->d = (uint32_t)u;
        } else if (IS("n")) {
            if (parse_u64(v, vlen, &u) || u < 1) want = "an integer >= 1";
            else s->n = u;
        } else if (IS("seed")) {
            if (parse_u64(v, vlen, &u)) want = "an unsigned 64-bit integer";
            else s->seed = u;
        } else if (IS("density")) {
            if (parse_double(v, vlen, &x) || !(x > 0.0 && x <= 1.0)) want = "a number in (0, 1]";
            else s->density = x;
        } else if (IS("noise")) {
            if (parse_double(v, vlen, &x) || !(x >= 0.0)) want = "a finite number >= 0";
            else s->noise = x;
        } else {
            return sfb__error(-SFB_EFORMAT, "%s: unknown key '%.*s' (known: k, d, n, density, "
                              "noise, seed)", spec, (int)klen, item);
        }
#undef IS
        if (want) {
            return sfb__error(-SFB_EFORMAT, "%s: bad value '%.*s' for key '%.*s': expected %s",
                              spec, (int)vlen, v, (int)klen, item, want);
        }
    }
    return 0;
}

static double support_size(const struct sfb_synth_settings *s)
{
    double m = s->density * (double)s->d;
    return m < 1.0 ? 1.0 : m;
}

void sfb__synth_model(const struct sfb_synth_settings *s, float *w)
{
    struct sfb__rng rng;
    sfb__rng_seed2(&rng, s->seed, TAG_MODEL);
    double scale = LOGIT_STD / sqrt(support_size(s));
    size_t kd = (size_t)s->k * s->d;
    for (size_t i = 0; i < kd; i++) w[i] = (float)(sfb__rng_gauss(&rng) * scale);
}

static int check_settings(const struct sfb_synth_settings *s)
{
    if (s->k < 2 || s->d < 1 || s->n < 1 || !(s->density > 0.0 && s->density <= 1.0) ||
        !(s->noise >= 0.0 && isfinite(s->noise))) {
        return sfb__error(-EINVAL, "synth: invalid settings k=%" PRIu32 " d=%" PRIu32
                          " n=%" PRIu64 " density=%g noise=%g (need k >= 2, d >= 1, n >= 1, "
                          "density in (0, 1], noise >= 0)", s->k, s->d, s->n, s->density,
                          s->noise);
    }
    return 0;
}

/* Label of one sample from its support (cols, vals; cols NULL = dense). */
static int32_t label_of(const struct sfb_synth_settings *s, const float *w, const uint32_t *cols,
                        const float *vals, uint32_t m, struct sfb__rng *rng)
{
    int32_t best = 0;
    double best_z = -INFINITY;
    for (uint32_t c = 0; c < s->k; c++) {
        const float *wc = w + (size_t)c * s->d;
        double z = 0.0;
        if (cols) {
            for (uint32_t j = 0; j < m; j++) z += (double)wc[cols[j]] * (double)vals[j];
        } else {
            for (uint32_t j = 0; j < m; j++) z += (double)wc[j] * (double)vals[j];
        }
        z += s->noise * sfb__rng_gauss(rng);
        if (z > best_z) {
            best_z = z;
            best = (int32_t)c;
        }
    }
    return best;
}

/* Appends column j (its value comes later) to the growing CSR arrays. */
static int push_col(uint32_t **col, size_t *col_cap, float **val, size_t *val_cap, uint64_t nnz,
                    uint32_t j)
{
    if ((nnz + 1) * sizeof **col > *col_cap &&
        (sfb__reserve((void **)col, col_cap, (nnz + 1) * sizeof **col) ||
         sfb__reserve((void **)val, val_cap, (nnz + 1) * sizeof **val)))
        return -1;
    (*col)[nnz] = j;
    return 0;
}

/* The sparse rows: each sample's support by geometric skips (O(nnz) per
 * row, sorted for free), never empty, then its values and label, all from
 * the sample's own stream. -1 when out of memory (the caller frees). */
static int gen_sparse(const struct sfb_synth_settings *s, const struct sfb_shard *shard, uint64_t n,
                      uint64_t stream_seed, const float *w, int32_t *labels, uint64_t **prow_ptr,
                      uint32_t **pcol, float **pval)
{
    size_t col_cap = 0, val_cap = 0;
    uint64_t *row_ptr = *prow_ptr = malloc(((size_t)n + 1) * sizeof *row_ptr);
    if (!row_ptr) return -1;
    /* Reserve the expected size (+12%) to avoid most regrowth. */
    double expect = support_size(s) * (double)n * 1.125 + 16.0;
    size_t guess = expect < (double)(SIZE_MAX / 8) ? (size_t)expect : 16;
    if (sfb__reserve((void **)pcol, &col_cap, guess * sizeof **pcol) ||
        sfb__reserve((void **)pval, &val_cap, guess * sizeof **pval))
        return -1;
    const double log_q = sfb__rng_log(1.0 - s->density);
    uint64_t nnz = 0;
    row_ptr[0] = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct sfb__rng rng;
        sfb__rng_seed2(&rng, stream_seed, shard ? sfb_shard_global(shard, i) : i);
        uint64_t start = nnz;
        uint64_t j = 0;
        for (;;) {
            double u = 1.0 - sfb__rng_uniform(&rng); /* (0, 1] */
            double g = floor(sfb__rng_log(u) / log_q);
            if (!(g < (double)(s->d - j))) break;
            j += (uint64_t)g;
            if (push_col(pcol, &col_cap, pval, &val_cap, nnz, (uint32_t)j)) return -1;
            nnz++;
            j++;
            if (j >= s->d) break;
        }
        if (nnz == start) { /* never an empty sample: one uniform feature */
            if (push_col(pcol, &col_cap, pval, &val_cap, nnz, (uint32_t)sfb__rng_below(&rng, s->d)))
                return -1;
            nnz++;
        }
        for (uint64_t t = start; t < nnz; t++) (*pval)[t] = (float)sfb__rng_gauss(&rng);
        row_ptr[i + 1] = nnz;
        labels[i] = label_of(s, w, *pcol + start, *pval + start, (uint32_t)(nnz - start), &rng);
    }
    return 0;
}

int sfb__synth_generate(const struct sfb_synth_settings *s, uint64_t sample_seed,
                        const struct sfb_shard *shard, struct sfb_dataset *out)
{
    memset(out, 0, sizeof *out);
    int r = check_settings(s);
    if (r) return r;
    const int dense = s->density >= 1.0;
    /* sample i comes from the stream (seed, i) alone: a shard generates only
     * its rows, each identical to the row of the whole set */
    const uint64_t n = shard ? sfb_shard_rows(shard, s->n) : s->n;
    size_t kd, nd = 0;
    if (s->n > SIZE_MAX / sizeof(uint64_t) || sfb__mul_size(s->k, s->d, &kd) ||
        kd > SIZE_MAX / sizeof(float) ||
        (dense && (sfb__mul_size((size_t)n, s->d, &nd) || nd > SIZE_MAX / sizeof(float)))) {
        return sfb__error(-ENOMEM, "synth: k=%" PRIu32 " d=%" PRIu32 " n=%" PRIu64
                          " is too large for this machine", s->k, s->d, s->n);
    }
    float *w = malloc(kd * sizeof *w);
    int32_t *labels = malloc(n ? (size_t)n * sizeof *labels : 1);
    float *x = NULL, *val = NULL;
    uint64_t *row_ptr = NULL;
    uint32_t *col = NULL;
    if (!w || !labels) goto nomem;
    sfb__synth_model(s, w);
    uint64_t stream_seed = sfb__rng_mix(sample_seed ^ TAG_SAMPLE);

    if (dense) {
        if (!(x = malloc(nd ? nd * sizeof *x : 1))) goto nomem;
        for (uint64_t i = 0; i < n; i++) {
            const uint64_t g = shard ? sfb_shard_global(shard, i) : i;
            struct sfb__rng rng;
            sfb__rng_seed2(&rng, stream_seed, g);
            float *xi = x + (size_t)i * s->d;
            for (uint32_t j = 0; j < s->d; j++) xi[j] = (float)sfb__rng_gauss(&rng);
            labels[i] = label_of(s, w, NULL, xi, s->d, &rng);
        }
    } else if (gen_sparse(s, shard, n, stream_seed, w, labels, &row_ptr, &col, &val)) {
        goto nomem;
    }
    free(w);
    out->n = n;
    out->d = s->d;
    out->k = s->k;
    out->labels = labels;
    out->sparse = !dense;
    out->x = x;
    out->row_ptr = row_ptr;
    out->col = col;
    out->val = val;
    return 0;

nomem:
    free(w);
    free(labels);
    free(x);
    free(row_ptr);
    free(col);
    free(val);
    return sfb__error(-ENOMEM, "synth: out of memory (k=%" PRIu32 " d=%" PRIu32 " n=%" PRIu64 ")",
                      s->k, s->d, s->n);
}

int sfb_synth_generate(const struct sfb_synth_settings *s, struct sfb_dataset *out)
{
    SFB_ENTER();
    SFB_ARG(out);
    SFB_ARG(s);
    memset(out, 0, sizeof *out);
    int ret = SFB_CHECK_VERSION(s, "sfb_synth_settings", "sfb_synth_default_settings",
                                SFB_SYNTH_SETTINGS_VERSION);
    return ret ? ret : sfb__synth_generate(s, s->seed, NULL, out);
}
