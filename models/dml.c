/* Distance metric learning, Xing et al. (2002) form with a hinge on the
 * dissimilar pairs:
 *
 *   f(L) = Σ_sim ‖L δ‖² + λ Σ_dis max(0, 1 − ‖L δ‖²),   δ = x − y,
 *
 * L ∈ R^{K×D} (K = settings->proj_dim), metric M = LᵀL. Gradients per pair:
 * sim: 2 Lδ δᵀ; active dis (‖Lδ‖² < 1): −2λ Lδ δᵀ; inactive dis: 0. With
 * scale = −η/S the SFs of pair i are
 *   b_i = 2 Lδ_i (sim), −2λ Lδ_i (active dis), 0 (inactive dis);  c_i = δ_i,
 * so ΔL = scale · Σ b_i c_iᵀ is one SGD step on the mean pair loss. The
 * projections Lδ of the whole minibatch come from one sgemm B = C·Lᵀ written
 * straight into the b buffer and scaled in place.
 *
 * Pairs: without pair files, sample idx[i] is paired with a partner drawn
 * from a splitmix64 stream seeded by (seed, step, idx[i]) — step counts the
 * factors calls of this replica, i.e. its clock — asking for the same class
 * with probability 1/2 (rejection sampling, at most PARTNER_TRIES draws; the
 * pair's type is whatever the labels of the last draw say). With Bösen-style
 * pair files the same stream picks a file (1/2 each when both are given) and
 * a pair in it; idx[i] only seeds the draw.
 *
 * Init: L_ij ~ N(0, 1/(K·D)) from `seed`, so E‖Lδ‖² = ‖δ‖²/D, the mean
 * squared per-feature difference — about 0.1–0.2 on [0,1] pixel data: O(1)
 * and inside the margin, so dissimilar pairs start active.
 *
 * λ: the margin only sets the scale of L (L → √m·L maps margin 1 to m), so
 * λ alone balances the pull of every similar pair against the hinge. With
 * λ = 1 the pull wins: L shrinks until ~43 % of dissimilar pairs sit inside
 * the margin, so the hinge pushes on typical (far) dissimilar pairs like a
 * global between-class term against the global within-class pull, and
 * Fashion-MNIST k-NN gets worse than Euclidean. With λ = 30 (sfb's default:
 * default_lambda in the ops below) ~5 % stay inside: the hinge works on the close dissimilar
 * pairs that decide k-NN (docs/models.md has the numbers).
 *
 * evaluate: a seed-determined subset of the dataset (a partial Fisher–Yates
 * shuffle) of at most EVAL_QUERIES + EVAL_REFS samples: the first
 * nq = min(EVAL_QUERIES, max(1, m/5)) are queries, the rest references.
 * k-NN (majority of knn_k neighbours, ties to the nearest) under ‖L(x−y)‖
 * and under ‖x−y‖, both by sgemm on the gathered rows. loss is the mean pair
 * loss over pairs drawn (label rule, a fixed evaluation stream) for every
 * sample of the subset. */
#include "models/dml.h"

#include "models/model_internal.h"
#include "src/base/util.h"
#include "src/base/fileio.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARTNER_TRIES   64
#define EVAL_QUERIES    2000u
#define EVAL_REFS       8000u
#define EVAL_MAX_FLOATS ((uint64_t)1 << 24) /* gathered rows: 64 MiB at most */
#define EVAL_CHUNK      256u
#define KNN_MAX         100u
#define EVAL_STEP       UINT64_MAX /* pair stream of evaluate, apart from any clock */
#define MAX_PAIR_FILE   ((size_t)1 << 34)

struct pairs {
    uint64_t *ij; /* 2·n sample indices */
    uint32_t *line;
    uint64_t n;
    char *path;
};

