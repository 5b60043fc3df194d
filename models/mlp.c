/* A fully connected network: hidden.n ReLU layers and a softmax output,
 * trained on the mean cross-entropy (+ optional L2).
 *
 * Layer l (0 … L−1, L = hidden.n + 1) is one parameter matrix W_l of
 * out_l × (in_l + 1), its last column the bias (as MLR's intercept):
 * in_0 = d, out_l = hidden.v[l] for l < L−1, out_{L−1} = k, in_{l+1} = out_l.
 * For a sample, a_0 = u, z_l = W_l [a_l; 1], a_{l+1} = ReLU(z_l), and
 * p = softmax(z_{L−1}). Backprop gives δ_{L−1} = p − e_y and
 * δ_l = (W_{l+1}[:, :in_{l+1}]ᵀ δ_{l+1}) ⊙ [z_l > 0]; the gradient of W_l
 * over a minibatch is Σ_i δ_{l,i} [a_{l,i}; 1]ᵀ. So the SF of matrix l has
 * b_i = δ_{l,i} (out_l values) and c_i = [a_{l,i}; 1] (in_l + 1 values),
 * scale = −η/S: one SGD step of every layer, each layer a matrix of the job.
 *
 * Buffers: the forward pass writes each layer's activations straight into
 * the SF that needs them (a_{l+1} with its 1 into out[l+1].c) and the logits
 * into out[L−1].b, where the softmax turns them into δ_{L−1}; backprop writes
 * δ_l into out[l].b. All dense products are sgemm calls (OpenBLAS). CSR data:
 * c of layer 0 is CSR (the row's non-zeros plus (d, 1)) and its products are
 * a sparse loop, as MLR's.
 *
 * L2 (λ > 0) as MLR: apply_local decays every W_l except its bias column,
 * A ← (1 − ηλ)·A, and evaluate adds λ/2 Σ_l ‖W_l without bias‖².
 *
 * Initialisation (seeded, libm-free: src/base/rng.h): W_l's weights are
 * N(0, 2/in_l) for a layer followed by a ReLU (He et al. 2015) and
 * N(0, 1/in_l) for the output layer (Glorot/LeCun); biases are 0. Layer l
 * draws from its own stream (seed, l), so a layer's start does not depend on
 * the sizes of the others. */
#include "models/model_internal.h"

#include "src/base/util.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS SFB_MODEL_MAX_MATRICES
#define HIDDEN_MAX (1u << 16) /* units of one hidden layer at most */
/* Rows per chunk in evaluate: bounds its scratch while keeping sgemm fast. */
#define EVAL_CHUNK 256

struct mlp {
    uint32_t nl;                             /* layers = matrices */
    uint32_t in[MAX_LAYERS], out[MAX_LAYERS]; /* W_l is out[l] × (in[l] + 1) */
    uint32_t d, k;
    float lambda;
    float *w[MAX_LAYERS];       /* owned parameter matrices, exposed through mats[] */
    float *act[MAX_LAYERS];     /* evaluate: a_l with its 1, EVAL_CHUNK × (in[l] + 1) */
    float *logits;              /* evaluate: EVAL_CHUNK × k */
    size_t act_cap[MAX_LAYERS], logits_cap;
};

/* Layer shapes of settings s into in[], out[]; the number of layers, or 0
 * when s does not describe a network (the reason in sfb_last_error). */
static uint32_t layer_shapes(const struct sfb_model_settings *s, uint32_t *in, uint32_t *out)
{
    const struct sfb_model_u32_list *h = &s->hidden;
    if (s->k == 0 || s->d == 0) {
        sfb__error(-EINVAL, "mlp: needs d > 0 features and k > 0 classes (got d=%u k=%u)", s->d,
                   s->k);
        return 0;
    }
    if (s->d >= INT_MAX || s->k >= INT_MAX) {
        sfb__error(-EINVAL, "mlp: d=%u or k=%u too large", s->d, s->k);
        return 0;
    }
    if (h->n < 1 || h->n > SFB_MODEL_LIST_MAX) {
        sfb__error(-EINVAL, "mlp: hidden has %u layers, expected 1..%u", h->n,
                   SFB_MODEL_LIST_MAX);
        return 0;
    }
    for (uint32_t l = 0; l < h->n; l++)
        if (h->v[l] < 1 || h->v[l] > HIDDEN_MAX) {
            sfb__error(-EINVAL, "mlp: hidden layer %u has %u units, expected 1..%u", l + 1,
                       h->v[l], HIDDEN_MAX);
            return 0;
        }
    uint32_t nl = h->n + 1;
    for (uint32_t l = 0; l < nl; l++) {
        in[l] = l ? h->v[l - 1] : s->d;
        out[l] = l + 1 < nl ? h->v[l] : s->k;
    }
    return nl;
}

