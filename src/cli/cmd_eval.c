/* `sfb eval`: evaluates a saved model file on a data set. */
#include "src/cli/cli.h"
#include "src/cli/optparse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `sfb eval`'s options. */
struct eval_opts {
    const char *model_file, *data, *test_data, *split;
    uint32_t patches;
    struct sfb_libsvm_settings ls;
};

#define EV(field) .off = offsetof(struct eval_opts, field), .size = sizeof(((struct eval_opts *)0)->field)

static const int eval_index_bases[] = {SFB_INDEX_AUTO, SFB_INDEX_0, SFB_INDEX_1};

static const struct cli_opt eval_table[] = {
    {.kind = CLI_STR, .name = "model-file", EV(model_file), "FILE",
     "model written by sfb run/worker (required)"},
    {.kind = CLI_STR, .name = "data", EV(data), "NAME",
     "fashion-mnist | synth:... | FILE.libsvm | IDX dir"},
    {.kind = CLI_STR, .name = "test-data", EV(test_data), "FILE", "evaluate on this file instead"},
    {.kind = CLI_CHOICE, .name = "split", EV(split), "test|train",
     "which part of NAME (default test where NAME has\none, else the data itself)",
     .choices = "test|train"},
    {.kind = CLI_ENUM, .name = "index-base", EV(ls.index_base), "auto|0|1",
     "libsvm feature index base (default auto)", .choices = "auto|0|1",
     .values = eval_index_bases},
    {.kind = CLI_UINT, .name = "patches", EV(patches), "P",
     "evaluate on PxP patches (models trained with\n--patches)", .umin = 1, .umax = 4096,
     .want = "a positive integer"},
    {.kind = CLI_HELP, .name = "help", .short_name = 'h', .size = 0, NULL, "this help"},
    {.kind = CLI_END},
};

/* Options into *o: 0, 1 (help printed) or 2 (usage error printed). */
static int eval_parse(int argc, char **argv, struct eval_opts *o)
{
    memset(o, 0, sizeof *o);
    sfb_libsvm_default_settings(&o->ls);
    struct cli_optparse p;
    cli_opt_init(&p, argc, argv, "eval");
    int r = cli_opt_parse(&p, eval_table, o, NULL);
    if (r == CLI_OPT_HELP) {
        printf("usage: sfb eval --model-file FILE --data NAME [options]\n\n"
               "Evaluates a saved model: prints mean loss and accuracy, and the\n"
               "model's own measures (k-NN accuracy, reconstruction error, ...).\n\n");
        cli_opt_help(stdout, eval_table);
        return 1;
    }
    if (r) return r;
    if (!o->model_file || !o->data) {
        fprintf(stderr, "sfb eval: --model-file and --data are required (see sfb eval --help)\n");
        return 2;
    }
    return 0;
}

/* The data set to evaluate on, loaded into *train / *test; *ds points at
 * the one chosen. 0, 1 (error printed) or 2 (usage). */
static int eval_data(const struct eval_opts *o, const struct sfb_model_settings *ms,
                     struct sfb_dataset *train, struct sfb_dataset *test,
                     struct sfb_dataset **ds)
{
    struct sfb_libsvm_settings ls = o->ls;
    if (!o->patches) {
        ls.dim = ms->d;
        ls.classes = ms->k;
    }
    int ret = sfb_data_load(o->data, o->test_data, &ls, train, test);
    if (ret) {
        cli_error(ret, "cannot load data");
        return 1;
    }
    int use_test = test->n > 0 && !(o->split && !strcmp(o->split, "train"));
    if (o->split && !strcmp(o->split, "test") && test->n == 0) {
        fprintf(stderr, "sfb eval: %s has no test split; use --test-data or --split train\n",
                o->data);
        return 2;
    }
    *ds = use_test ? test : train;
    if (o->patches) {
        struct sfb_patch_settings pset;
        sfb_patch_default_settings(&pset);
        pset.p = o->patches;
        pset.max_patches = 20000;
        struct sfb_dataset pd = {0};
        if ((ret = sfb_data_patches(*ds, &pset, &pd))) {
            cli_error(ret, "cannot cut patches");
            return 1;
        }
        sfb_dataset_free(*ds);
        **ds = pd;
    }
    if ((*ds)->d != ms->d) {
        fprintf(stderr, "sfb eval: %s has %u features, the model was trained on %u\n", o->data,
                (*ds)->d, ms->d);
        return 1;
    }
    return 0;
}

static void eval_print(const struct eval_opts *o, struct sfb_model *m, int64_t clock,
                       int use_test, int has_test, const struct sfb_eval *ev)
{
    const struct sfb_model_settings *ms = sfb_model_get_settings(m);
    printf("model %s (%s, %u features, %u classes, clock %lld)\n", o->model_file, ms->kind, ms->d,
           ms->k, (long long)clock);
    /* Name what was evaluated: a data set given as one file has no split. */
    if (use_test && o->test_data)
        printf("%s: %llu samples  loss %.6f", o->test_data, (unsigned long long)ev->n, ev->loss);
    else if (use_test || has_test)
        printf("%s split of %s: %llu samples  loss %.6f", use_test ? "test" : "train", o->data,
               (unsigned long long)ev->n, ev->loss);
    else
        printf("%s: %llu samples  loss %.6f", o->data, (unsigned long long)ev->n, ev->loss);
    if (isfinite(ev->accuracy)) printf("  accuracy %.2f%%", 100 * ev->accuracy);
    printf("\n");
    const struct sfb_model_ops *ops = sfb_model_get_ops(m);
    char text[1024];
    if (ops->eval_text && ops->eval_text(ev, text, sizeof text) > 0) fputs(text, stdout);
}

int cli_eval(int argc, char **argv)
{
    struct eval_opts o;
    int ret = eval_parse(argc, argv, &o);
    if (ret) return ret == 1 ? 0 : ret;
    cli_log_init(SFB_LOG_WARN);
    cli_blas_kernels();
    cli_blas_reserve("eval");
    struct sfb_model *m = NULL;
    int64_t clock = 0;
    if ((ret = sfb_model_load(&m, o.model_file, &clock))) {
        cli_error(ret, "cannot load model");
        return 1;
    }
    struct sfb_dataset train = {0}, test = {0}, *ds = NULL;
    ret = eval_data(&o, sfb_model_get_settings(m), &train, &test, &ds);
    struct sfb_eval ev = {.size = sizeof ev};
    if (!ret && (ret = sfb_model_evaluate(m, ds, &ev))) {
        cli_error(ret, "evaluation failed");
        ret = 1;
    }
    if (!ret) eval_print(&o, m, clock, ds == &test, test.n > 0, &ev);
    sfb_dataset_free(&train);
    sfb_dataset_free(&test);
    sfb_model_close(&m);
    return ret;
}
