/* Sparse coding with an L1 penalty on the codes:
 *
 *   f(B) = Σ_i ‖x_i − B α_i‖² + λ‖α_i‖₁,   ‖B_k‖ ≤ 1 for every column k,
 *
 * B ∈ R^{D×K} (K = settings->dict_size). For a minibatch the codes α_i come
 * from `code_steps` FISTA steps from α = 0 on the local replica, and are then
 * held fixed: ∇_B f_i = −2 (x_i − Bα_i) α_iᵀ, so with
 *   b_i = r_i = x_i − Bα_i  (D),   c_i = α_i  (K),   scale = +2η/S
 * ΔB = scale · Σ b_i c_iᵀ is one SGD step on the mean objective. c is dense:
 * K is small, and one sgemm rebuilds ΔB. apply_local projects every column
 * onto the unit ball (the runtime calls it after applying each clock's
 * updates), the projected-SGD step for the constraint.
 *
 * FISTA: the smooth part has gradient 2(αG − h) with G = BᵀB, h = Bᵀx, whose
 * Lipschitz constant is 2λ_max(G). λ_max comes from POWER_ITERS power
 * iterations from a fixed start (deterministic), enlarged by 10% and capped
 * by the Gershgorin bound max_i Σ_j |G_ij| ≥ λ_max, so the step 1/(2λ_max)
 * stays safe when the power estimate has not converged. The minibatch is
 * coded at once: H = X·B and each step's α·G are sgemms.
 *
 * Init: B_ij ~ N(0, 1) from `seed`, every column scaled to unit norm.
 *
 * evaluate: over every sample, chunked: loss = mean of ‖x − Bα‖² + λ‖α‖₁,
 * recon_error = Σ‖x − Bα‖² / Σ‖x‖² (ratio of sums: a zero sample, e.g. a
 * flat patch after mean removal, does not divide by zero), sparsity = mean
 * fraction of exactly-zero code entries. accuracy is NaN. recon_error_sparse
 * is the same ratio with codes of exactly T = max(1, min(D, K)/8) nonzeros
 * from orthogonal matching pursuit, so two dictionaries can be compared at
 * the same sparsity (FISTA's sparsity depends on the dictionary). */
#include "models/sc.h"

#include "models/model_internal.h"
#include "src/base/util.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POWER_ITERS 50
#define EVAL_CHUNK  256u

struct sc {
    uint32_t d, k, steps;
    float lambda;
    float *bm;               /* D × K dictionary */
    float *gram;             /* K × K */
    double *colsq;           /* K: column norms for the projection */
    float *v, *w;            /* K: power iteration */
    float *h, *y, *aold, *t; /* rows × K FISTA scratch */
    float *x, *a;            /* evaluate chunk: EVAL_CHUNK × D rows, EVAL_CHUNK × K codes */
    double *chol, *omp;      /* OMP: T × T Cholesky factor; 3T + K work */
    uint32_t *sel;           /* OMP: T selected atoms */
    size_t h_cap, y_cap, aold_cap, t_cap, x_cap, a_cap, chol_cap, omp_cap, sel_cap;
};

