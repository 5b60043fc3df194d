/* The public API's error mechanism (src/base/error.c, include/sfb/common.h):
 * no stale message is ever reported for a code, public calls clear the
 * message on entry, and every public function of include/sfb/ (every header) checks
 * its pointers: NULL is -EINVAL naming the argument (getters: a neutral
 * value and the message; close/free/default_settings: a no-op). */
#include <sfb/sfb.h>
#include "src/base/util.h"
#include "test.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* A message recorded for one failure is never reported for another. */
static int test_stale_message(void)
{
    sfb__error(-ENOENT, "old.libsvm: no such file");
    /* the code it belongs to: the detail */
    ASSERT_STR_CONTAINS(sfb_error_message(-ENOENT), "old.libsvm");
    ASSERT_STR_CONTAINS(sfb_error_message(ENOENT), "old.libsvm");
    /* another code (a bare `return -EIO` path): the generic text, not the
     * old detail */
    ASSERT(strcmp(sfb_error_message(-EIO), sfb_strerror(-EIO)) == 0);
    ASSERT(strcmp(sfb_error_message(-SFB_EPEER), sfb_strerror(-SFB_EPEER)) == 0);

    /* a public call clears the message on entry: after a success nothing
     * is left, even for the old code */
    struct sfb_topo *t = NULL;
    ASSERT_OK(sfb_topo_open(&t, "full", 4, 0));
    sfb_topo_close(&t);
    ASSERT(strcmp(sfb_last_error(), "") == 0);
    ASSERT(strcmp(sfb_error_message(-ENOENT), sfb_strerror(-ENOENT)) == 0);

    /* a public call failing with the same code as a stale message reports
     * its own message */
    sfb__error(-EINVAL, "stale: lambda must be >= 0");
    struct sfb_model_settings ms;
    sfb_model_default_settings(&ms);
    ms.kind = "nope";
    ms.d = 4;
    ms.k = 2;
    struct sfb_model *m = NULL;
    ASSERT_EQ(sfb_model_open(&m, &ms), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_error_message(-EINVAL), "unknown kind 'nope'");
    ASSERT(strstr(sfb_error_message(-EINVAL), "stale") == NULL);
    return 0;
}

/* The message of a NULL argument: function and argument named. */
#define ASSERT_NULL_ARG(call, fn, arg)                                           \
    do {                                                                       \
        sfb__error(-EIO, "stale");                                             \
        ASSERT_EQ((call), -EINVAL);                                            \
        ASSERT_STR_CONTAINS(sfb_error_message(-EINVAL), fn ": argument '" arg "' is NULL"); \
    } while (0)
#define ASSERT_GETTER_NULL(expr, want, fn)                                     \
    do {                                                                       \
        sfb__clear_error();                                                    \
        ASSERT((expr) == (want));                                              \
        ASSERT_STR_CONTAINS(sfb_error_message(-EINVAL), fn ": argument ");     \
    } while (0)

