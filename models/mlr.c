/* Multinomial logistic regression with intercept and optional L2.
 *
 * A is K × (D+1), its last column the bias. For a minibatch of S samples:
 *   c_i = [u_i; 1],  b_i = softmax(A c_i) − e_{y_i},  scale = −η/S,
 * so ΔA = scale · Σ_i b_i c_iᵀ is one SGD step on the mean cross-entropy.
 *
 * L2 (λ > 0) is not part of the SFs: every replica applies the decay
 * A ← (1 − ηλ)·A itself once per clock (apply_local), which keeps the SFs
 * rank-S. The bias column is excluded from the decay and from the penalty
 * λ‖W‖²/2 reported by evaluate (W = A without its bias column), the usual
 * convention: shrinking the intercept would bias the class priors.
 *
 * Dense data: c is the dense S × (D+1) gather of the minibatch, and the logits
 * of the whole minibatch come from one sgemm Z = C·Aᵀ written straight into
 * the b buffer, where the softmax then turns them into b in place. CSR data:
 * c is CSR (the row's non-zeros plus (D, 1)) and the logits are a sparse loop.
 * Both paths only grow buffers, so the steady state allocates nothing.
 *
 * Initialisation is all zeros (the problem is convex, so this is a fine and
 * fully deterministic start); settings->seed is therefore unused here. */
#include "models/mlr.h"
#include "models/model_internal.h"

#include "src/base/util.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows of dense data per sgemm in evaluate: bounds the scratch to
 * EVAL_CHUNK × K floats while keeping the sgemm large enough to be fast. */
#define EVAL_CHUNK 256

struct mlr {
    uint32_t k, d, d1; /* d1 = d + 1 columns of A */
    float lambda;
    float *a;          /* owned parameter matrix, exposed through mats[0] */
    float *z;          /* evaluate scratch: logits of a chunk */
    size_t z_cap;      /* bytes */
};

static int mlr_init(void *priv, const struct sfb_model_settings *s, uint32_t *n_matrices,
                    struct sfb_matrix *mats)
{
    struct mlr *m = priv;
    if (s->k == 0 || s->d == 0)
        return sfb__error(-EINVAL, "mlr: needs d > 0 features and k > 0 classes (got d=%u k=%u)",
                          s->d, s->k);
    if (s->d >= INT_MAX || s->k > INT_MAX)
        return sfb__error(-EINVAL, "mlr: d=%u or k=%u too large", s->d, s->k);
    if (!(s->lambda >= 0.0) || !isfinite(s->lambda))
        return sfb__error(-EINVAL, "mlr: lambda must be finite and >= 0 (got %g)", s->lambda);
    size_t n;
    if (sfb__mul_size(s->k, (size_t)s->d + 1, &n) || sfb__mul_size(n, sizeof(float), &n))
        return sfb__error(-EOVERFLOW, "mlr: %u × %u parameters overflow", s->k, s->d + 1);
    m->a = calloc(1, n);
    if (!m->a) return sfb__error(-ENOMEM, "mlr: cannot allocate %u × %u parameters", s->k,
                                 s->d + 1);
    m->k = s->k;
    m->d = s->d;
    m->d1 = s->d + 1;
    m->lambda = (float)s->lambda;
    *n_matrices = 1;
    mats[0] = (struct sfb_matrix){.rows = m->k, .cols = m->d1, .data = m->a};
    return 0;
}

static void mlr_fini(void *priv)
{
    struct mlr *m = priv;
    free(m->a);
    free(m->z);
    m->a = m->z = NULL;
}

static int check_data(const struct mlr *m, const struct sfb_matrix *mats,
                      const struct sfb_dataset *data)
{
    if (mats[0].rows != m->k || mats[0].cols != m->d1 || mats[0].data == NULL)
        return sfb__error(-SFB_ESHAPE, "mlr: parameter matrix is %u × %u, expected %u × %u",
                          mats[0].rows, mats[0].cols, m->k, m->d1);
    if (data->d != m->d)
        return sfb__error(-SFB_ESHAPE, "mlr: data has d=%u features, model expects %u",
                          data->d, m->d);
    if (data->n && !data->labels) return sfb__error(-EINVAL, "mlr: data has no labels");
    if (data->n && (data->sparse ? !data->row_ptr : !data->x))
        return sfb__error(-EINVAL, "mlr: data has no features");
    return 0;
}

