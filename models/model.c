/* Model registry and the sfb_model handle: one static table of ops, built
 * from models/registry.def, so a new model is one source file plus one line
 * there. */
#include "models/model_internal.h"

#include "src/base/util.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SFB_MODEL(name) extern const struct sfb_model_ops sfb__##name##_ops;
#include "models/registry.def"
#undef SFB_MODEL

static const struct sfb_model_ops *const models[] = {
#define SFB_MODEL(name) &sfb__##name##_ops,
#include "models/registry.def"
#undef SFB_MODEL
};

struct sfb_model {
    const struct sfb_model_ops *ops;
    struct sfb_model_settings settings; /* settings.kind points at `kind` */
    char kind[SFB_MODEL_KIND_MAX + 1];
    uint32_t n_matrices;
    struct sfb_matrix mats[SFB_MODEL_MAX_MATRICES];
    void *priv;
    int inited;
};

void sfb_model_default_settings(struct sfb_model_settings *s)
{
    if (!s) return;
    memset(s, 0, sizeof(*s));
    s->version = SFB_MODEL_SETTINGS_VERSION;
    s->kind = models[0]->name;
    s->lambda = 0.0;
    s->seed = 1;
    for (size_t i = 0; i < SFB_ARRAY_LEN(models); i++)
        if (models[i]->defaults) models[i]->defaults(s);
}

const struct sfb_model_ops *sfb_model_registry(size_t i)
{
    return i < SFB_ARRAY_LEN(models) ? models[i] : NULL;
}

const struct sfb_model_ops *sfb_model_find(const char *name)
{
    SFB_ARG_OR(name, NULL);
    for (size_t i = 0; i < SFB_ARRAY_LEN(models); i++)
        if (strcmp(models[i]->name, name) == 0) return models[i];
    return NULL;
}

const char *sfb_model_names(void)
{
    /* Built once from the table; the table is constant, so a race between
     * two first callers writes the same bytes. */
    static char names[256];
    if (names[0]) return names;
    char buf[sizeof(names)];
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < SFB_ARRAY_LEN(models); i++) {
        size_t l = strlen(models[i]->name);
        if (len + l + 2 >= sizeof(buf)) break;
        if (i) buf[len++] = ',';
        memcpy(buf + len, models[i]->name, l + 1);
        len += l;
    }
    memcpy(names, buf, len + 1);
    return names;
}

int sfb_model_open(struct sfb_model **m, const struct sfb_model_settings *s)
{
    SFB_ENTER();
    SFB_ARG(m);
    SFB_ARG(s);
    *m = NULL;
    int vr = SFB_CHECK_VERSION(s, "sfb_model_settings", "sfb_model_default_settings",
                               SFB_MODEL_SETTINGS_VERSION);
    if (vr) return vr;
    if (!s || !s->kind) return sfb__error(-EINVAL, "model: no kind given");
    const struct sfb_model_ops *ops = sfb_model_find(s->kind);
    if (!ops)
        return sfb__error(-EINVAL, "model: unknown kind '%s' (known: %s)", s->kind,
                          sfb_model_names());
    struct sfb_model *mm = calloc(1, sizeof(*mm));
    if (!mm) return -ENOMEM;
    mm->ops = ops;
    mm->settings = *s;
    snprintf(mm->kind, sizeof(mm->kind), "%s", ops->name);
    mm->settings.kind = mm->kind;
    int ret = -ENOMEM;
    if (ops->priv_size && !(mm->priv = calloc(1, ops->priv_size))) goto fail;
    ret = ops->init(mm->priv, &mm->settings, &mm->n_matrices, mm->mats);
    if (ret) goto fail;
    /* The pair files were read by init; the caller's strings need not
     * outlive this call, so no pointer to them is kept. */
    mm->settings.simi_pairs = mm->settings.diff_pairs = NULL;
    mm->inited = 1;
    *m = mm;
    return 0;
fail:
    free(mm->priv);
    free(mm);
    return ret;
}

void sfb_model_close(struct sfb_model **m)
{
    if (!m || !*m) return;
    struct sfb_model *mm = *m;
    if (mm->inited && mm->ops->fini) mm->ops->fini(mm->priv);
    free(mm->priv);
    free(mm);
    *m = NULL;
}

const struct sfb_model_ops *sfb_model_get_ops(const struct sfb_model *m)
{
    SFB_ARG_OR(m, NULL);
    return m->ops;
}

const struct sfb_model_settings *sfb_model_get_settings(const struct sfb_model *m)
{
    SFB_ARG_OR(m, NULL);
    return &m->settings;
}

uint32_t sfb_model_n_matrices(const struct sfb_model *m)
{
    SFB_ARG_OR(m, 0);
    return m->n_matrices;
}

struct sfb_matrix *sfb_model_matrix(struct sfb_model *m, uint32_t i)
{
    SFB_ARG_OR(m, NULL);
    return i < m->n_matrices ? &m->mats[i] : NULL;
}

const struct sfb_matrix *sfb__model_matrix_ro(const struct sfb_model *m, uint32_t i)
{
    return m && i < m->n_matrices ? &m->mats[i] : NULL;
}

void *sfb__model_priv(struct sfb_model *m)
{
    return m->priv;
}

int sfb_model_factors(struct sfb_model *m, const struct sfb_dataset *data, const uint64_t *idx,
                      uint32_t s, float eta, struct sfb_sf *out, double *loss)
{
    SFB_ENTER();
    SFB_ARG(m);
    SFB_ARG(data);
    SFB_ARG(out);
    SFB_ARG(loss);
    if (!m || !data || !out || !loss || (s && !idx))
        return sfb__error(-EINVAL, "model: NULL argument to factors");
    if (s == 0) return sfb__error(-EINVAL, "model: empty minibatch");
    return m->ops->factors(m->priv, m->mats, data, idx, s, eta, out, loss);
}

void sfb_model_apply_local(struct sfb_model *m, float eta)
{
    SFB_ARG_OR(m, );
    if (m->ops->apply_local) m->ops->apply_local(m->priv, m->mats, eta);
}

/* The first version's size of struct sfb_eval */
#define EVAL_V1 SFB_END_OF(struct sfb_eval, sparse_nonzeros)

int sfb_model_evaluate(struct sfb_model *m, const struct sfb_dataset *data, struct sfb_eval *out)
{
    SFB_ENTER();
    SFB_ARG(m);
    SFB_ARG(data);
    SFB_ARG(out);
    int ret = SFB_CHECK_SIZE(out, "sfb_eval", EVAL_V1);
    if (ret) return ret;
    /* the model fills the library's whole structure; the caller gets what
     * fits in its size */
    struct sfb_eval all = {.size = sizeof all};
    all.loss = all.accuracy = NAN;
    all.knn_accuracy = all.knn_accuracy_euclid = all.recon_error = all.sparsity = NAN;
    all.recon_error_sparse = NAN;
    all.sparse_nonzeros = 0;
    all.n = 0;
    ret = m->ops->evaluate(m->priv, m->mats, data, &all);
    sfb__sized_copy(out, out->size, &all, sizeof all);
    return ret;
}

const struct sfb_model_option *sfb__model_list_option(const struct sfb_model_ops *ops)
{
    for (const struct sfb_model_option *o = ops ? ops->options : NULL; o && o->name; o++)
        if (o->kind == SFB_MODEL_OPT_U32_LIST) return o;
    return NULL;
}