static int test_null_arguments(void)
{
    struct sfb_dataset ds = {0}, ds2 = {0};
    struct sfb_libsvm_settings ls;
    struct sfb_synth_settings ss;
    struct sfb_patch_settings ps;
    struct sfb_model_settings ms;
    struct sfb_topo_sim_settings ts;
    struct sfb_train_settings trs;
    struct sfb_train_result res = {.size = sizeof res};
    struct sfb_eval ev = {.size = sizeof ev};
    struct sfb_sf sf = {0};
    struct sfb_topo_report rep = {.size = sizeof rep};
    struct sfb_sampler *sampler = NULL;
    struct sfb_model *m = NULL;
    struct sfb_reconstruct *rc = NULL;
    struct sfb_topo *t = NULL;
    struct sfb_matrix mat = {0};
    uint64_t idx[4] = {0};
    uint32_t u32[8];
    double loss;
    int64_t clock;
    char buf[64];
    char *argv[] = {NULL};

    sfb_libsvm_default_settings(&ls);
    sfb_synth_default_settings(&ss);
    sfb_patch_default_settings(&ps);
    sfb_model_default_settings(&ms);
    ms.d = 4;
    ms.k = 2;
    sfb_topo_sim_default_settings(&ts);
    sfb_train_default_settings(&trs);
    ASSERT_OK(sfb_synth_generate(&ss, &ds));
    ASSERT_OK(sfb_model_open(&m, &ms));
    ASSERT_OK(sfb_reconstruct_open(&rc));
    ASSERT_OK(sfb_topo_open(&t, "full", 4, 0));
    ASSERT_OK(sfb_sampler_open(&sampler, 100, 0, 1, 4, 1));

    /* common.h: no pointer arguments but sfb_log_set's, where NULL is
     * documented (no sink) */
    sfb_log_set(NULL, NULL, SFB_LOG_ERROR);

    /* data.h */
    sfb_dataset_free(NULL);
    ASSERT_GETTER_NULL(sfb_dataset_nnz(NULL), 0u, "sfb_dataset_nnz");
    sfb_libsvm_default_settings(NULL);
    ASSERT_NULL_ARG(sfb_libsvm_read(NULL, &ls, &ds2), "sfb_libsvm_read", "path");
    ASSERT_NULL_ARG(sfb_libsvm_read("x.svm", &ls, NULL), "sfb_libsvm_read", "out");
    ASSERT_NULL_ARG(sfb_idx_read("a", "b", 10, NULL), "sfb_idx_read", "out");
    ASSERT_NULL_ARG(sfb_idx_read(NULL, "b", 10, &ds2), "sfb_idx_read", "images_path");
    ASSERT_NULL_ARG(sfb_idx_read("a", NULL, 10, &ds2), "sfb_idx_read", "labels_path");
    sfb_synth_default_settings(NULL);
    ASSERT_NULL_ARG(sfb_synth_parse("synth:k=2", NULL), "sfb_synth_parse", "s");
    ASSERT_NULL_ARG(sfb_synth_parse(NULL, &ss), "sfb_synth_parse", "spec");
    ASSERT_NULL_ARG(sfb_synth_generate(NULL, &ds2), "sfb_synth_generate", "s");
    ASSERT_NULL_ARG(sfb_synth_generate(&ss, NULL), "sfb_synth_generate", "out");
    ASSERT_NULL_ARG(sfb_data_load("synth", NULL, &ls, NULL, NULL), "sfb_data_load", "train");
    ASSERT_NULL_ARG(sfb_data_load(NULL, NULL, &ls, &ds2, NULL), "sfb_data_load", "name");
    ASSERT_NULL_ARG(sfb_data_load_shard("synth", NULL, &ls, NULL, NULL, NULL, NULL),
                    "sfb_data_load_shard", "train");
    ASSERT_NULL_ARG(sfb_data_load_shard(NULL, NULL, &ls, NULL, &ds2, NULL, NULL),
                    "sfb_data_load_shard", "name");
    ASSERT_GETTER_NULL(sfb_shard_owner(NULL, 3), 0u, "sfb_shard_owner");
    ASSERT_GETTER_NULL(sfb_shard_rows(NULL, 3), 0u, "sfb_shard_rows");
    ASSERT_GETTER_NULL(sfb_shard_global(NULL, 3), 0u, "sfb_shard_global");
    ASSERT_NULL_ARG(sfb_dataset_set_layout(NULL, SFB_LAYOUT_DENSE), "sfb_dataset_set_layout",
                    "ds");
    ASSERT_NULL_ARG(sfb_sampler_open(NULL, 100, 0, 1, 4, 1), "sfb_sampler_open", "out");
    sfb_sampler_close(NULL);
    ASSERT_GETTER_NULL(sfb_sampler_clocks_per_epoch(NULL), 0u, "sfb_sampler_clocks_per_epoch");
    ASSERT_NULL_ARG(sfb_sampler_batch(NULL, 0, idx), "sfb_sampler_batch", "s");
    ASSERT_NULL_ARG(sfb_sampler_batch(sampler, 0, NULL), "sfb_sampler_batch", "out");
    sfb_patch_default_settings(NULL);
    ASSERT_NULL_ARG(sfb_data_patches(NULL, &ps, &ds2), "sfb_data_patches", "images");
    ASSERT_NULL_ARG(sfb_data_patches(&ds, NULL, &ds2), "sfb_data_patches", "s");
    ASSERT_NULL_ARG(sfb_data_patches(&ds, &ps, NULL), "sfb_data_patches", "out");

    /* launch.h */
    ASSERT_NULL_ARG(sfb_launch_local(1, NULL), "sfb_launch_local", "argv");
    ASSERT_NULL_ARG(sfb_launch_local(1, argv), "sfb_launch_local", "argv[0]");
    ASSERT_NULL_ARG(sfb_launch_self_path(NULL, 10), "sfb_launch_self_path", "buf");
    (void)buf;

    /* model.h */
    sfb_model_default_settings(NULL);
    ASSERT_GETTER_NULL(sfb_model_find(NULL), NULL, "sfb_model_find");
    ASSERT_NULL_ARG(sfb_model_open(NULL, &ms), "sfb_model_open", "m");
    struct sfb_model *m2 = NULL;
    ASSERT_NULL_ARG(sfb_model_open(&m2, NULL), "sfb_model_open", "s");
    sfb_model_close(NULL);
    ASSERT_GETTER_NULL(sfb_model_get_ops(NULL), NULL, "sfb_model_get_ops");
    ASSERT_GETTER_NULL(sfb_model_get_settings(NULL), NULL, "sfb_model_get_settings");
    ASSERT_GETTER_NULL(sfb_model_n_matrices(NULL), 0u, "sfb_model_n_matrices");
    ASSERT_GETTER_NULL(sfb_model_matrix(NULL, 0), NULL, "sfb_model_matrix");
    ASSERT_NULL_ARG(sfb_model_factors(NULL, &ds, idx, 4, 0.1f, &sf, &loss), "sfb_model_factors",
                    "m");
    ASSERT_NULL_ARG(sfb_model_factors(m, NULL, idx, 4, 0.1f, &sf, &loss), "sfb_model_factors",
                    "data");
    ASSERT_NULL_ARG(sfb_model_factors(m, &ds, idx, 4, 0.1f, NULL, &loss), "sfb_model_factors",
                    "out");
    ASSERT_NULL_ARG(sfb_model_factors(m, &ds, idx, 4, 0.1f, &sf, NULL), "sfb_model_factors",
                    "loss");
    sfb__clear_error();
    sfb_model_apply_local(NULL, 0.1f);
    ASSERT_STR_CONTAINS(sfb_error_message(-EINVAL), "sfb_model_apply_local: argument 'm'");
    ASSERT_NULL_ARG(sfb_model_evaluate(NULL, &ds, &ev), "sfb_model_evaluate", "m");
    ASSERT_NULL_ARG(sfb_model_evaluate(m, NULL, &ev), "sfb_model_evaluate", "data");
    ASSERT_NULL_ARG(sfb_model_evaluate(m, &ds, NULL), "sfb_model_evaluate", "out");
    ASSERT_NULL_ARG(sfb_model_save(NULL, "x.sfb", 0), "sfb_model_save", "m");
    ASSERT_NULL_ARG(sfb_model_save(m, NULL, 0), "sfb_model_save", "path");
    ASSERT_NULL_ARG(sfb_model_load(NULL, "x.sfb", &clock), "sfb_model_load", "out");
    ASSERT_NULL_ARG(sfb_model_load(&m2, NULL, &clock), "sfb_model_load", "path");

    /* sf.h */
    ASSERT_NULL_ARG(sfb_sf_reserve(NULL, 2, 4, 4, 0, 0), "sfb_sf_reserve", "sf");
    ASSERT_GETTER_NULL(sfb_sf_c_count(NULL), 0u, "sfb_sf_c_count");
    sfb_sf_free(NULL);
    ASSERT_NULL_ARG(sfb_reconstruct_open(NULL), "sfb_reconstruct_open", "r");
    sfb_reconstruct_close(NULL);
    ASSERT_NULL_ARG(sfb_reconstruct_apply(NULL, &mat, NULL, 0), "sfb_reconstruct_apply", "r");
    ASSERT_NULL_ARG(sfb_reconstruct_apply(rc, NULL, NULL, 0), "sfb_reconstruct_apply", "a");

    /* topo.h */
    uint32_t n;
    ASSERT_NULL_ARG(sfb_topo_offsets(NULL, 4, 0, u32, 8, &n), "sfb_topo_offsets", "name");
    ASSERT_NULL_ARG(sfb_topo_offsets("full", 4, 0, u32, 8, NULL), "sfb_topo_offsets", "n");
    ASSERT_EQ(sfb_topo_offsets("full", 4, 0, NULL, 8, &n), -EINVAL);
    ASSERT_STR_CONTAINS(sfb_error_message(-EINVAL), "sfb_topo_offsets: argument 'out' is NULL");
    ASSERT_OK(sfb_topo_offsets("full", 4, 0, NULL, 0, &n)); /* only the count */
    ASSERT_NULL_ARG(sfb_topo_open(NULL, "full", 4, 0), "sfb_topo_open", "out");
    struct sfb_topo *t2 = NULL;
    ASSERT_NULL_ARG(sfb_topo_open(&t2, NULL, 4, 0), "sfb_topo_open", "name");
    sfb_topo_close(NULL);
    ASSERT_GETTER_NULL(sfb_topo_name(NULL), NULL, "sfb_topo_name");
    ASSERT_GETTER_NULL(sfb_topo_nodes(NULL), 0u, "sfb_topo_nodes");
    ASSERT_GETTER_NULL(sfb_topo_requested_degree(NULL), 0u, "sfb_topo_requested_degree");
    ASSERT_GETTER_NULL(sfb_topo_out_degree(NULL), 0u, "sfb_topo_out_degree");
    ASSERT_GETTER_NULL(sfb_topo_offset(NULL, 0), 0u, "sfb_topo_offset");
    ASSERT_GETTER_NULL(sfb_topo_neighbor(NULL, 0, 0), UINT32_MAX, "sfb_topo_neighbor");
    ASSERT_GETTER_NULL(sfb_topo_link_index(NULL, 0, 1), UINT32_MAX, "sfb_topo_link_index");
    ASSERT_GETTER_NULL(sfb_topo_forward_links(NULL, 0, 0, u32), 0u, "sfb_topo_forward_links");
    ASSERT_GETTER_NULL(sfb_topo_forward_links(t, 0, 0, NULL), 0u, "sfb_topo_forward_links");
    ASSERT_GETTER_NULL(sfb_topo_children(NULL, 0, 0, u32), 0u, "sfb_topo_children");
    ASSERT_GETTER_NULL(sfb_topo_children(t, 0, 0, NULL), 0u, "sfb_topo_children");
    ASSERT_GETTER_NULL(sfb_topo_parent(NULL, 0, 1), UINT32_MAX, "sfb_topo_parent");
    ASSERT_GETTER_NULL(sfb_topo_parent_link(NULL, 0, 1), UINT32_MAX, "sfb_topo_parent_link");
    ASSERT_GETTER_NULL(sfb_topo_hops(NULL, 0, 1), UINT32_MAX, "sfb_topo_hops");
    ASSERT_GETTER_NULL(sfb_topo_diameter(NULL), 0u, "sfb_topo_diameter");
    sfb__clear_error();
    ASSERT(isnan(sfb_topo_mean_hops(NULL)));
    ASSERT_STR_CONTAINS(sfb_error_message(-EINVAL), "sfb_topo_mean_hops: argument 't'");
    ASSERT_GETTER_NULL(sfb_topo_link_frames(NULL, 0), 0u, "sfb_topo_link_frames");
    sfb_topo_sim_default_settings(NULL);
    ASSERT_NULL_ARG(sfb_topo_analyse(NULL, &ts, &rep), "sfb_topo_analyse", "t");
    ASSERT_NULL_ARG(sfb_topo_analyse(t, &ts, NULL), "sfb_topo_analyse", "r");

    /* train.h */
    sfb_train_default_settings(NULL);
    sfb__clear_error();
    ASSERT(isnan(sfb_train_lr0(NULL)));
    ASSERT_STR_CONTAINS(sfb_error_message(-EINVAL), "sfb_train_lr0: argument 's'");
    sfb__clear_error();
    ASSERT(isnan(sfb_train_lr(NULL, 0, 10)));
    ASSERT_STR_CONTAINS(sfb_error_message(-EINVAL), "sfb_train_lr: argument 's'");
    ASSERT_NULL_ARG(sfb_train_run(NULL, NULL, NULL, 1.0, &res), "sfb_train_run", "s");
    ASSERT_NULL_ARG(sfb_train_run(&trs, NULL, NULL, 1.0, NULL), "sfb_train_run", "res");
    ASSERT_NULL_ARG(sfb_train_set_model_options(NULL, &ms), "sfb_train_set_model_options", "t");
    ASSERT_NULL_ARG(sfb_train_set_model_options(&trs, NULL), "sfb_train_set_model_options", "ms");

    /* cost_model.h */
    struct sfb_cost_settings cs;
    struct sfb_cost_result cr = {.size = sizeof cr};
    sfb_cost_default_settings(NULL);
    sfb_cost_default_settings(&cs);
    ASSERT_NULL_ARG(sfb_cost_predict(NULL, 4, 4, 0, &cr), "sfb_cost_predict", "s");
    ASSERT_NULL_ARG(sfb_cost_predict(&cs, 4, 4, 0, NULL), "sfb_cost_predict", "out");

    sfb_sampler_close(&sampler);
    sfb_topo_close(&t);
    sfb_reconstruct_close(&rc);
    sfb_model_close(&m);
    sfb_dataset_free(&ds);
    return 0;
}