static void mlp_fini(void *priv);

static int mlp_init(void *priv, const struct sfb_model_settings *s, uint32_t *n_matrices,
                    struct sfb_matrix *mats)
{
    struct mlp *m = priv;
    m->nl = layer_shapes(s, m->in, m->out);
    if (!m->nl) return -EINVAL;
    if (!(s->lambda >= 0.0) || !isfinite(s->lambda))
        return sfb__error(-EINVAL, "mlp: lambda must be finite and >= 0 (got %g)", s->lambda);
    for (uint32_t l = 0; l < m->nl; l++) {
        const uint32_t rows = m->out[l], cols = m->in[l] + 1;
        size_t n;
        int bad = sfb__mul_size(rows, cols, &n) || sfb__mul_size(n, sizeof(float), &n);
        if (bad || !(m->w[l] = malloc(n))) {
            mlp_fini(m); /* the runtime calls fini only after a successful init */
            return sfb__error(bad ? -EOVERFLOW : -ENOMEM,
                              "mlp: cannot allocate layer %u's %u × %u parameters", l, rows, cols);
        }
        const double sd = sqrt((l + 1 < m->nl ? 2.0 : 1.0) / (double)m->in[l]);
        struct sfb__rng g;
        sfb__rng_seed2(&g, s->seed ^ 0x3C6EF372FE94F82Bull, l);
        for (uint32_t j = 0; j < rows; j++) {
            float *wj = m->w[l] + (size_t)j * cols;
            for (uint32_t q = 0; q < m->in[l]; q++) wj[q] = (float)(sd * sfb__rng_gauss(&g));
            wj[m->in[l]] = 0.0f;
        }
        mats[l] = (struct sfb_matrix){.rows = rows, .cols = cols, .data = m->w[l]};
    }
    m->d = s->d;
    m->k = s->k;
    m->lambda = (float)s->lambda;
    *n_matrices = m->nl;
    return 0;
}

static void mlp_fini(void *priv)
{
    struct mlp *m = priv;
    for (uint32_t l = 0; l < MAX_LAYERS; l++) {
        free(m->w[l]);
        free(m->act[l]);
        m->w[l] = m->act[l] = NULL;
    }
    free(m->logits);
    m->logits = NULL;
}

static int check_data(const struct mlp *m, const struct sfb_matrix *mats,
                      const struct sfb_dataset *data)
{
    for (uint32_t l = 0; l < m->nl; l++)
        if (mats[l].rows != m->out[l] || mats[l].cols != m->in[l] + 1 || !mats[l].data)
            return sfb__error(-SFB_ESHAPE, "mlp: matrix %u is %u × %u, expected %u × %u", l,
                              mats[l].rows, mats[l].cols, m->out[l], m->in[l] + 1);
    if (data->d != m->d)
        return sfb__error(-SFB_ESHAPE, "mlp: data has d=%u features, model expects %u", data->d,
                          m->d);
    if (data->n && !data->labels) return sfb__error(-EINVAL, "mlp: data has no labels");
    if (data->n && (data->sparse ? !data->row_ptr : !data->x))
        return sfb__error(-EINVAL, "mlp: data has no features");
    return 0;
}

/* Label and CSR columns of sample i. */
static int check_sample(const struct mlp *m, const struct sfb_dataset *data, uint64_t i)
{
    int32_t y = data->labels[i];
    if (y < 0 || (uint32_t)y >= m->k)
        return sfb__error(-EINVAL, "mlp: sample %llu has label %d, model has %u classes",
                          (unsigned long long)i, y, m->k);
    if (data->sparse)
        for (uint64_t p = data->row_ptr[i]; p < data->row_ptr[i + 1]; p++)
            if (data->col[p] >= m->d)
                return sfb__error(-SFB_ESHAPE, "mlp: sample %llu has feature %u >= d=%u",
                                  (unsigned long long)i, data->col[p], m->d);
    return 0;
}

