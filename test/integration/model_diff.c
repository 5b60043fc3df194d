/* model_diff A B TOL: loads two model files and prints the relative max
 * difference of their parameters, max|a−b| / max|a|; exits 0 if it is
 * ≤ TOL, 1 if larger, 2 if the files cannot be compared. */
#include <sfb/sfb.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: model_diff A B TOL\n");
        return 2;
    }
    struct sfb_model *a = NULL, *b = NULL;
    if (sfb_model_load(&a, argv[1], NULL) || sfb_model_load(&b, argv[2], NULL)) {
        fprintf(stderr, "model_diff: %s\n", sfb_last_error());
        return 2;
    }
    if (sfb_model_n_matrices(a) != sfb_model_n_matrices(b)) {
        fprintf(stderr, "model_diff: matrix counts differ\n");
        return 2;
    }
    double maxdiff = 0, maxabs = 0;
    for (uint32_t m = 0; m < sfb_model_n_matrices(a); m++) {
        const struct sfb_matrix *x = sfb_model_matrix(a, m), *y = sfb_model_matrix(b, m);
        if (x->rows != y->rows || x->cols != y->cols) {
            fprintf(stderr, "model_diff: matrix %u shapes differ\n", m);
            return 2;
        }
        for (size_t i = 0; i < (size_t)x->rows * x->cols; i++) {
            maxdiff = fmax(maxdiff, fabs((double)x->data[i] - y->data[i]));
            maxabs = fmax(maxabs, fabs((double)x->data[i]));
        }
    }
    double rel = maxabs > 0 ? maxdiff / maxabs : maxdiff;
    double tol = atof(argv[3]);
    printf("max |a-b| = %.3g, max |a| = %.3g, relative = %.3g (tolerance %g)\n", maxdiff, maxabs,
           rel, tol);
    sfb_model_close(&a);
    sfb_model_close(&b);
    return rel <= tol ? 0 : 1;
}