/* sfb_strerror names libfabric's codes (FI_ERRNO_OFFSET = 256 ...) through
 * the namer the network layer registers (src/transport/fi_errors.c); the base
 * layer itself knows no libfabric. Its own and errno codes are unchanged. */
static int test_strerror_layers(void)
{
    ASSERT_STR_CONTAINS(sfb_strerror(-256), "Unspecified error"); /* FI_EOTHER */
    ASSERT_STR_CONTAINS(sfb_strerror(-265), "Truncation error");  /* FI_ETRUNC */
    ASSERT(strcmp(sfb_strerror(-ENOENT), "No such file or directory") == 0);
    ASSERT(strcmp(sfb_strerror(0), "success") == 0);
    return 0;
}

/* A message that wraps the previous one (sfb__error(code, "outer: %s",
 * sfb_last_error())) reads the old text whole, though it is written to the
 * same buffer. */
static int test_wrapped_message(void)
{
    sfb__error(-EPROTO, "inner detail %d", 42);
    sfb__error(-EPROTO, "outer: %s", sfb_last_error());
    ASSERT(strcmp(sfb_last_error(), "outer: inner detail 42") == 0);
    sfb__error(-EPROTO, "%s (again)", sfb_error_message(-EPROTO));
    ASSERT(strcmp(sfb_last_error(), "outer: inner detail 42 (again)") == 0);
    return 0;
}