/* z (rows × out[l], leading dimension ldz) = A·W_l[:, :in]ᵀ + bias, A being
 * rows × in[l] with leading dimension lda: z is filled with the bias, then
 * one sgemm adds the product. */
static void dense_layer(const struct mlp *m, const float *w, uint32_t l, const float *a,
                        uint32_t lda, uint32_t rows, float *z, uint32_t ldz)
{
    const uint32_t in = m->in[l], out = m->out[l];
    for (uint32_t i = 0; i < rows; i++)
        for (uint32_t j = 0; j < out; j++) z[(size_t)i * ldz + j] = w[(size_t)j * (in + 1) + in];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)out, (int)in, 1.0f, a,
                (int)lda, w, (int)(in + 1), 1.0f, z, (int)ldz);
}

/* Layer 0 of one CSR sample: z_j = W_0[j][d] + Σ_p W_0[j][col_p]·val_p. */
static void sparse_layer0(const struct mlp *m, const float *w, const uint32_t *col,
                          const float *val, uint64_t nnz, float *z)
{
    const uint32_t d1 = m->d + 1;
    for (uint32_t j = 0; j < m->out[0]; j++) {
        const float *wj = w + (size_t)j * d1;
        float acc = wj[m->d];
        for (uint64_t p = 0; p < nnz; p++) acc += wj[col[p]] * val[p];
        z[j] = acc;
    }
}

/* ReLU of the rows × n block at z (leading dimension n + 1), and the 1 of
 * the bias in column n. */
static void relu_ones(float *z, uint32_t rows, uint32_t n)
{
    for (uint32_t i = 0; i < rows; i++) {
        float *zi = z + (size_t)i * (n + 1);
        for (uint32_t j = 0; j < n; j++) zi[j] = zi[j] > 0.0f ? zi[j] : 0.0f;
        zi[n] = 1.0f;
    }
}

/* Layers 1 … L−1 of `rows` samples whose a_1 (with its 1) is in act[1]:
 * a_{l+1} into act[l+1], the logits into `logits` (rows × k). */
static void forward_rest(const struct mlp *m, const struct sfb_matrix *mats, float *const *act,
                         uint32_t rows, float *logits)
{
    for (uint32_t l = 1; l < m->nl; l++) {
        const int last = l + 1 == m->nl;
        float *z = last ? logits : act[l + 1];
        dense_layer(m, mats[l].data, l, act[l], m->in[l] + 1, rows, z,
                    last ? m->k : m->out[l] + 1);
        if (!last) relu_ones(z, rows, m->out[l]);
    }
}

/* Turns logits z[0..k) into softmax(z) − e_y in place; returns −log p_y. */
static double softmax_grad(float *z, uint32_t k, uint32_t y)
{
    float mx = z[0];
    for (uint32_t j = 1; j < k; j++) mx = z[j] > mx ? z[j] : mx;
    const double zy = (double)z[y] - mx; /* from the logit: p_y may underflow */
    double sum = 0.0;
    for (uint32_t j = 0; j < k; j++) {
        z[j] = expf(z[j] - mx);
        sum += z[j];
    }
    const float inv = (float)(1.0 / sum);
    for (uint32_t j = 0; j < k; j++) z[j] *= inv;
    z[y] -= 1.0f;
    return log(sum) - zy;
}

/* −log softmax(z)_y and argmax(z) (first maximum), z unchanged. */
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

/* c of layer 0 for the minibatch: dense [x; 1] rows, or CSR with (d, 1). */
static int input_factor(const struct mlp *m, const struct sfb_dataset *data, const uint64_t *idx,
                        uint32_t s, uint64_t nnz, struct sfb_sf *sf)
{
    const uint32_t d = m->d, d1 = d + 1;
    int ret = sfb_sf_reserve(sf, m->out[0], d1, s, data->sparse, data->sparse ? nnz : 0);
    if (ret) return ret;
    if (!data->sparse) {
        for (uint32_t i = 0; i < s; i++) {
            float *ci = sf->c + (size_t)i * d1;
            memcpy(ci, data->x + idx[i] * d, (size_t)d * sizeof(float));
            ci[d] = 1.0f;
        }
        return 0;
    }
    uint32_t q = 0;
    sf->c_row_ptr[0] = 0;
    for (uint32_t i = 0; i < s; i++) {
        for (uint64_t p = data->row_ptr[idx[i]]; p < data->row_ptr[idx[i] + 1]; p++) {
            sf->c_col[q] = data->col[p];
            sf->c_val[q++] = data->val[p];
        }
        sf->c_col[q] = d; /* bias, after every feature: columns stay increasing */
        sf->c_val[q++] = 1.0f;
        sf->c_row_ptr[i + 1] = q;
    }
    return 0;
}