struct dml {
    uint32_t k, d, knn_k;
    float lambda;
    uint64_t seed, step;
    float *l;
    struct pairs sim, dis;
    /* evaluate scratch, grown only */
    uint64_t *perm;
    float *g, *p, *dist, *norms, *delta, *dproj;
    int32_t *lab;
    uint8_t *is_sim; /* factors: pair type per minibatch entry */
    size_t is_sim_cap, perm_cap, g_cap, p_cap, dist_cap, norms_cap, delta_cap, dproj_cap, lab_cap;
};

static int pair_error(const char *path, uint32_t line, const char *what)
{
    return sfb__error(-SFB_EFORMAT, "%s:%u: %s", path, line, what);
}

/* "i j" between s and e (leading blanks skipped): NULL, or what is wrong. */
static const char *parse_pair(const char *s, const char *e, uint64_t v[2])
{
    for (int f = 0; f < 2; f++) {
        if (s == e || *s < '0' || *s > '9')
            return f ? "expected a second sample index" : "expected a sample index (unsigned integer)";
        uint64_t x = 0;
        while (s < e && *s >= '0' && *s <= '9') {
            if (x > (UINT64_MAX - 9) / 10) return "sample index too large";
            x = x * 10 + (uint64_t)(*s++ - '0');
        }
        v[f] = x;
        if (s < e && *s != ' ' && *s != '\t' && *s != '\r')
            return "unexpected character after a sample index";
        while (s < e && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
    }
    return s != e ? "more than two fields (expected \"i j\")" : NULL;
}

int sfb__dml_read_pairs(const char *path, uint64_t **pairs, uint32_t **lines, uint64_t *n)
{
    *pairs = NULL;
    *lines = NULL;
    *n = 0;
    uint8_t *buf;
    size_t len;
    int ret = sfb__read_file(path, MAX_PAIR_FILE, &buf, &len);
    if (ret) return ret;
    uint64_t cap = 0, cnt = 0;
    uint64_t *ij = NULL;
    uint32_t *ln = NULL;
    uint32_t line = 0;
    size_t pos = 0;
    while (pos < len) {
        size_t end = pos;
        while (end < len && buf[end] != '\n')
            end++;
        line++;
        const char *s = (const char *)buf + pos, *e = (const char *)buf + end;
        pos = end + 1;
        while (s < e && (*s == ' ' || *s == '\t' || *s == '\r'))
            s++;
        if (s == e || *s == '#') continue;
        uint64_t v[2];
        const char *why = parse_pair(s, e, v);
        if (why) {
            ret = pair_error(path, line, why);
            goto fail;
        }
        if (cnt == cap) {
            cap = cap ? 2 * cap : 1024;
            uint64_t *nij = realloc(ij, cap * 2 * sizeof *nij);
            if (!nij) goto nomem;
            ij = nij;
            uint32_t *nln = realloc(ln, cap * sizeof *nln);
            if (!nln) goto nomem;
            ln = nln;
        }
        ij[2 * cnt] = v[0];
        ij[2 * cnt + 1] = v[1];
        ln[cnt++] = line;
    }
    free(buf);
    if (cnt == 0) {
        free(ij);
        free(ln);
        return sfb__error(-SFB_EFORMAT, "%s: no pairs in file", path);
    }
    *pairs = ij;
    *lines = ln;
    *n = cnt;
    return 0;
nomem:
    ret = sfb__error(-ENOMEM, "%s: out of memory reading pairs", path);
fail:
    free(buf);
    free(ij);
    free(ln);
    return ret;
}

#define RESERVE(m, f, count)                                                                       \
    sfb__reserve((void **)&(m)->f, &(m)->f##_cap, (size_t)(count) * sizeof(*(m)->f))

static void pairs_free(struct pairs *p)
{
    free(p->ij);
    free(p->line);
    free(p->path);
    memset(p, 0, sizeof *p);
}

static int pairs_load(struct pairs *p, const char *path)
{
    if (!path) return 0;
    int ret = sfb__dml_read_pairs(path, &p->ij, &p->line, &p->n);
    if (ret) return ret;
    size_t l = strlen(path);
    if (!(p->path = malloc(l + 1))) return sfb__error(-ENOMEM, "dml: out of memory");
    memcpy(p->path, path, l + 1);
    return 0;
}

static void dml_fini(void *priv)
{
    struct dml *m = priv;
    free(m->l);
    pairs_free(&m->sim);
    pairs_free(&m->dis);
    free(m->perm);
    free(m->g);
    free(m->p);
    free(m->dist);
    free(m->norms);
    free(m->delta);
    free(m->dproj);
    free(m->lab);
    free(m->is_sim);
    memset(m, 0, sizeof *m);
}

static int dml_init(void *priv, const struct sfb_model_settings *s, uint32_t *n_matrices,
                    struct sfb_matrix *mats)
{
    struct dml *m = priv;
    if (s->d == 0 || s->proj_dim == 0)
        return sfb__error(-EINVAL, "dml: needs d > 0 features and a projection dimension > 0 (got d=%u proj-dim=%u)",
                          s->d, s->proj_dim);
    if (s->d >= INT_MAX || s->proj_dim >= INT_MAX)
        return sfb__error(-EINVAL, "dml: d=%u or proj-dim=%u too large", s->d, s->proj_dim);
    if (!(s->lambda > 0.0) || !isfinite(s->lambda))
        return sfb__error(-EINVAL,
                          "dml: lambda (weight of the dissimilar-pair hinge) must be finite and "
                          "> 0 (got %g); sfb's default is 30",
                          s->lambda);
    if (s->knn_k == 0 || s->knn_k > KNN_MAX)
        return sfb__error(-EINVAL, "dml: knn_k must be in [1, %u] (got %u)", KNN_MAX, s->knn_k);
    size_t n;
    if (sfb__mul_size(s->proj_dim, s->d, &n) || sfb__mul_size(n, sizeof(float), &n))
        return sfb__error(-EOVERFLOW, "dml: %u × %u parameters overflow", s->proj_dim, s->d);
    if (!(m->l = malloc(n)))
        return sfb__error(-ENOMEM, "dml: cannot allocate %u × %u parameters", s->proj_dim, s->d);
    m->k = s->proj_dim;
    m->d = s->d;
    m->knn_k = s->knn_k;
    m->lambda = (float)s->lambda;
    m->seed = s->seed;
    const double sd = 1.0 / sqrt((double)s->proj_dim * (double)s->d);
    struct sfb__rng g;
    sfb__rng_seed(&g, s->seed ^ 0x6A09E667F3BCC909ull);
    for (size_t q = 0; q < (size_t)m->k * m->d; q++)
        m->l[q] = (float)(sd * sfb__rng_gauss(&g));
    int ret = pairs_load(&m->sim, s->simi_pairs);
    if (!ret) ret = pairs_load(&m->dis, s->diff_pairs);
    if (ret) {
        dml_fini(m);
        return ret;
    }
    *n_matrices = 1;
    mats[0] = (struct sfb_matrix){.rows = m->k, .cols = m->d, .data = m->l};
    return 0;
}

static int check_data(const struct dml *m, const struct sfb_matrix *mats,
                      const struct sfb_dataset *data, int need_labels)
{
    if (mats[0].rows != m->k || mats[0].cols != m->d || mats[0].data == NULL)
        return sfb__error(-SFB_ESHAPE, "dml: parameter matrix is %u × %u, expected %u × %u",
                          mats[0].rows, mats[0].cols, m->k, m->d);
    if (data->d != m->d)
        return sfb__error(-SFB_ESHAPE, "dml: data has d=%u features, model expects %u", data->d,
                          m->d);
    if (data->n && need_labels && !data->labels)
        return sfb__error(-EINVAL, "dml: data has no labels (needed to form pairs)");
    if (data->n && (data->sparse ? !data->row_ptr : !data->x))
        return sfb__error(-EINVAL, "dml: data has no features");
    return 0;
}

/* Seeds the pair stream of sample i at `step`. */
static uint64_t pair_state(uint64_t seed, uint64_t step, uint64_t i)
{
    uint64_t st = seed ^ 0xBB67AE8584CAA73Bull;
    st = sfb__splitmix64(&st) ^ step;
    st = sfb__splitmix64(&st) ^ i;
    sfb__splitmix64(&st);
    return st;
}

/* Partner of sample i by the label rule; *sim says whether the pair is
 * similar (same label). */
static uint64_t pick_partner(const struct sfb_dataset *data, uint64_t i, uint64_t seed,
                             uint64_t step, int *sim)
{
    uint64_t st = pair_state(seed, step, i);
    const int want = (int)(sfb__splitmix64(&st) & 1);
    uint64_t j = i;
    *sim = 1;
    if (data->n < 2) return i;
    for (int t = 0; t < PARTNER_TRIES; t++) {
        j = sfb__splitmix64(&st) % data->n;
        if (j == i) continue;
        *sim = data->labels[j] == data->labels[i];
        if (*sim == want) break;
    }
    if (j == i) *sim = 1; /* every draw hit i: a zero pair */
    return j;
}

/* out[0..d) −= row j of data. */
static int sub_row(const struct sfb_dataset *data, uint64_t j, float *out)
{
    const uint32_t d = data->d;
    if (!data->sparse) {
        const float *x = data->x + j * d;
        for (uint32_t q = 0; q < d; q++)
            out[q] -= x[q];
        return 0;
    }
    for (uint64_t p = data->row_ptr[j]; p < data->row_ptr[j + 1]; p++) {
        if (data->col[p] >= d)
            return sfb__error(-SFB_ESHAPE, "dml: sample %llu has feature %u >= d=%u",
                              (unsigned long long)j, data->col[p], d);
        out[data->col[p]] -= data->val[p];
    }
    return 0;
}

/* The pair of minibatch entry `i` from the pair files. */
static int file_pair(const struct dml *m, const struct sfb_dataset *data, uint64_t i, uint64_t *a,
                     uint64_t *b, int *sim)
{
    uint64_t st = pair_state(m->seed, m->step, i);
    uint64_t r = sfb__splitmix64(&st);
    const struct pairs *p = (m->sim.n && (!m->dis.n || (r & 1))) ? &m->sim : &m->dis;
    uint64_t q = (r >> 1) % p->n;
    *sim = p == &m->sim;
    *a = p->ij[2 * q];
    *b = p->ij[2 * q + 1];
    if (*a >= data->n || *b >= data->n)
        return sfb__error(-EINVAL, "%s:%u: sample index %llu is outside the training set (n=%llu)",
                          p->path, p->line[q], (unsigned long long)(*a >= data->n ? *a : *b),
                          (unsigned long long)data->n);
    return 0;
}

/* Turns projections z = Lδ (k floats) into b in place; returns the loss. */
static double pair_grad(float *z, uint32_t k, int sim, float lambda)
{
    double q = 0.0;
    for (uint32_t r = 0; r < k; r++)
        q += (double)z[r] * z[r];
    float f;
    double loss;
    if (sim) {
        loss = q;
        f = 2.0f;
    } else if (q < 1.0) {
        loss = lambda * (1.0 - q);
        f = -2.0f * lambda;
    } else {
        loss = 0.0;
        f = 0.0f;
    }
    for (uint32_t r = 0; r < k; r++)
        z[r] *= f;
    return loss;
}

static int dml_factors(void *priv, const struct sfb_matrix *mats, const struct sfb_dataset *data,
                       const uint64_t *idx, uint32_t s, float eta, struct sfb_sf *out, double *loss)
{
    struct dml *m = priv;
    const int use_files = m->sim.n + m->dis.n > 0;
    int ret = check_data(m, mats, data, !use_files);
    if (ret) return ret;
    if (s > INT_MAX) return sfb__error(-EINVAL, "dml: minibatch of %u samples too large", s);
    for (uint32_t i = 0; i < s; i++)
        if (idx[i] >= data->n)
            return sfb__error(-EINVAL, "dml: sample index %llu out of range (n=%llu)",
                              (unsigned long long)idx[i], (unsigned long long)data->n);
    const uint32_t k = m->k, d = m->d;
    if ((ret = sfb_sf_reserve(out, k, d, s, 0, 0))) return ret;
    if (RESERVE(m, is_sim, s)) return sfb__error(-ENOMEM, "dml: out of memory");
    for (uint32_t i = 0; i < s; i++) {
        uint64_t a = idx[i], b;
        int sim;
        if (use_files) {
            if ((ret = file_pair(m, data, idx[i], &a, &b, &sim))) return ret;
        } else {
            b = pick_partner(data, a, m->seed, m->step, &sim);
        }
        float *ci = out->c + (size_t)i * d;
        if ((ret = sfb__model_dense_row(data, a, ci, "dml"))) return ret;
        if ((ret = sub_row(data, b, ci))) return ret;
        m->is_sim[i] = (uint8_t)sim;
    }
    /* Projections of the whole minibatch: B ← C·Lᵀ (S × K). */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s, (int)k, (int)d, 1.0f, out->c,
                (int)d, mats[0].data, (int)d, 0.0f, out->b, (int)k);
    double total = 0.0;
    for (uint32_t i = 0; i < s; i++)
        total += pair_grad(out->b + (size_t)i * k, k, m->is_sim[i], m->lambda);
    m->step++;
    out->matrix = 0;
    out->scale = -eta / (float)s;
    *loss += total;
    return 0;
}

/* k-NN accuracy: rows [0, nq) of f (width w) are queries, [nq, nq+nr)
 * references. Squared distances up to the query's own norm, which does not
 * change the ranking: ‖r‖² − 2 q·r, one sgemm per chunk of queries. */
static double knn_accuracy(struct dml *m, const float *f, uint32_t w, uint32_t nq, uint32_t nr)
{
    const uint32_t kk = SFB_MIN(m->knn_k, nr);
    const float *fr = f + (size_t)nq * w;
    for (uint32_t j = 0; j < nr; j++) {
        double acc = 0.0;
        for (uint32_t q = 0; q < w; q++)
            acc += (double)fr[(size_t)j * w + q] * fr[(size_t)j * w + q];
        m->norms[j] = (float)acc;
    }
    uint64_t correct = 0;
    float bd[KNN_MAX];
    int32_t bl[KNN_MAX];
    for (uint32_t q0 = 0; q0 < nq; q0 += EVAL_CHUNK) {
        uint32_t ch = SFB_MIN(EVAL_CHUNK, nq - q0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)ch, (int)nr, (int)w, -2.0f,
                    f + (size_t)q0 * w, (int)w, fr, (int)w, 0.0f, m->dist, (int)nr);
        for (uint32_t i = 0; i < ch; i++) {
            const float *di = m->dist + (size_t)i * nr;
            uint32_t have = 0;
            for (uint32_t j = 0; j < nr; j++) {
                float v = di[j] + m->norms[j];
                if (have == kk && !(v < bd[kk - 1])) continue;
                uint32_t p = have < kk ? have++ : kk - 1;
                while (p > 0 && bd[p - 1] > v) {
                    bd[p] = bd[p - 1];
                    bl[p] = bl[p - 1];
                    p--;
                }
                bd[p] = v;
                bl[p] = m->lab[nq + j];
            }
            /* Majority vote; ties go to the label met first, i.e. nearest. */
            int32_t best = bl[0];
            uint32_t best_n = 0;
            for (uint32_t a = 0; a < have; a++) {
                uint32_t c = 0;
                for (uint32_t b = 0; b < have; b++)
                    c += bl[b] == bl[a];
                if (c > best_n) best_n = c, best = bl[a];
            }
            correct += best == m->lab[q0 + i];
        }
    }
    return (double)correct / (double)nq;
}

