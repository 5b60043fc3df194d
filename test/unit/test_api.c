/* The public API's error mechanism (src/base/common.c, include/sfb/common.h):
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
    struct sfb_train_result res;
    struct sfb_eval ev;
    struct sfb_sf sf = {0};
    struct sfb_topo_report rep;
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

static const struct test_case tests[] = {
    {"wrapped_message", test_wrapped_message},
    {"strerror_layers", test_strerror_layers},
    {"stale_message", test_stale_message},
    {"null_arguments", test_null_arguments},
};

TEST_MAIN(tests)