static int mlp_factors(void *priv, const struct sfb_matrix *mats, const struct sfb_dataset *data,
                       const uint64_t *idx, uint32_t s, float eta, struct sfb_sf *out,
                       double *loss)
{
    struct mlp *m = priv;
    int ret = check_data(m, mats, data);
    if (ret) return ret;
    uint64_t nnz;
    if ((ret = sfb__model_batch(data, idx, s, "mlp", &nnz))) return ret;
    for (uint32_t i = 0; i < s; i++)
        if ((ret = check_sample(m, data, idx[i]))) return ret;
    if (nnz > UINT32_MAX) return sfb__error(-EOVERFLOW, "mlp: minibatch has %llu non-zeros",
                                            (unsigned long long)nnz);
    const uint32_t L = m->nl;
    if ((ret = input_factor(m, data, idx, s, nnz, &out[0]))) return ret;
    for (uint32_t l = 1; l < L; l++)
        if ((ret = sfb_sf_reserve(&out[l], m->out[l], m->in[l] + 1, s, 0, 0))) return ret;

    /* Forward (L >= 2: at least one hidden layer): z_0 into out[1].c, ReLU'd
     * in place, …, the logits into out[L−1].b. */
    float *act[MAX_LAYERS + 1] = {0};
    for (uint32_t l = 1; l < L; l++) act[l] = out[l].c;
    float *z0 = act[1];
    const uint32_t ldz0 = m->out[0] + 1;
    if (!data->sparse) {
        dense_layer(m, mats[0].data, 0, out[0].c, m->d + 1, s, z0, ldz0);
    } else {
        for (uint32_t i = 0; i < s; i++) {
            uint32_t p0 = out[0].c_row_ptr[i], p1 = out[0].c_row_ptr[i + 1] - 1; /* w/o bias */
            sparse_layer0(m, mats[0].data, out[0].c_col + p0, out[0].c_val + p0, p1 - p0,
                          z0 + (size_t)i * ldz0);
        }
    }
    relu_ones(z0, s, m->out[0]);
    forward_rest(m, mats, act, s, out[L - 1].b);

    double total = 0.0;
    for (uint32_t i = 0; i < s; i++)
        total += softmax_grad(out[L - 1].b + (size_t)i * m->k, m->k,
                              (uint32_t)data->labels[idx[i]]);
    /* Backward: δ_l = (δ_{l+1} · W_{l+1}[:, :in]) ⊙ [a_{l+1} > 0]. */
    for (uint32_t l = L - 1; l-- > 0;) {
        const uint32_t n = m->out[l], n1 = m->out[l + 1];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s, (int)n, (int)n1, 1.0f,
                    out[l + 1].b, (int)n1, mats[l + 1].data, (int)(n + 1), 0.0f, out[l].b,
                    (int)n);
        for (uint32_t i = 0; i < s; i++) {
            const float *ai = out[l + 1].c + (size_t)i * (n + 1);
            float *bi = out[l].b + (size_t)i * n;
            for (uint32_t j = 0; j < n; j++)
                if (!(ai[j] > 0.0f)) bi[j] = 0.0f;
        }
    }
    for (uint32_t l = 0; l < L; l++) {
        out[l].matrix = l;
        out[l].scale = -eta / (float)s;
    }
    *loss += total;
    return 0;
}

static void mlp_apply_local(void *priv, struct sfb_matrix *mats, float eta)
{
    struct mlp *m = priv;
    if (m->lambda <= 0.0f) return;
    const float f = 1.0f - eta * m->lambda;
    for (uint32_t l = 0; l < m->nl; l++)
        for (uint32_t j = 0; j < m->out[l]; j++) {
            float *wj = mats[l].data + (size_t)j * (m->in[l] + 1);
            for (uint32_t q = 0; q < m->in[l]; q++) wj[q] *= f; /* bias wj[in] untouched */
        }
}