#define RESERVE(m, f, count)                                                                       \
    sfb__reserve((void **)&(m)->f, &(m)->f##_cap, (size_t)(count) * sizeof(*(m)->f))

static void sc_fini(void *priv)
{
    struct sc *m = priv;
    free(m->bm);
    free(m->gram);
    free(m->colsq);
    free(m->v);
    free(m->w);
    free(m->h);
    free(m->y);
    free(m->aold);
    free(m->t);
    free(m->x);
    free(m->a);
    free(m->chol);
    free(m->omp);
    free(m->sel);
    memset(m, 0, sizeof *m);
}

static void project_columns(struct sc *m, float *bm)
{
    const uint32_t d = m->d, k = m->k;
    for (uint32_t j = 0; j < k; j++)
        m->colsq[j] = 0.0;
    for (uint32_t r = 0; r < d; r++)
        for (uint32_t j = 0; j < k; j++)
            m->colsq[j] += (double)bm[(size_t)r * k + j] * bm[(size_t)r * k + j];
    for (uint32_t j = 0; j < k; j++)
        m->v[j] = m->colsq[j] > 1.0 ? (float)(1.0 / sqrt(m->colsq[j])) : 1.0f;
    for (uint32_t r = 0; r < d; r++)
        for (uint32_t j = 0; j < k; j++)
            bm[(size_t)r * k + j] *= m->v[j];
}

static int sc_init(void *priv, const struct sfb_model_settings *s, uint32_t *n_matrices,
                   struct sfb_matrix *mats)
{
    struct sc *m = priv;
    if (s->d == 0 || s->dict_size == 0)
        return sfb__error(-EINVAL,
                          "sc: needs d > 0 features and dict_size > 0 (got d=%u dict_size=%u)",
                          s->d, s->dict_size);
    if (s->d >= INT_MAX || s->dict_size >= INT_MAX / 2)
        return sfb__error(-EINVAL, "sc: d=%u or dict_size=%u too large", s->d, s->dict_size);
    if (!(s->lambda >= 0.0) || !isfinite(s->lambda))
        return sfb__error(-EINVAL, "sc: lambda (L1 weight) must be finite and >= 0 (got %g)",
                          s->lambda);
    if (s->code_steps == 0 || s->code_steps > 10000)
        return sfb__error(-EINVAL, "sc: code_steps must be in [1, 10000] (got %u)", s->code_steps);
    size_t n, g;
    if (sfb__mul_size(s->d, s->dict_size, &n) || sfb__mul_size(n, sizeof(float), &n) ||
        sfb__mul_size(s->dict_size, s->dict_size, &g) || sfb__mul_size(g, sizeof(float), &g))
        return sfb__error(-EOVERFLOW, "sc: %u × %u parameters overflow", s->d, s->dict_size);
    m->d = s->d;
    m->k = s->dict_size;
    m->steps = s->code_steps;
    m->lambda = (float)s->lambda;
    m->bm = malloc(n);
    m->gram = malloc(g);
    m->colsq = malloc(sizeof(double) * m->k);
    m->v = malloc(sizeof(float) * m->k);
    m->w = malloc(sizeof(float) * m->k);
    if (!m->bm || !m->gram || !m->colsq || !m->v || !m->w) {
        sc_fini(m);
        return sfb__error(-ENOMEM, "sc: cannot allocate a %u × %u dictionary", s->d, s->dict_size);
    }
    struct sfb__rng init;
    sfb__rng_seed(&init, s->seed ^ 0x510E527FADE682D1ull);
    for (size_t q = 0; q < (size_t)m->d * m->k; q++)
        m->bm[q] = (float)sfb__rng_gauss(&init);
    /* Unit columns: the projection with every norm forced to 1. */
    for (uint32_t j = 0; j < m->k; j++)
        m->colsq[j] = 0.0;
    for (uint32_t r = 0; r < m->d; r++)
        for (uint32_t j = 0; j < m->k; j++)
            m->colsq[j] += (double)m->bm[(size_t)r * m->k + j] * m->bm[(size_t)r * m->k + j];
    for (uint32_t r = 0; r < m->d; r++)
        for (uint32_t j = 0; j < m->k; j++)
            m->bm[(size_t)r * m->k + j] /= (float)sqrt(m->colsq[j] > 0 ? m->colsq[j] : 1.0);
    *n_matrices = 1;
    mats[0] = (struct sfb_matrix){.rows = m->d, .cols = m->k, .data = m->bm};
    return 0;
}

static int check_data(const struct sc *m, const struct sfb_matrix *mats,
                      const struct sfb_dataset *data)
{
    if (mats[0].rows != m->d || mats[0].cols != m->k || mats[0].data == NULL)
        return sfb__error(-SFB_ESHAPE, "sc: dictionary is %u × %u, expected %u × %u", mats[0].rows,
                          mats[0].cols, m->d, m->k);
    if (data->d != m->d)
        return sfb__error(-SFB_ESHAPE, "sc: data has d=%u features, model expects %u", data->d,
                          m->d);
    if (data->n && (data->sparse ? !data->row_ptr : !data->x))
        return sfb__error(-EINVAL, "sc: data has no features");
    return 0;
}

/* G = BᵀB and a safe λ_max(G) (see the top comment). */
static double gram_lmax(struct sc *m, const float *bm)
{
    const int k = (int)m->k, d = (int)m->d;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, k, d, 1.0f, bm, k, bm, k, 0.0f, m->gram,
                k);
    double gersh = 0.0;
    for (int i = 0; i < k; i++) {
        double r = 0.0;
        for (int j = 0; j < k; j++)
            r += fabs(m->gram[(size_t)i * k + j]);
        gersh = r > gersh ? r : gersh;
    }
    for (int j = 0; j < k; j++)
        m->v[j] = (float)(1.0 / sqrt((double)k));
    double est = 0.0;
    for (int it = 0; it < POWER_ITERS; it++) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, k, k, 1.0f, m->gram, k, m->v, 1, 0.0f, m->w, 1);
        double nrm = 0.0;
        for (int j = 0; j < k; j++)
            nrm += (double)m->w[j] * m->w[j];
        nrm = sqrt(nrm);
        if (!(nrm > 0.0)) return 0.0;
        est = nrm;
        for (int j = 0; j < k; j++)
            m->v[j] = (float)(m->w[j] / nrm);
    }
    return SFB_MIN(gersh, 1.1 * est);
}

