/* sfb — matrix-parameterized models as ops tables.
 *
 * A model owns its parameter matrices (the local replica). Each minibatch it
 * produces sufficient factors (one sfb_sf per matrix); the runtime applies
 * those of every worker through sfb_reconstruct_apply, and calls
 * apply_local once per clock for what every replica does by itself
 * (regularizer decay, projections). */
#ifndef SFB_MODEL_H
#define SFB_MODEL_H

#include <sfb/common.h>
#include <sfb/data.h>
#include <sfb/sf.h>

#ifdef __cplusplus
extern "C" {
#endif

/* mlr: one matrix A of k × (d+1), the last column being the intercept
 * (bias); SFs carry c = [x; 1] (CSR: the non-zeros plus (d, 1)). The L2
 * decay and penalty exclude the bias column. Parameters start at zero, so
 * mlr does not use `seed`.
 * dml: one matrix L of rank × d (metric M = LᵀL); lambda weighs the
 * dissimilar-pair hinge and must be > 0.
 * sc: one dictionary B of d × dict_size; lambda is the L1 weight on codes.
 * mlp: one matrix W_l of out_l × (in_l + 1) per layer (last column the
 * bias), hidden.n ReLU layers of hidden.v[i] units (default one of 1024)
 * and a softmax output of k; lambda is the L2 weight (biases excluded).
 * Formulas, SFs and initialisation of each model: docs/models.md. */
#define SFB_MODEL_MAX_MATRICES 4

/* A short list of positive integers (mlp's hidden layer sizes): n values in
 * v[0..n), n <= SFB_MODEL_LIST_MAX; n = 0 means "the model's default". */
#define SFB_MODEL_LIST_MAX (SFB_MODEL_MAX_MATRICES - 1)
struct sfb_model_u32_list {
    uint32_t n;
    uint32_t v[SFB_MODEL_LIST_MAX];
};

/* The version of struct sfb_model_settings (docs/api.md, "Versions of the
 * structures"): a later release that adds a field (in `reserved`, zero
 * meaning its default) raises it. */
#define SFB_MODEL_SETTINGS_VERSION 1

/* A model's settings: fill with sfb_model_default_settings, then set what
 * you need (an unknown version or a reserved byte set is -SFB_EVERSION). */
struct sfb_model_settings {
    uint32_t version;   /* SFB_MODEL_SETTINGS_VERSION */
    const char *kind;   /* "mlr", "dml", "sc", "mlp"; copied by sfb_model_open */
    uint32_t d;         /* feature dimension of the data */
    uint32_t k;         /* classes (mlr; dml and sc ignore it) */
    double lambda;      /* mlr: L2, dml: hinge weight, sc: L1 weight; default 0 */
    uint64_t seed;      /* initialisation and pair sampling (default 1) */
    uint32_t proj_dim;  /* dml: projection dimension K (default 64) */
    uint32_t knn_k;     /* dml: neighbours of the k-NN evaluation (default 5) */
    uint32_t dict_size; /* sc: dictionary atoms K (default 128) */
    uint32_t code_steps; /* sc: FISTA steps per code (default 20) */
    /* dml: optional Bösen-style pair files (lines "i j", 0-based sample
     * indices of the training set); read during sfb_model_open only, not
     * kept (NULL in sfb_model_get_settings) and not stored in model files. */
    const char *simi_pairs;
    const char *diff_pairs;
    struct sfb_model_u32_list hidden; /* mlp: hidden layer sizes (default {1, {1024}}) */
    uint8_t reserved[64]; /* for fields of later versions: zero */
};

/* Fills defaults (version included), each model's own fields by its
 * `defaults` op. NULL is a no-op. */
SFB_API void sfb_model_default_settings(struct sfb_model_settings *s);

/* Evaluation result on a dataset. Fields a model does not compute are NaN
 * (sfb_model_evaluate fills them before calling the model). The caller of
 * sfb_model_evaluate sets size (sizeof) and gets the fields that fit in it
 * (a later version may add fields at the end); a model's evaluate op gets
 * the library's whole structure. */
struct sfb_eval {
    uint32_t size;   /* sizeof(struct sfb_eval), set by the caller */
    double loss;     /* mean objective per sample (incl. regularizer) */
    double accuracy; /* fraction correct, or NaN where not meaningful;
                        dml: equals knn_accuracy */
    uint64_t n;
    double knn_accuracy;        /* dml: k-NN accuracy under the learned metric */
    double knn_accuracy_euclid; /* dml: k-NN accuracy under the Euclidean metric */
    double recon_error;         /* sc: Σ‖x − Bα‖² / Σ‖x‖² */
    double sparsity;            /* sc: mean fraction of zero code entries */
    /* sc: the reconstruction error Σ‖x − Bα‖² / Σ‖x‖² at a fixed sparsity:
     * every code has exactly `sparse_nonzeros` = max(1, min(d, dict_size)/8)
     * nonzeros, chosen greedily by orthogonal matching pursuit (OMP) with
     * least-squares coefficients; 0 and NaN for the other models. Compares
     * dictionaries at the same code sparsity (docs/models.md). */
    double recon_error_sparse;
    uint32_t sparse_nonzeros;
};

/* One command-line option of a model (`sfb run --rank K`), stored at
 * `offset` in struct sfb_model_settings: an unsigned integer in [min, max]
 * (a uint32_t), a file path (a const char *), or a comma-separated list of
 * 1 … SFB_MODEL_LIST_MAX integers in [min, max] (a struct
 * sfb_model_u32_list). Tables end with an entry whose name is NULL. */
enum sfb_model_option_kind {
    SFB_MODEL_OPT_U32 = 0,
    SFB_MODEL_OPT_PATH = 1,
    SFB_MODEL_OPT_U32_LIST = 2,
};

struct sfb_model_option {
    const char *name;    /* long option without "--" */
    const char *metavar; /* the value in --help: "K", "FILE" */
    const char *help;    /* what it sets, with its default; '\n' continues */
    enum sfb_model_option_kind kind;
    size_t offset;       /* offsetof(struct sfb_model_settings, field) */
    uint32_t min, max;   /* SFB_MODEL_OPT_U32 and _U32_LIST (each element) */
};

/* The ops table every model implements. `priv` points to priv_size bytes
 * zeroed by the runtime. All ops are called from the compute thread only. */
struct sfb_model_ops {
    const char *name;
    size_t priv_size;
    /* Number of parameter matrices and their shapes, known after init. */
    int (*init)(void *priv, const struct sfb_model_settings *s, uint32_t *n_matrices,
                struct sfb_matrix *mats /* room for SFB_MODEL_MAX_MATRICES */);
    void (*fini)(void *priv);
    /* SFs of the minibatch `idx[0..s)` of `data` at step size `eta`: fills
     * out[m] for each matrix (reusing its buffers) with scale −eta/s·…, and
     * adds the minibatch's summed loss to *loss. Returns 0 or -errno. */
    int (*factors)(void *priv, const struct sfb_matrix *mats, const struct sfb_dataset *data,
                   const uint64_t *idx, uint32_t s, float eta, struct sfb_sf *out, double *loss);
    /* Local per-clock step every replica applies itself (may be NULL). */
    void (*apply_local)(void *priv, struct sfb_matrix *mats, float eta);
    /* Mean loss and accuracy over a dataset. */
    int (*evaluate)(void *priv, const struct sfb_matrix *mats, const struct sfb_dataset *data,
                    struct sfb_eval *out);
    /* Optional (NULL: none): private state that changes future updates (dml:
     * the pair-stream step), saved in checkpoints. state_save writes at most
     * `cap` (SFB_MODEL_STATE_MAX) bytes and returns how many; state_load
     * returns 0 or -EINVAL for a blob it did not write. */
    size_t (*state_save)(void *priv, uint8_t *out, size_t cap);
    int (*state_load)(void *priv, const uint8_t *in, size_t len);
    /* What the runtime and the command line know of the model comes from
     * here (docs/models.md, "Adding a model"). */
    const char *summary;   /* one line for --help */
    double default_lambda; /* λ when the training settings leave it (< 0) */
    double default_lr;     /* η₀ when the training settings leave it (0) */
    /* the step schedule's period T when the settings leave it (lr_period
     * 0), in epochs; 0: 1 % of an epoch (mlp: 1, a slower decay) */
    double default_lr_period_epochs;
    /* Sets the model's own fields of `s` to their defaults (may be NULL);
     * called by sfb_model_default_settings for every registered model. */
    void (*defaults)(struct sfb_model_settings *s);
    /* The shapes of the matrices sfb_model_open would create for `s`,
     * computed without allocating (the model-file reader checks a file's
     * shapes with it before opening): writes rows[i], cols[i] for each of
     * the returned number (<= SFB_MODEL_MAX_MATRICES) of matrices. */
    uint32_t (*shapes)(const struct sfb_model_settings *s, uint64_t *rows, uint64_t *cols);
    /* The model's own evaluation lines after loss and accuracy (`sfb eval`),
     * each ending in '\n', formatted into buf as snprintf does (may be
     * NULL: none). */
    int (*eval_text)(const struct sfb_eval *ev, char *buf, size_t cap);
    const struct sfb_model_option *options; /* its command-line options, or NULL */
};

#define SFB_MODEL_STATE_MAX 256

/* Looks a model up by name ("mlr", "dml", "sc", "mlp"); NULL if unknown. */
SFB_API const struct sfb_model_ops *sfb_model_find(const char *name);
/* Comma-separated list of model names, for help texts. */
SFB_API const char *sfb_model_names(void);
/* The registered models in registry order (the first is the default);
 * NULL past the end. */
SFB_API const struct sfb_model_ops *sfb_model_registry(size_t i);

struct sfb_model;

/* Creates a model with freshly initialised parameters. Returns 0,
 * -SFB_EVERSION (s->version unknown, reserved bytes set), -EINVAL (unknown
 * kind or invalid settings such as k = 0, d = 0, lambda < 0; see
 * sfb_last_error), -ENOMEM, -EOVERFLOW; dml with pair files also -ENOENT /
 * -EIO and -SFB_EFORMAT ("file:line: reason"). Caller owns *m; on failure *m
 * is NULL. */
SFB_API int sfb_model_open(struct sfb_model **m, const struct sfb_model_settings *s);
SFB_API void sfb_model_close(struct sfb_model **m);
SFB_API const struct sfb_model_ops *sfb_model_get_ops(const struct sfb_model *m);
SFB_API const struct sfb_model_settings *sfb_model_get_settings(const struct sfb_model *m);
SFB_API uint32_t sfb_model_n_matrices(const struct sfb_model *m);
SFB_API struct sfb_matrix *sfb_model_matrix(struct sfb_model *m, uint32_t i);
/* SFs of a minibatch; out has sfb_model_n_matrices entries, whose buffers
 * are reused (grown only when needed). Sets shapes, sparse_c, scale and
 * matrix; origin and clock are left for the caller. Adds the summed loss to
 * *loss. Returns 0, -EINVAL (s = 0, an index ≥ n, a label outside [0, k)),
 * -SFB_ESHAPE (data->d differs from the model's d, or a CSR column ≥ d),
 * -ENOMEM. */
SFB_API int sfb_model_factors(struct sfb_model *m, const struct sfb_dataset *data,
                              const uint64_t *idx, uint32_t s, float eta, struct sfb_sf *out,
                              double *loss);
SFB_API void sfb_model_apply_local(struct sfb_model *m, float eta);
/* Mean loss (incl. regularizer) and accuracy over all of `data`; loss and
 * accuracy are NaN when data->n = 0. Errors as sfb_model_factors, and
 * -EINVAL for out->size below this version's. */
SFB_API int sfb_model_evaluate(struct sfb_model *m, const struct sfb_dataset *data,
                               struct sfb_eval *out);

/* Model files: header (magic "SFBMODL1", version, kind, settings, clock,
 * shapes) + matrices (little-endian float32) + XXH3-64 of everything before
 * it. Written atomically (temp file + fsync + rename). */
SFB_API int sfb_model_save(const struct sfb_model *m, const char *path, int64_t clock);
/* Loads a model file into a new model. -SFB_EFORMAT / -SFB_ECHECKSUM /
 * -SFB_ETRUNC / -SFB_EVERSION with the detail in sfb_last_error(); on
 * failure *m stays NULL. `clock` may be NULL. */
SFB_API int sfb_model_load(struct sfb_model **m, const char *path, int64_t *clock);

#ifdef __cplusplus
}
#endif
#endif