static int check_label(const struct mlr *m, const struct sfb_dataset *data, uint64_t i)
{
    int32_t y = data->labels[i];
    if (y < 0 || (uint32_t)y >= m->k)
        return sfb__error(-EINVAL, "mlr: sample %llu has label %d, model has %u classes",
                          (unsigned long long)i, y, m->k);
    return 0;
}

/* Turns logits z[0..k) into softmax(z) − e_y in place; returns −log p_y. */
static double softmax_grad(float *z, uint32_t k, uint32_t y)
{
    float mx = z[0];
    for (uint32_t j = 1; j < k; j++) mx = z[j] > mx ? z[j] : mx;
    /* From the logit itself, not log(p_y): p_y may underflow to 0. */
    const double zy = (double)z[y] - mx;
    double sum = 0.0;
    for (uint32_t j = 0; j < k; j++) {
        z[j] = expf(z[j] - mx);
        sum += z[j];
    }
    const double nll = log(sum) - zy;
    float inv = (float)(1.0 / sum);
    for (uint32_t j = 0; j < k; j++) z[j] *= inv;
    z[y] -= 1.0f;
    return nll;
}

/* −log softmax(z)_y and argmax(z) (first maximum) without modifying z. */
static double nll_argmax(const float *z, uint32_t k, uint32_t y, uint32_t *arg)
{
    float mx = z[0];
    uint32_t am = 0;
    for (uint32_t j = 1; j < k; j++)
        if (z[j] > mx) mx = z[j], am = j;
    double sum = 0.0;
    for (uint32_t j = 0; j < k; j++) sum += exp((double)z[j] - mx);
    *arg = am;
    return log(sum) - ((double)z[y] - mx);
}

/* Sparse logits of one CSR sample: z_j = A_j[D] + Σ_p A_j[col_p]·val_p. */
static void sparse_logits(const struct mlr *m, const float *a, const uint32_t *col,
                          const float *val, uint64_t nnz, float *z)
{
    for (uint32_t j = 0; j < m->k; j++) {
        const float *aj = a + (size_t)j * m->d1;
        float acc = aj[m->d];
        for (uint64_t p = 0; p < nnz; p++) acc += aj[col[p]] * val[p];
        z[j] = acc;
    }
}

static int mlr_factors(void *priv, const struct sfb_matrix *mats, const struct sfb_dataset *data,
                       const uint64_t *idx, uint32_t s, float eta, struct sfb_sf *out,
                       double *loss)
{
    struct mlr *m = priv;
    int ret = check_data(m, mats, data);
    if (ret) return ret;
    uint64_t nnz;
    if ((ret = sfb__model_batch(data, idx, s, "mlr", &nnz))) return ret;
    for (uint32_t i = 0; i < s; i++)
        if ((ret = check_label(m, data, idx[i]))) return ret;
    const float *a = mats[0].data;
    const uint32_t k = m->k, d = m->d, d1 = m->d1;
    double total = 0.0;

    if (!data->sparse) {
        if ((ret = sfb_sf_reserve(out, k, d1, s, 0, 0))) return ret;
        for (uint32_t i = 0; i < s; i++) {
            float *ci = out->c + (size_t)i * d1;
            memcpy(ci, data->x + idx[i] * d, (size_t)d * sizeof(float));
            ci[d] = 1.0f;
        }
        /* Logits of the whole minibatch: B ← C·Aᵀ (S × K). */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s, (int)k, (int)d1, 1.0f,
                    out->c, (int)d1, a, (int)d1, 0.0f, out->b, (int)k);
    } else {
        if ((ret = sfb_sf_reserve(out, k, d1, s, 1, nnz))) return ret;
        uint32_t q = 0;
        for (uint32_t i = 0; i < s; i++) {
            uint64_t p0 = data->row_ptr[idx[i]], p1 = data->row_ptr[idx[i] + 1];
            for (uint64_t p = p0; p < p1; p++) {
                if (data->col[p] >= d)
                    return sfb__error(-SFB_ESHAPE, "mlr: sample %llu has feature %u >= d=%u",
                                      (unsigned long long)idx[i], data->col[p], d);
                out->c_col[q] = data->col[p];
                out->c_val[q++] = data->val[p];
            }
            out->c_col[q] = d; /* bias, after every feature: columns stay increasing */
            out->c_val[q++] = 1.0f;
            out->c_row_ptr[i + 1] = q;
            sparse_logits(m, a, data->col + p0, data->val + p0, p1 - p0,
                          out->b + (size_t)i * k);
        }
    }
    for (uint32_t i = 0; i < s; i++)
        total += softmax_grad(out->b + (size_t)i * k, k, (uint32_t)data->labels[idx[i]]);
    out->matrix = 0;
    out->scale = -eta / (float)s;
    *loss += total;
    return 0;
}