/* Codes of `rows` samples X (rows × D) into A (rows × K) by FISTA. */
static int codes(struct sc *m, const float *bm, const float *x, uint32_t rows, float *a)
{
    const uint32_t k = m->k, d = m->d;
    const size_t cnt = (size_t)rows * k;
    if (RESERVE(m, h, cnt) || RESERVE(m, y, cnt) || RESERVE(m, aold, cnt) || RESERVE(m, t, cnt))
        return sfb__error(-ENOMEM, "sc: cannot allocate code scratch");
    memset(a, 0, cnt * sizeof(float));
    double lmax = gram_lmax(m, bm);
    /* H = X·B (rows × K): Bᵀx_i per row (evaluate's OMP reuses it). */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)k, (int)d, 1.0f, x,
                (int)d, bm, (int)k, 0.0f, m->h, (int)k);
    if (!(lmax > 0.0)) return 0; /* B = 0: every code stays 0 */
    const float g2 = (float)(1.0 / lmax); /* 2·step, step = 1/(2λ_max) */
    const float thr = (float)(m->lambda / (2.0 * lmax));
    memset(m->y, 0, cnt * sizeof(float));
    memset(m->aold, 0, cnt * sizeof(float));
    double tk = 1.0;
    for (uint32_t it = 0; it < m->steps; it++) {
        if (it == 0)
            memset(m->t, 0, cnt * sizeof(float));
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)k, (int)k, 1.0f,
                        m->y, (int)k, m->gram, (int)k, 0.0f, m->t, (int)k);
        double tk1 = 0.5 * (1.0 + sqrt(1.0 + 4.0 * tk * tk));
        float beta = (float)((tk - 1.0) / tk1);
        tk = tk1;
        for (size_t q = 0; q < cnt; q++) {
            float u = m->y[q] - g2 * (m->t[q] - m->h[q]);
            float v = u > thr ? u - thr : (u < -thr ? u + thr : 0.0f);
            a[q] = v;
            m->y[q] = v + beta * (v - m->aold[q]);
            m->aold[q] = v;
        }
    }
    return 0;
}

/* Gathers the samples into x (rows × D). */
static int gather(const struct sfb_dataset *data, const uint64_t *idx, uint64_t first,
                  uint32_t rows, float *x)
{
    for (uint32_t i = 0; i < rows; i++) {
        uint64_t r = idx ? idx[i] : first + i;
        int ret = sfb__model_dense_row(data, r, x + (size_t)i * data->d, "sc");
        if (ret) return ret;
    }
    return 0;
}

/* x ← x − A·Bᵀ in place. */
static void residual(const struct sc *m, const float *bm, const float *a, uint32_t rows, float *x)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)m->d, (int)m->k, -1.0f, a,
                (int)m->k, bm, (int)m->k, 1.0f, x, (int)m->d);
}

static double sumsq(const float *x, size_t n)
{
    double acc = 0.0;
    for (size_t q = 0; q < n; q++)
        acc += (double)x[q] * x[q];
    return acc;
}

static double sumabs(const float *x, size_t n)
{
    double acc = 0.0;
    for (size_t q = 0; q < n; q++)
        acc += fabs((double)x[q]);
    return acc;
}

static int sc_factors(void *priv, const struct sfb_matrix *mats, const struct sfb_dataset *data,
                      const uint64_t *idx, uint32_t s, float eta, struct sfb_sf *out, double *loss)
{
    struct sc *m = priv;
    int ret = check_data(m, mats, data);
    if (ret) return ret;
    if (s > INT_MAX) return sfb__error(-EINVAL, "sc: minibatch of %u samples too large", s);
    for (uint32_t i = 0; i < s; i++)
        if (idx[i] >= data->n)
            return sfb__error(-EINVAL, "sc: sample index %llu out of range (n=%llu)",
                              (unsigned long long)idx[i], (unsigned long long)data->n);
    const float *bm = mats[0].data;
    if ((ret = sfb_sf_reserve(out, m->d, m->k, s, 0, 0))) return ret;
    if ((ret = gather(data, idx, 0, s, out->b))) return ret;
    if ((ret = codes(m, bm, out->b, s, out->c))) return ret;
    residual(m, bm, out->c, s, out->b);
    *loss += sumsq(out->b, (size_t)s * m->d) + m->lambda * sumabs(out->c, (size_t)s * m->k);
    out->matrix = 0;
    out->scale = 2.0f * eta / (float)s;
    return 0;
}

