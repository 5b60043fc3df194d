/* model_diff A B [B2 ...] TOL: loads model files and prints, for each B,
 * the relative max difference of its parameters from A's,
 * max|a−b| / max|a|; exits 0 if every one is ≤ TOL, 1 if any is larger,
 * 2 if a file cannot be compared. With several B (a job's replicas against
 * rank 0's) each line starts with the file's name: one process instead of
 * one per replica (sfb_relay.sh compares up to 31 replicas per job). */
#include <sfb/sfb.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* 0: within tol, 1: larger, 2: not comparable (message on stderr). */
static int diff_one(struct sfb_model *a, const char *path_b, double tol, int named)
{
    struct sfb_model *b = NULL;
    if (sfb_model_load(&b, path_b, NULL)) {
        fprintf(stderr, "model_diff: %s\n", sfb_last_error());
        return 2;
    }
    if (sfb_model_n_matrices(a) != sfb_model_n_matrices(b)) {
        fprintf(stderr, "model_diff: %s: matrix counts differ\n", path_b);
        sfb_model_close(&b);
        return 2;
    }
    double maxdiff = 0, maxabs = 0;
    for (uint32_t m = 0; m < sfb_model_n_matrices(a); m++) {
        const struct sfb_matrix *x = sfb_model_matrix(a, m), *y = sfb_model_matrix(b, m);
        if (x->rows != y->rows || x->cols != y->cols) {
            fprintf(stderr, "model_diff: %s: matrix %u shapes differ\n", path_b, m);
            sfb_model_close(&b);
            return 2;
        }
        for (size_t i = 0; i < (size_t)x->rows * x->cols; i++) {
            maxdiff = fmax(maxdiff, fabs((double)x->data[i] - y->data[i]));
            maxabs = fmax(maxabs, fabs((double)x->data[i]));
        }
    }
    sfb_model_close(&b);
    double rel = maxabs > 0 ? maxdiff / maxabs : maxdiff;
    if (named) printf("%s: ", path_b);
    printf("max |a-b| = %.3g, max |a| = %.3g, relative = %.3g (tolerance %g)\n", maxdiff, maxabs,
           rel, tol);
    return rel <= tol ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: model_diff A B [B2 ...] TOL\n");
        return 2;
    }
    struct sfb_model *a = NULL;
    if (sfb_model_load(&a, argv[1], NULL)) {
        fprintf(stderr, "model_diff: %s\n", sfb_last_error());
        return 2;
    }
    double tol = atof(argv[argc - 1]);
    int worst = 0;
    for (int i = 2; i < argc - 1; i++) {
        int r = diff_one(a, argv[i], tol, argc > 4);
        if (r > worst) worst = r;
    }
    sfb_model_close(&a);
    return worst;
}