static int dml_evaluate(void *priv, const struct sfb_matrix *mats, const struct sfb_dataset *data,
                        struct sfb_eval *out)
{
    struct dml *m = priv;
    int ret = check_data(m, mats, data, 1);
    if (ret) return ret;
    out->n = data->n;
    if (data->n == 0) return 0;
    const uint32_t k = m->k, d = m->d;
    const float *l = mats[0].data;
    uint64_t total = SFB_MIN(data->n, (uint64_t)EVAL_QUERIES + EVAL_REFS);
    total = SFB_MIN(total, SFB_MAX(EVAL_MAX_FLOATS / d, 2));
    const uint32_t mt = (uint32_t)total;
    const uint32_t nq = SFB_MIN(EVAL_QUERIES, SFB_MAX(1, mt / 5)), nr = mt - nq;
    if (RESERVE(m, perm, data->n) || RESERVE(m, g, (uint64_t)mt * d) ||
        RESERVE(m, p, (uint64_t)mt * k) || RESERVE(m, lab, mt) || RESERVE(m, norms, nr + 1) ||
        RESERVE(m, dist, (uint64_t)EVAL_CHUNK * (nr + 1)) ||
        RESERVE(m, delta, (uint64_t)EVAL_CHUNK * d) || RESERVE(m, dproj, (uint64_t)EVAL_CHUNK * k))
        return sfb__error(-ENOMEM, "dml: cannot allocate evaluation scratch");
    /* The subset: a partial Fisher–Yates shuffle, the same for every call. */
    uint64_t st = m->seed ^ 0x3C6EF372FE94F82Bull;
    for (uint64_t i = 0; i < data->n; i++)
        m->perm[i] = i;
    for (uint32_t i = 0; i < mt; i++) {
        uint64_t j = i + sfb__splitmix64(&st) % (data->n - i);
        uint64_t t = m->perm[i];
        m->perm[i] = m->perm[j];
        m->perm[j] = t;
    }
    for (uint32_t i = 0; i < mt; i++) {
        if ((ret = sfb__model_dense_row(data, m->perm[i], m->g + (size_t)i * d, "dml"))) return ret;
        m->lab[i] = data->labels[m->perm[i]];
    }
    /* Pair objective, chunked: Δ rows, then one sgemm for their projections. */
    double obj = 0.0, sim_q = 0.0, dis_loss = 0.0;
    uint64_t n_sim = 0, n_act = 0;
    for (uint32_t i0 = 0; i0 < mt; i0 += EVAL_CHUNK) {
        uint32_t ch = SFB_MIN(EVAL_CHUNK, mt - i0);
        int sim[EVAL_CHUNK];
        for (uint32_t i = 0; i < ch; i++) {
            float *di = m->delta + (size_t)i * d;
            memcpy(di, m->g + (size_t)(i0 + i) * d, (size_t)d * sizeof(float));
            uint64_t j = pick_partner(data, m->perm[i0 + i], m->seed, EVAL_STEP, &sim[i]);
            if ((ret = sub_row(data, j, di))) return ret;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)ch, (int)k, (int)d, 1.0f,
                    m->delta, (int)d, l, (int)d, 0.0f, m->dproj, (int)k);
        for (uint32_t i = 0; i < ch; i++) {
            double li = pair_grad(m->dproj + (size_t)i * k, k, sim[i], m->lambda);
            obj += li;
            if (sim[i]) n_sim++, sim_q += li;
            else n_act += li > 0.0, dis_loss += li;
        }
    }
    /* Where the objective stands: the pull of the similar pairs against the
     * share of dissimilar pairs still inside the margin. */
    SFB_LOG_D("dml evaluate: %llu similar pairs, mean ||L d||^2 %.4g; %llu dissimilar, "
              "%.1f%% inside the margin, mean hinge %.4g",
              (unsigned long long)n_sim, n_sim ? sim_q / (double)n_sim : 0.0,
              (unsigned long long)(mt - n_sim),
              mt > n_sim ? 100.0 * (double)n_act / (double)(mt - n_sim) : 0.0,
              mt > n_sim ? dis_loss / (double)(mt - n_sim) : 0.0);
    out->loss = obj / (double)mt;
    if (nr > 0) {
        /* Projected rows P = G·Lᵀ, then k-NN in both spaces. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)mt, (int)k, (int)d, 1.0f, m->g,
                    (int)d, l, (int)d, 0.0f, m->p, (int)k);
        out->knn_accuracy = knn_accuracy(m, m->p, k, nq, nr);
        out->knn_accuracy_euclid = knn_accuracy(m, m->g, d, nq, nr);
    }
    out->accuracy = out->knn_accuracy;
    return 0;
}

/* Checkpoints: the pair stream's step (8 bytes, little-endian). */
static size_t dml_state_save(void *priv, uint8_t *out, size_t cap)
{
    const struct dml *m = priv;
    if (cap < 8) return 0;
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(m->step >> (8 * i));
    return 8;
}

static int dml_state_load(void *priv, const uint8_t *in, size_t len)
{
    struct dml *m = priv;
    if (len != 8) return -EINVAL;
    m->step = 0;
    for (int i = 0; i < 8; i++) m->step |= (uint64_t)in[i] << (8 * i);
    return 0;
}

static void dml_defaults(struct sfb_model_settings *s)
{
    s->proj_dim = 64;
    s->knn_k = 5;
}

static uint32_t dml_shapes(const struct sfb_model_settings *s, uint64_t *rows, uint64_t *cols)
{
    rows[0] = s->proj_dim;
    cols[0] = s->d;
    return 1;
}

static int dml_eval_text(const struct sfb_eval *ev, char *buf, size_t cap)
{
    if (!isfinite(ev->knn_accuracy)) return snprintf(buf, cap, "%s", "");
    return snprintf(buf, cap, "k-NN accuracy: learned metric %.2f%%, Euclidean %.2f%%\n",
                    100 * ev->knn_accuracy, 100 * ev->knn_accuracy_euclid);
}

static const struct sfb_model_option dml_options[] = {
    {"proj-dim", "K", "projection dimension (default 64)", SFB_MODEL_OPT_U32,
     offsetof(struct sfb_model_settings, proj_dim), 1, 1u << 20},
    {"knn-k", "K", "neighbours of the k-NN evaluation (default 5)", SFB_MODEL_OPT_U32,
     offsetof(struct sfb_model_settings, knn_k), 1, KNN_MAX},
    {"simi-pairs", "FILE", "similar pairs, lines \"i j\" (default: sampled\nfrom the labels by seed)",
     SFB_MODEL_OPT_PATH, offsetof(struct sfb_model_settings, simi_pairs), 0, 0},
    {"diff-pairs", "FILE", "dissimilar pairs, as --simi-pairs", SFB_MODEL_OPT_PATH,
     offsetof(struct sfb_model_settings, diff_pairs), 0, 0},
    {0},
};

const struct sfb_model_ops sfb__dml_ops = {
    .name = "dml",
    .priv_size = sizeof(struct dml),
    .init = dml_init,
    .fini = dml_fini,
    .factors = dml_factors,
    .apply_local = NULL,
    .evaluate = dml_evaluate,
    .state_save = dml_state_save,
    .state_load = dml_state_load,
    .summary = "distance metric learning, one rank x d projection",
    /* λ = 1 loses to the Euclidean metric (top of this file, docs/models.md) */
    .default_lambda = 30.0,
    .default_lr = 0.01,
    .defaults = dml_defaults,
    .shapes = dml_shapes,
    .eval_text = dml_eval_text,
    .options = dml_options,
};