static void mlr_apply_local(void *priv, struct sfb_matrix *mats, float eta)
{
    struct mlr *m = priv;
    if (m->lambda <= 0.0f) return;
    const float f = 1.0f - eta * m->lambda;
    for (uint32_t j = 0; j < m->k; j++) {
        float *aj = mats[0].data + (size_t)j * m->d1;
        for (uint32_t q = 0; q < m->d; q++) aj[q] *= f; /* bias aj[d] untouched */
    }
}

static int mlr_evaluate(void *priv, const struct sfb_matrix *mats, const struct sfb_dataset *data,
                        struct sfb_eval *out)
{
    struct mlr *m = priv;
    int ret = check_data(m, mats, data);
    if (ret) return ret;
    const float *a = mats[0].data;
    const uint32_t k = m->k, d = m->d, d1 = m->d1;
    uint64_t rows_per = data->sparse ? 1 : EVAL_CHUNK;
    if (sfb__reserve((void **)&m->z, &m->z_cap, (size_t)rows_per * k * sizeof(float)))
        return sfb__error(-ENOMEM, "mlr: cannot allocate evaluation scratch");
    double nll = 0.0;
    uint64_t correct = 0;
    for (uint64_t r0 = 0; r0 < data->n; r0 += rows_per) {
        uint64_t ch = SFB_MIN(rows_per, data->n - r0);
        if (!data->sparse) {
            /* Z = X_chunk · Wᵀ: A's first d columns with leading dimension d1. */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)ch, (int)k, (int)d, 1.0f,
                        data->x + r0 * d, (int)d, a, (int)d1, 0.0f, m->z, (int)k);
            for (uint64_t i = 0; i < ch; i++)
                for (uint32_t j = 0; j < k; j++) m->z[i * k + j] += a[(size_t)j * d1 + d];
        } else {
            uint64_t p0 = data->row_ptr[r0], p1 = data->row_ptr[r0 + 1];
            for (uint64_t p = p0; p < p1; p++)
                if (data->col[p] >= d)
                    return sfb__error(-SFB_ESHAPE, "mlr: sample %llu has feature %u >= d=%u",
                                      (unsigned long long)r0, data->col[p], d);
            sparse_logits(m, a, data->col + p0, data->val + p0, p1 - p0, m->z);
        }
        for (uint64_t i = 0; i < ch; i++) {
            if ((ret = check_label(m, data, r0 + i))) return ret;
            uint32_t y = (uint32_t)data->labels[r0 + i], pred;
            nll += nll_argmax(m->z + i * k, k, y, &pred);
            correct += pred == y;
        }
    }
    double reg = 0.0;
    if (m->lambda > 0.0f) {
        for (uint32_t j = 0; j < k; j++)
            for (uint32_t q = 0; q < d; q++) {
                double v = a[(size_t)j * d1 + q];
                reg += v * v;
            }
        reg *= 0.5 * m->lambda;
    }
    out->n = data->n;
    out->loss = data->n ? nll / (double)data->n + reg : NAN;
    out->accuracy = data->n ? (double)correct / (double)data->n : NAN;
    return 0;
}

static uint32_t mlr_shapes(const struct sfb_model_settings *s, uint64_t *rows, uint64_t *cols)
{
    rows[0] = s->k;
    cols[0] = (uint64_t)s->d + 1;
    return 1;
}

const struct sfb_model_ops sfb__mlr_ops = {
    .name = "mlr",
    .priv_size = sizeof(struct mlr),
    .init = mlr_init,
    .fini = mlr_fini,
    .factors = mlr_factors,
    .apply_local = mlr_apply_local,
    .evaluate = mlr_evaluate,
    .summary = "multinomial logistic regression (softmax), one k x (d+1) matrix",
    .default_lambda = 0.0,
    .default_lr = 1.0,
    .shapes = mlr_shapes,
};
