/* BLAS for the layers above models/: only models/ includes <cblas.h>
 * (docs/design.md "Layers"), so what the engines compute by BLAS is
 * reached through here (models/blas.c). */
#ifndef SFB_MODELS_BLAS_H
#define SFB_MODELS_BLAS_H

/* ‖x[0 .. n)‖₂, by the process's BLAS (cblas_snrm2, unit stride). Any
 * thread. */
float sfb__blas_norm2(int n, const float *x);

#endif