/* λ/2 Σ_l ‖W_l without its bias column‖². */
static double l2_penalty(const struct mlp *m, const struct sfb_matrix *mats)
{
    if (m->lambda <= 0.0f) return 0.0;
    double reg = 0.0;
    for (uint32_t l = 0; l < m->nl; l++)
        for (uint32_t j = 0; j < m->out[l]; j++)
            for (uint32_t q = 0; q < m->in[l]; q++) {
                double v = mats[l].data[(size_t)j * (m->in[l] + 1) + q];
                reg += v * v;
            }
    return 0.5 * m->lambda * reg;
}

static int eval_scratch(struct mlp *m)
{
    for (uint32_t l = 1; l < m->nl; l++)
        if (sfb__reserve((void **)&m->act[l], &m->act_cap[l],
                         (size_t)EVAL_CHUNK * (m->in[l] + 1) * sizeof(float)))
            return sfb__error(-ENOMEM, "mlp: cannot allocate evaluation scratch");
    if (sfb__reserve((void **)&m->logits, &m->logits_cap, (size_t)EVAL_CHUNK * m->k * sizeof(float)))
        return sfb__error(-ENOMEM, "mlp: cannot allocate evaluation scratch");
    return 0;
}

static int mlp_evaluate(void *priv, const struct sfb_matrix *mats, const struct sfb_dataset *data,
                        struct sfb_eval *out)
{
    struct mlp *m = priv;
    int ret = check_data(m, mats, data);
    if (ret || (ret = eval_scratch(m))) return ret;
    double nll = 0.0;
    uint64_t correct = 0;
    for (uint64_t r0 = 0; r0 < data->n; r0 += EVAL_CHUNK) {
        const uint32_t ch = (uint32_t)SFB_MIN((uint64_t)EVAL_CHUNK, data->n - r0);
        for (uint32_t i = 0; i < ch; i++)
            if ((ret = check_sample(m, data, r0 + i))) return ret;
        float *z0 = m->act[1];
        const uint32_t ldz0 = m->out[0] + 1;
        if (!data->sparse) {
            dense_layer(m, mats[0].data, 0, data->x + r0 * m->d, m->d, ch, z0, ldz0);
        } else {
            for (uint32_t i = 0; i < ch; i++) {
                uint64_t p0 = data->row_ptr[r0 + i], p1 = data->row_ptr[r0 + i + 1];
                sparse_layer0(m, mats[0].data, data->col + p0, data->val + p0, p1 - p0,
                              z0 + (size_t)i * ldz0);
            }
        }
        relu_ones(z0, ch, m->out[0]);
        forward_rest(m, mats, m->act, ch, m->logits);
        for (uint32_t i = 0; i < ch; i++) {
            uint32_t y = (uint32_t)data->labels[r0 + i], pred;
            nll += nll_argmax(m->logits + (size_t)i * m->k, m->k, y, &pred);
            correct += pred == y;
        }
    }
    out->n = data->n;
    out->loss = data->n ? nll / (double)data->n + l2_penalty(m, mats) : NAN;
    out->accuracy = data->n ? (double)correct / (double)data->n : NAN;
    return 0;
}

static uint32_t mlp_shapes(const struct sfb_model_settings *s, uint64_t *rows, uint64_t *cols)
{
    uint32_t in[MAX_LAYERS], out[MAX_LAYERS];
    uint32_t nl = layer_shapes(s, in, out);
    for (uint32_t l = 0; l < nl; l++) {
        rows[l] = out[l];
        cols[l] = (uint64_t)in[l] + 1;
    }
    return nl;
}

static void mlp_defaults(struct sfb_model_settings *s)
{
    s->hidden.n = 1;
    s->hidden.v[0] = 1024;
}

static const struct sfb_model_option mlp_options[] = {
    {"hidden", "H[,H2,H3]", "ReLU hidden layer sizes, 1 to 3 layers (default 1024)",
     SFB_MODEL_OPT_U32_LIST, offsetof(struct sfb_model_settings, hidden), 1, HIDDEN_MAX},
    {0},
};

const struct sfb_model_ops sfb__mlp_ops = {
    .name = "mlp",
    .priv_size = sizeof(struct mlp),
    .init = mlp_init,
    .fini = mlp_fini,
    .factors = mlp_factors,
    .apply_local = mlp_apply_local,
    .evaluate = mlp_evaluate,
    .summary = "fully connected ReLU network with softmax output, one matrix per layer",
    .default_lambda = 0.0,
    .default_lr = 0.3,
    .default_lr_period_epochs = 1.0,
    .defaults = mlp_defaults,
    .shapes = mlp_shapes,
    .options = mlp_options,
};
