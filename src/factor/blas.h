/* BLAS for the layers above: only src/factor and models/ include <cblas.h>
 * (docs/design.md "Layers"), so what the engines compute by BLAS is
 * reached through here (src/factor/blas.c). */
#ifndef SFB_FACTOR_BLAS_H
#define SFB_FACTOR_BLAS_H

/* ‖x[0 .. n)‖₂, by the process's BLAS (cblas_snrm2, unit stride). Any
 * thread. */
float sfb__blas_norm2(int n, const float *x);

#endif