static void sc_apply_local(void *priv, struct sfb_matrix *mats, float eta)
{
    project_columns(priv, mats[0].data);
}

/* Nonzeros per code of the fixed-sparsity evaluation: D/8 for K ≥ D (8 of
 * 128 atoms for 8×8 patches, sparsity 93.75 %). */
static uint32_t omp_nonzeros(const struct sc *m)
{
    uint32_t t = SFB_MIN(m->d, m->k) / 8;
    return t ? t : 1;
}

/* T-sparse codes of `rows` samples by Batch-OMP (Rubinstein, Zibulevsky and
 * Elad 2008): with G = BᵀB (m->gram, set by the caller) and h = Bᵀx (m->h)
 * the correlations of the residual are Bᵀr = h − G_{:,S} α_S, so no residual
 * is formed. Each step adds the atom of largest |B_jᵀr| / ‖B_j‖ and solves
 * G_SS α_S = h_S by an incrementally grown Cholesky factor (double). An atom
 * (numerically) in the span of those chosen ends the code early, so a code
 * has at most T nonzeros; zero columns are never chosen. */
static void omp_codes(struct sc *m, uint32_t rows, uint32_t tmax, float *a)
{
    const uint32_t k = m->k;
    double *c = m->omp, *hs = c + k, *alpha = hs + tmax, *w = alpha + tmax;
    double *l = m->chol;
    memset(a, 0, (size_t)rows * k * sizeof(float));
    for (uint32_t i = 0; i < rows; i++) {
        const float *h = m->h + (size_t)i * k;
        float *ai = a + (size_t)i * k;
        uint32_t ns = 0;
        for (uint32_t j = 0; j < k; j++)
            c[j] = h[j];
        while (ns < tmax) {
            uint32_t best = UINT32_MAX;
            double bv = 0.0;
            for (uint32_t j = 0; j < k; j++) {
                double g = m->gram[(size_t)j * k + j];
                if (!(g > 1e-12)) continue;
                double v = fabs(c[j]) / sqrt(g);
                int taken = 0;
                for (uint32_t q = 0; q < ns; q++)
                    taken |= m->sel[q] == j;
                if (!taken && v > bv) {
                    bv = v;
                    best = j;
                }
            }
            if (best == UINT32_MAX) break; /* residual orthogonal to every atom */
            /* New Cholesky row: L w = G_{S,best}, diagonal sqrt(G_bb − wᵀw). */
            double ww = 0.0;
            for (uint32_t q = 0; q < ns; q++) {
                double v = m->gram[(size_t)m->sel[q] * k + best];
                for (uint32_t r = 0; r < q; r++)
                    v -= l[(size_t)q * tmax + r] * w[r];
                w[q] = v / l[(size_t)q * tmax + q];
                ww += w[q] * w[q];
            }
            double dg = m->gram[(size_t)best * k + best] - ww;
            if (!(dg > 1e-6 * m->gram[(size_t)best * k + best])) break; /* G is float */
            for (uint32_t q = 0; q < ns; q++)
                l[(size_t)ns * tmax + q] = w[q];
            l[(size_t)ns * tmax + ns] = sqrt(dg);
            m->sel[ns] = best;
            hs[ns] = h[best];
            ns++;
            /* α_S = L⁻ᵀ L⁻¹ h_S */
            for (uint32_t q = 0; q < ns; q++) {
                double v = hs[q];
                for (uint32_t r = 0; r < q; r++)
                    v -= l[(size_t)q * tmax + r] * w[r];
                w[q] = v / l[(size_t)q * tmax + q];
            }
            for (uint32_t q = ns; q-- > 0;) {
                double v = w[q];
                for (uint32_t r = q + 1; r < ns; r++)
                    v -= l[(size_t)r * tmax + q] * alpha[r];
                alpha[q] = v / l[(size_t)q * tmax + q];
            }
            for (uint32_t j = 0; j < k; j++) {
                double v = h[j];
                for (uint32_t q = 0; q < ns; q++)
                    v -= m->gram[(size_t)j * k + m->sel[q]] * alpha[q];
                c[j] = v;
            }
        }
        for (uint32_t q = 0; q < ns; q++)
            ai[m->sel[q]] = (float)alpha[q];
    }
}

