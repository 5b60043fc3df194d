/* The registries of models (models/model.c), sync engines (sfb/sync.c) and
 * topologies (topology/topo.c), and what the rest of sfb reads from them
 * instead of comparing names (issue 15): every registered model's ops say
 * its defaults, shapes, evaluation lines and options; every engine its
 * byte formula and whether it relays; every topology whether it is an
 * overlay. */
#include <sfb/sfb.h>
#include "sfb/sync.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Every model: a summary, usable defaults, and shapes (computed without
 * allocating) equal to those sfb_model_open creates. */
static int test_model_ops(void)
{
    const struct sfb_model_ops *ops;
    size_t n = 0;
    for (size_t i = 0; (ops = sfb_model_registry(i)); i++, n++) {
        ASSERT(ops->name && *ops->name && ops->summary && *ops->summary);
        ASSERT(sfb_model_find(ops->name) == ops);
        ASSERT(ops->default_lr > 0 && isfinite(ops->default_lr));
        ASSERT(ops->default_lambda >= 0 && isfinite(ops->default_lambda));
        ASSERT(ops->shapes != NULL);
        struct sfb_model_settings s;
        sfb_model_default_settings(&s);
        s.kind = ops->name;
        s.d = 7;
        s.k = 3;
        s.proj_dim = 4;
        s.dict_size = 5;
        s.lambda = ops->default_lambda;
        uint64_t rows[SFB_MODEL_MAX_MATRICES], cols[SFB_MODEL_MAX_MATRICES];
        uint32_t want = ops->shapes(&s, rows, cols);
        struct sfb_model *m = NULL;
        ASSERT_OK(sfb_model_open(&m, &s));
        ASSERT_EQ(sfb_model_n_matrices(m), want);
        for (uint32_t j = 0; j < want; j++) {
            ASSERT_EQ(sfb_model_matrix(m, j)->rows, rows[j]);
            ASSERT_EQ(sfb_model_matrix(m, j)->cols, cols[j]);
        }
        sfb_model_close(&m);
    }
    ASSERT_GE(n, 3); /* mlr, dml, sc and any model added since */
    ASSERT(sfb_model_registry(n) == NULL);
    /* the first is the default kind; each model's defaults hook ran */
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    ASSERT(strcmp(s.kind, sfb_model_registry(0)->name) == 0);
    ASSERT_EQ(s.proj_dim, 64);
    ASSERT_EQ(s.knn_k, 5);
    ASSERT_EQ(s.dict_size, 128);
    ASSERT_EQ(s.code_steps, 20);
    /* the values the CLI and docs promise, now read from the ops */
    ASSERT(sfb_model_find("dml")->default_lambda == 30.0);
    ASSERT(sfb_model_find("sc")->default_lambda == 0.1);
    ASSERT(sfb_model_find("mlr")->default_lambda == 0.0);
    struct sfb_train_settings t;
    sfb_train_default_settings(&t);
    t.model = "dml";
    ASSERT(sfb_train_lr0(&t) == 0.01);
    t.model = "sc";
    ASSERT(sfb_train_lr0(&t) == 1.0);
    t.lr = 0.5;
    ASSERT(sfb_train_lr0(&t) == 0.5);
    return 0;
}

/* Options: unique names across the models, inside struct
 * sfb_model_settings, sane ranges and help. */
static int test_model_options(void)
{
    const char *seen[64];
    size_t n_seen = 0;
    const struct sfb_model_ops *ops;
    for (size_t i = 0; (ops = sfb_model_registry(i)); i++) {
        for (const struct sfb_model_option *o = ops->options; o && o->name; o++) {
            for (size_t k = 0; k < n_seen; k++)
                ASSERT(strcmp(seen[k], o->name) != 0);
            ASSERT(n_seen < 64);
            seen[n_seen++] = o->name;
            ASSERT(o->metavar && o->help && *o->help);
            size_t width = o->kind == SFB_MODEL_OPT_U32        ? sizeof(uint32_t)
                           : o->kind == SFB_MODEL_OPT_U32_LIST ? sizeof(struct sfb_model_u32_list)
                                                               : sizeof(const char *);
            ASSERT(o->offset + width <= sizeof(struct sfb_model_settings));
            if (o->kind != SFB_MODEL_OPT_PATH) ASSERT(o->min <= o->max);
        }
    }
    ASSERT_GE(n_seen, 6); /* dml: proj-dim, knn-k, simi-pairs, diff-pairs; sc: dict-size, code-steps */
    /* an option writes where the model reads: --proj-dim is dml's projection size */
    const struct sfb_model_option *proj = sfb_model_find("dml")->options;
    ASSERT(strcmp(proj->name, "proj-dim") == 0);
    struct sfb_model_settings s;
    memset(&s, 0, sizeof s); /* zero: not given (as the CLI's option table) */
    uint32_t v = 9;
    memcpy((char *)&s + proj->offset, &v, sizeof v);
    ASSERT_EQ(s.proj_dim, 9);
    struct sfb_train_settings t;
    sfb_train_default_settings(&t);
    /* the structures' versions are checked first: nothing copied */
    ASSERT_EQ(sfb_train_set_model_options(&t, &s), -SFB_EVERSION);
    ASSERT_STR_CONTAINS(sfb_last_error(), "struct sfb_model_settings version 0");
    ASSERT_EQ(t.proj_dim, 0);
    s.version = SFB_MODEL_SETTINGS_VERSION;
    ASSERT_OK(sfb_train_set_model_options(&t, &s));
    ASSERT_EQ(t.proj_dim, 9);
    ASSERT_EQ(t.dict_size, 0); /* not given: left to the model's default */
    ASSERT_EQ(t.hidden.n, 0);
    /* a list option (mlp's --hidden) writes a struct sfb_model_u32_list */
    const struct sfb_model_option *hidden = sfb_model_find("mlp")->options;
    ASSERT(strcmp(hidden->name, "hidden") == 0 && hidden->kind == SFB_MODEL_OPT_U32_LIST);
    struct sfb_model_u32_list list = {2, {300, 100}};
    memcpy((char *)&s + hidden->offset, &list, sizeof list);
    ASSERT_OK(sfb_train_set_model_options(&t, &s));
    ASSERT_EQ(t.hidden.n, 2);
    ASSERT_EQ(t.hidden.v[1], 100);
    return 0;
}