#define ASSERT_REFUSED(call, code, text)                                       \
    do {                                                                       \
        ASSERT_EQ((call), (code));                                             \
        ASSERT_STR_CONTAINS(sfb_error_message(code), text);                    \
    } while (0)

/* The versioned structures (docs/api.md, "Versions of the structures"):
 * each *_default_settings sets its structure's version; settings of another
 * version, or with a reserved byte set, are -SFB_EVERSION naming the
 * function, the structure and its defaults function, before anything
 * happens; a result whose size is below the first version's is -EINVAL. */
static int test_versions(void)
{
    struct sfb_dataset ds = {0}, ds2 = {0};
    struct sfb_libsvm_settings ls;
    sfb_libsvm_default_settings(&ls);
    ASSERT_EQ(ls.version, SFB_LIBSVM_SETTINGS_VERSION);
    ls.version = 0;
    ASSERT_REFUSED(sfb_libsvm_read("x.svm", &ls, &ds2), -SFB_EVERSION,
                   "sfb_libsvm_read: struct sfb_libsvm_settings version 0, this library");
    ASSERT_REFUSED(sfb_data_load("synth", NULL, &ls, &ds2, NULL), -SFB_EVERSION,
                   "fill the structure with sfb_libsvm_default_settings first");
    ASSERT_EQ(ds2.n, 0);
    sfb_libsvm_default_settings(&ls);
    ls.reserved[3] = 1;
    ASSERT_REFUSED(sfb_data_load_shard("synth", NULL, &ls, NULL, &ds2, NULL, NULL),
                   -SFB_EVERSION, "sfb_data_load_shard: struct sfb_libsvm_settings: reserved "
                   "byte 3 is set");

    struct sfb_synth_settings ss;
    sfb_synth_default_settings(&ss);
    ASSERT_EQ(ss.version, SFB_SYNTH_SETTINGS_VERSION);
    ss.d = 16;
    ss.n = 8;
    ASSERT_OK(sfb_synth_generate(&ss, &ds));
    ss.version = SFB_SYNTH_SETTINGS_VERSION + 1;
    ASSERT_REFUSED(sfb_synth_generate(&ss, &ds2), -SFB_EVERSION,
                   "struct sfb_synth_settings version 2");

    struct sfb_patch_settings ps;
    sfb_patch_default_settings(&ps);
    ASSERT_EQ(ps.version, SFB_PATCH_SETTINGS_VERSION);
    ps.p = 2;
    ps.version = 0;
    ASSERT_REFUSED(sfb_data_patches(&ds, &ps, &ds2), -SFB_EVERSION, "sfb_patch_settings");

    struct sfb_model_settings ms;
    sfb_model_default_settings(&ms);
    ASSERT_EQ(ms.version, SFB_MODEL_SETTINGS_VERSION);
    ms.d = 16;
    ms.k = ds.k;
    ms.reserved[0] = 7;
    struct sfb_model *m = NULL;
    ASSERT_REFUSED(sfb_model_open(&m, &ms), -SFB_EVERSION, "sfb_model_default_settings");
    ms.reserved[0] = 0;
    ASSERT_OK(sfb_model_open(&m, &ms));
    ASSERT_EQ(sfb_model_get_settings(m)->version, SFB_MODEL_SETTINGS_VERSION);
    struct sfb_eval ev = {0};
    ASSERT_REFUSED(sfb_model_evaluate(m, &ds, &ev), -EINVAL,
                   "sfb_model_evaluate: out->size is 0, less than any struct sfb_eval");
    ev.size = sizeof ev;
    ASSERT_OK(sfb_model_evaluate(m, &ds, &ev));
    ASSERT_EQ(ev.size, sizeof ev);
    ASSERT_EQ(ev.n, 8);
    sfb_model_close(&m);

    struct sfb_topo *t = NULL;
    ASSERT_OK(sfb_topo_open(&t, "full", 4, 0));
    struct sfb_topo_sim_settings ts;
    sfb_topo_sim_default_settings(&ts);
    ASSERT_EQ(ts.version, SFB_TOPO_SIM_SETTINGS_VERSION);
    struct sfb_topo_report rep = {0};
    ASSERT_REFUSED(sfb_topo_analyse(t, &ts, &rep), -EINVAL, "r->size is 0");
    rep.size = sizeof rep;
    ASSERT_OK(sfb_topo_analyse(t, &ts, &rep));
    ASSERT_EQ(rep.nodes, 4);
    ts.version = 0;
    ASSERT_REFUSED(sfb_topo_analyse(t, &ts, &rep), -SFB_EVERSION, "sfb_topo_sim_settings");
    sfb_topo_close(&t);

    struct sfb_cost_settings cs;
    sfb_cost_default_settings(&cs);
    ASSERT_EQ(cs.version, SFB_COST_SETTINGS_VERSION);
    cs.gemm_gflops = cs.add_gadds = 1;
    struct sfb_cost_result cr = {0};
    ASSERT_REFUSED(sfb_cost_predict(&cs, 4, 4, 0, &cr), -EINVAL, "out->size is 0");
    cr.size = sizeof cr;
    ASSERT_OK(sfb_cost_predict(&cs, 4, 4, 0, &cr));
    ASSERT(cr.ms[SFB_COST_SFB] > 0);
    cs.version = 0;
    ASSERT_REFUSED(sfb_cost_predict(&cs, 4, 4, 0, &cr), -SFB_EVERSION, "sfb_cost_settings");

    struct sfb_train_settings trs;
    struct sfb_train_result res = {0};
    sfb_train_default_settings(&trs);
    ASSERT_EQ(trs.version, SFB_TRAIN_SETTINGS_VERSION);
    ASSERT_EQ(trs.libsvm.version, SFB_LIBSVM_SETTINGS_VERSION);
    ASSERT_REFUSED(sfb_train_run(&trs, NULL, NULL, 1, &res), -EINVAL, "res->size is 0");
    trs.version = 0;
    res.size = sizeof res;
    ASSERT_REFUSED(sfb_train_check_settings(&trs, 0), -SFB_EVERSION,
                   "struct sfb_train_settings version 0");
    ASSERT_REFUSED(sfb_train_run(&trs, NULL, NULL, 1, &res), -SFB_EVERSION,
                   "sfb_train_default_settings");
    ASSERT(isnan(sfb_train_lr0(&trs)) && isnan(sfb_train_lr(&trs, 0, 10)));
    sfb_train_default_settings(&trs);
    trs.libsvm.version = 0;
    ASSERT_REFUSED(sfb_train_check_settings(&trs, 0), -SFB_EVERSION, "sfb_libsvm_settings");
    sfb_dataset_free(&ds);
    return 0;
}

