/* sc_compare MODEL P MAX_RATIO: the learned dictionary of MODEL against the
 * random dictionary it started from (a fresh model with the same settings,
 * hence the same seed), both evaluated on the same P×P patches of the
 * Fashion-MNIST test images (20 000 of them, as `sfb eval --patches P`
 * takes). Prints both evaluations; exits 0 if the learned reconstruction
 * error at the fixed sparsity (recon_error_sparse: OMP codes with the same
 * number of nonzeros for both) is ≤ MAX_RATIO × the random one's, 1 if not,
 * 2 on errors. */
#include <sfb/sfb.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void show(const char *name, const struct sfb_eval *ev)
{
    printf("%-8s loss %.5f  recon_error %.5f  sparsity %.4f  recon_error@%u %.5f\n", name,
           ev->loss, ev->recon_error, ev->sparsity, ev->sparse_nonzeros, ev->recon_error_sparse);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: sc_compare MODEL P MAX_RATIO\n");
        return 2;
    }
    struct sfb_model *learned = NULL, *random = NULL;
    struct sfb_dataset train = {0}, test = {0}, pd = {0};
    int rc = 2;
    if (sfb_model_load(&learned, argv[1], NULL)) goto fail;
    const struct sfb_model_settings *ms = sfb_model_get_settings(learned);
    if (strcmp(ms->kind, "sc") != 0) {
        fprintf(stderr, "sc_compare: %s is a %s model\n", argv[1], ms->kind);
        goto out;
    }
    if (sfb_model_open(&random, ms)) goto fail;
    struct sfb_libsvm_settings ls;
    sfb_libsvm_default_settings(&ls);
    if (sfb_data_load("fashion-mnist", NULL, &ls, &train, &test)) goto fail;
    struct sfb_patch_settings ps;
    sfb_patch_default_settings(&ps);
    ps.p = (uint32_t)atoi(argv[2]);
    ps.max_patches = 20000;
    if (sfb_data_patches(&test, &ps, &pd)) goto fail;
    struct sfb_eval el = {.size = sizeof el}, er = {.size = sizeof er};
    if (sfb_model_evaluate(learned, &pd, &el) || sfb_model_evaluate(random, &pd, &er)) goto fail;
    show("learned", &el);
    show("random", &er);
    double ratio = el.recon_error_sparse / er.recon_error_sparse;
    double max_ratio = atof(argv[3]);
    printf("learned/random reconstruction error at %u nonzeros per code: %.4f (must be <= %g)\n",
           el.sparse_nonzeros, ratio, max_ratio);
    rc = isfinite(ratio) && ratio <= max_ratio ? 0 : 1;
    goto out;
fail:
    fprintf(stderr, "sc_compare: %s\n", sfb_last_error());
out:
    sfb_dataset_free(&pd);
    sfb_dataset_free(&train);
    sfb_dataset_free(&test);
    sfb_model_close(&learned);
    sfb_model_close(&random);
    return rc;
}