static int sc_evaluate(void *priv, const struct sfb_matrix *mats, const struct sfb_dataset *data,
                       struct sfb_eval *out)
{
    struct sc *m = priv;
    int ret = check_data(m, mats, data);
    if (ret) return ret;
    out->n = data->n;
    if (data->n == 0) return 0;
    if (RESERVE(m, x, (size_t)EVAL_CHUNK * m->d) || RESERVE(m, a, (size_t)EVAL_CHUNK * m->k))
        return sfb__error(-ENOMEM, "sc: cannot allocate evaluation scratch");
    const uint32_t tmax = omp_nonzeros(m);
    if (RESERVE(m, chol, (size_t)tmax * tmax) || RESERVE(m, omp, 3 * (size_t)tmax + m->k) ||
        RESERVE(m, sel, tmax))
        return sfb__error(-ENOMEM, "sc: cannot allocate evaluation scratch");
    const float *bm = mats[0].data;
    double xx = 0.0, rr = 0.0, l1 = 0.0, rs = 0.0;
    uint64_t zeros = 0;
    for (uint64_t r0 = 0; r0 < data->n; r0 += EVAL_CHUNK) {
        uint32_t ch = (uint32_t)SFB_MIN((uint64_t)EVAL_CHUNK, data->n - r0);
        if ((ret = gather(data, NULL, r0, ch, m->x))) return ret;
        xx += sumsq(m->x, (size_t)ch * m->d);
        if ((ret = codes(m, bm, m->x, ch, m->a))) return ret;
        residual(m, bm, m->a, ch, m->x);
        rr += sumsq(m->x, (size_t)ch * m->d);
        l1 += sumabs(m->a, (size_t)ch * m->k);
        for (size_t q = 0; q < (size_t)ch * m->k; q++)
            zeros += m->a[q] == 0.0f;
        /* Fixed sparsity: m->gram and m->h (= X·B) still hold this chunk's
         * G and H from codes(); the samples are gathered again because the
         * residual overwrote them. */
        if ((ret = gather(data, NULL, r0, ch, m->x))) return ret;
        omp_codes(m, ch, tmax, m->a);
        residual(m, bm, m->a, ch, m->x);
        rs += sumsq(m->x, (size_t)ch * m->d);
    }
    const double n = (double)data->n;
    out->loss = (rr + m->lambda * l1) / n;
    out->recon_error = xx > 0.0 ? rr / xx : NAN;
    out->sparsity = (double)zeros / (n * m->k);
    out->recon_error_sparse = xx > 0.0 ? rs / xx : NAN;
    out->sparse_nonzeros = tmax;
    return 0;
}

static void sc_defaults(struct sfb_model_settings *s)
{
    s->dict_size = 128;
    s->code_steps = 20;
}

static uint32_t sc_shapes(const struct sfb_model_settings *s, uint64_t *rows, uint64_t *cols)
{
    rows[0] = s->d;
    cols[0] = s->dict_size;
    return 1;
}

static int sc_eval_text(const struct sfb_eval *ev, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s", "");
    if (isfinite(ev->recon_error))
        n = snprintf(buf, cap, "reconstruction error %.4f, code sparsity %.2f%%\n",
                     ev->recon_error, 100 * ev->sparsity);
    if (n < 0) return n;
    size_t used = (size_t)n < cap ? (size_t)n : cap;
    if (isfinite(ev->recon_error_sparse)) {
        int m = snprintf(buf + used, cap - used,
                         "reconstruction error at %u nonzeros per code (OMP) %.4f\n",
                         ev->sparse_nonzeros, ev->recon_error_sparse);
        if (m < 0) return m;
        n += m;
    }
    return n;
}

static const struct sfb_model_option sc_options[] = {
    {"dict-size", "K", "dictionary atoms (default 128)", SFB_MODEL_OPT_U32,
     offsetof(struct sfb_model_settings, dict_size), 1, 1u << 20},
    {"code-steps", "N", "FISTA steps per code (default 20)", SFB_MODEL_OPT_U32,
     offsetof(struct sfb_model_settings, code_steps), 1, 1u << 20},
    {0},
};

const struct sfb_model_ops sfb__sc_ops = {
    .name = "sc",
    .priv_size = sizeof(struct sc),
    .init = sc_init,
    .fini = sc_fini,
    .factors = sc_factors,
    .apply_local = sc_apply_local,
    .evaluate = sc_evaluate,
    .summary = "sparse coding, one d x dict-size dictionary",
    .default_lambda = 0.1,
    .default_lr = 1.0,
    .defaults = sc_defaults,
    .shapes = sc_shapes,
    .eval_text = sc_eval_text,
    .options = sc_options,
};