/* The trainer's debugging knobs come from the environment (SFB_DEBUG_*,
 * which `sfb run --debug-*` sets), checked with the settings. */
static int test_debug_env(void)
{
    struct sfb_train_settings trs;
    sfb_train_default_settings(&trs);
    ASSERT_OK(setenv("SFB_DEBUG_SLOW_RANK", "3", 1));
    ASSERT_OK(sfb_train_check_settings(&trs, 0));
    ASSERT_OK(sfb_train_check_settings(&trs, 4));
    ASSERT_REFUSED(sfb_train_check_settings(&trs, 3), -SFB_EUSAGE,
                   "--debug-slow-rank 3 (SFB_DEBUG_SLOW_RANK): the job has ranks 0..2");
    ASSERT_OK(setenv("SFB_DEBUG_SLOW_RANK", "x", 1));
    ASSERT_REFUSED(sfb_train_check_settings(&trs, 0), -SFB_EUSAGE,
                   "SFB_DEBUG_SLOW_RANK='x': expected an integer");
    ASSERT_OK(unsetenv("SFB_DEBUG_SLOW_RANK"));
    ASSERT_OK(setenv("SFB_DEBUG_DELAY_MS", "-1", 1));
    ASSERT_REFUSED(sfb_train_check_settings(&trs, 0), -SFB_EUSAGE,
                   "SFB_DEBUG_DELAY_MS=\"-1\" (--debug-delay-ms): expected a number >= 0");
    ASSERT_OK(setenv("SFB_DEBUG_DELAY_MS", "2.5", 1));
    ASSERT_OK(setenv("SFB_DEBUG_SLOW_FACTOR", "0.5", 1));
    ASSERT_REFUSED(sfb_train_check_settings(&trs, 0), -SFB_EUSAGE, "SFB_DEBUG_SLOW_FACTOR");
    ASSERT_OK(setenv("SFB_DEBUG_SLOW_FACTOR", "3", 1));
    ASSERT_OK(sfb_train_check_settings(&trs, 0));
    ASSERT_OK(unsetenv("SFB_DEBUG_DELAY_MS"));
    ASSERT_OK(unsetenv("SFB_DEBUG_SLOW_FACTOR"));
    return 0;
}

static const struct test_case tests[] = {
    {"wrapped_message", test_wrapped_message},
    {"strerror_layers", test_strerror_layers},
    {"stale_message", test_stale_message},
    {"null_arguments", test_null_arguments},
    {"versions", test_versions},
    {"debug_env", test_debug_env},
};

TEST_MAIN(tests)