/* What `sfb eval` prints for each model beyond loss and accuracy. */
static int test_eval_text(void)
{
    struct sfb_eval ev = {.loss = 1,
                          .accuracy = NAN,
                          .knn_accuracy = 0.5,
                          .knn_accuracy_euclid = 0.25,
                          .recon_error = 0.125,
                          .sparsity = 0.75,
                          .recon_error_sparse = 0.5,
                          .sparse_nonzeros = 3};
    char buf[512];
    ASSERT(sfb_model_find("mlr")->eval_text == NULL);
    ASSERT_GT(sfb_model_find("dml")->eval_text(&ev, buf, sizeof buf), 0);
    ASSERT(strcmp(buf, "k-NN accuracy: learned metric 50.00%, Euclidean 25.00%\n") == 0);
    ASSERT_GT(sfb_model_find("sc")->eval_text(&ev, buf, sizeof buf), 0);
    ASSERT(strcmp(buf, "reconstruction error 0.1250, code sparsity 75.00%\n"
                       "reconstruction error at 3 nonzeros per code (OMP) 0.5000\n") == 0);
    /* a measure the model did not compute prints nothing */
    ev.knn_accuracy = ev.recon_error = ev.recon_error_sparse = NAN;
    ASSERT_EQ(sfb_model_find("dml")->eval_text(&ev, buf, sizeof buf), 0);
    ASSERT_EQ(sfb_model_find("sc")->eval_text(&ev, buf, sizeof buf), 0);
    ASSERT(strcmp(buf, "") == 0);
    /* a short buffer is truncated, never overrun */
    ev.recon_error = 0.125;
    ev.recon_error_sparse = 0.5;
    char small[8];
    ASSERT_GT(sfb_model_find("sc")->eval_text(&ev, small, sizeof small), 8);
    ASSERT_EQ(strlen(small), 7);
    return 0;
}

/* Engines: the byte formula and relaying come from the ops. */
static int test_engines(void)
{
    const struct sfb__sync_desc *sfb = sfb__sync_find("sfb"), *fms = sfb__sync_find("fms");
    ASSERT(sfb && fms && sfb__sync_find("nope") == NULL && sfb__sync_find(NULL) == NULL);
    ASSERT(sfb__sync_registry(0) == sfb && sfb__sync_registry(1) == fms);
    ASSERT(sfb__sync_registry(2) == NULL);
    ASSERT(sfb->overlays == 1 && fms->overlays == 0);
    /* SFB: S·(K+D)·4 bytes to each of P−1 peers; FMS: 2·K·D·(P−1)/P·4 */
    ASSERT(sfb->formula_bytes(10, 20, 4, 8) == 3.0 * 8 * 30 * 4);
    ASSERT(fms->formula_bytes(10, 20, 4, 8) == 2.0 * 10 * 20 * 3 / 4 * 4);
    ASSERT_EQ(sfb_sync_registry_find("sfb"), 0);
    ASSERT_EQ(sfb_sync_registry_find("fms"), 1);
    ASSERT_EQ(sfb_sync_registry_find("nope"), -1);
    ASSERT(strcmp(sfb_sync_registry_name(1), "fms") == 0 && sfb_sync_registry_name(2) == NULL);
    ASSERT(sfb_sync_registry_summary(0) && *sfb_sync_registry_summary(0));
    /* an overlay with an engine that does not relay is refused, naming both */
    struct sfb_train_settings t;
    sfb_train_default_settings(&t);
    t.sync = "fms";
    t.topology = "halton";
    ASSERT_EQ(sfb_train_check_settings(&t, 0), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "--topology halton applies to --sync sfb");
    ASSERT_STR_CONTAINS(sfb_last_error(), "--sync fms");
    t.topology = "ring";
    ASSERT_EQ(sfb_train_check_settings(&t, 0), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(),
                        "unknown topology \"ring\" (full, halton, halton-classic)");
    return 0;
}

static int test_topologies(void)
{
    ASSERT_EQ(sfb_topo_is_overlay("full"), 0);
    ASSERT_EQ(sfb_topo_is_overlay("halton"), 1);
    ASSERT_EQ(sfb_topo_is_overlay("halton-classic"), 1);
    ASSERT_EQ(sfb_topo_is_overlay("ring"), -1);
    ASSERT_EQ(sfb_topo_is_overlay(NULL), -1);
    ASSERT(strcmp(sfb_topo_names(), "full, halton, halton-classic") == 0);
    struct sfb_topo *t = NULL;
    ASSERT_EQ(sfb_topo_open(&t, "ring", 4, 0), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "unknown topology 'ring' (full, halton, halton-classic)");
    return 0;
}

static const struct test_case tests[] = {
    {"model_ops", test_model_ops},   {"model_options", test_model_options},
    {"eval_text", test_eval_text},   {"engines", test_engines},
    {"topologies", test_topologies},
};

TEST_MAIN(tests)
