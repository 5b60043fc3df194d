/* sfb — sufficient factors: the low-rank form of one minibatch's update.
 *
 * For a parameter matrix A (rows × cols) and a minibatch of s samples, the
 * update is ΔA = scale · Σ_i b_i c_iᵀ = scale · Bᵀ C, with b_i ∈ R^rows and
 * c_i ∈ R^cols. Storage is sample-major so batches stack by concatenation:
 *   b: s × rows, row-major (b + i·rows is b_i)
 *   c: dense s × cols row-major, or CSR with s rows (c_row_ptr[s+1],
 *      c_col/c_val[nnz]), columns strictly increasing per row.
 */
#ifndef SFB_SF_H
#define SFB_SF_H

#include <sfb/common.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sfb_sf {
    uint32_t rows, cols, s; /* shapes: A is rows × cols, s samples */
    uint32_t matrix;        /* which parameter matrix of the model */
    uint32_t origin;        /* rank that computed it */
    int64_t clock;          /* origin's clock when computed */
    float scale;            /* ΔA = scale · Bᵀ C (e.g. −η/S) */
    int sparse_c;           /* 1: c is CSR */
    float *b;
    float *c;               /* dense c */
    uint32_t *c_row_ptr;    /* CSR c: s + 1 offsets (uint32: nnz < 2^32) */
    uint32_t *c_col;
    float *c_val;
    /* capacities (elements) of the buffers above; sfb_sf_reserve grows them */
    size_t b_cap, c_cap, rp_cap, nz_cap;
};

/* Ensures room for s samples of rows × cols with dense c (nnz == 0 and
 * sparse == 0) or CSR c with `nnz` non-zeros; sets the shapes and `sparse_c`.
 * Buffers only grow, so a reused sfb_sf allocates nothing in steady state.
 * Returns 0, -ENOMEM or -EOVERFLOW. */
SFB_API int sfb_sf_reserve(struct sfb_sf *sf, uint32_t rows, uint32_t cols, uint32_t s,
                           int sparse, uint64_t nnz);
/* Number of stored c values (nnz for CSR, s·cols for dense). */
SFB_API uint64_t sfb_sf_c_count(const struct sfb_sf *sf);
SFB_API void sfb_sf_free(struct sfb_sf *sf);

/* A dense parameter matrix, row-major. */
struct sfb_matrix {
    uint32_t rows, cols;
    float *data;
};

/* Reconstruction: applies a set of SF batches to a matrix with one sgemm for
 * all dense-c batches (their b rows are stacked, pre-multiplied by each
 * batch's scale) and one sparse pass for the CSR ones. Never one rank-1
 * update per sample. */
struct sfb_reconstruct;

/* Returns 0 or -ENOMEM; the caller owns *r. close sets *r to NULL. */
SFB_API int sfb_reconstruct_open(struct sfb_reconstruct **r);
SFB_API void sfb_reconstruct_close(struct sfb_reconstruct **r);
/* A += Σ_j sfs[j].scale · B_jᵀ C_j. Every batch must match a's shape and
 * CSR columns must lie inside A (-SFB_ESHAPE otherwise). Everything is
 * validated and every buffer reserved before A is touched, so on any error
 * nothing is applied. Batches with s = 0 are skipped; n = 0 is a no-op.
 * Dense batches are stacked into one sgemm (split only if the stack would
 * exceed 128 MiB); the sparse pass costs rows × nnz multiply-adds.
 * Returns 0, -SFB_ESHAPE, -EINVAL (NULL pointers), -ENOMEM, -EOVERFLOW; the
 * detail is in sfb_last_error(). The caller keeps ownership of a and sfs.
 * The stacking buffers are kept in *r between calls. One thread per *r. */
SFB_API int sfb_reconstruct_apply(struct sfb_reconstruct *r, struct sfb_matrix *a,
                                  const struct sfb_sf *const *sfs, size_t n);

/* Caps the dense-math (OpenBLAS) threads of this process, so P workers can
 * share a machine. Call before training starts. */
SFB_API void sfb_set_blas_threads(int n);

/* The kernel set OpenBLAS runs in this process (its core name, e.g.
 * "Haswell", "SkylakeX", "Prescott"). */
SFB_API const char *sfb_blas_core(void);

/* The kernel set this process should have run, an OPENBLAS_CORETYPE value,
 * or NULL. OpenBLAS chooses its kernels when it loads, from the processor's
 * model number; on one it does not know (Intel family 6 model 207 under
 * Debian 12's 0.3.21) it falls back to its generic "Prescott" kernels, and
 * its sgemm runs 5-8 times slower than with those the processor can run
 * (measured on an AVX-512 VM: 20 against 161 GFLOP/s). Non-NULL when
 * OpenBLAS runs kernels older than AVX2 on an x86-64 processor whose AVX2
 * and FMA (and AVX-512: "SkylakeX", else "Haswell") the OS enabled, and
 * OPENBLAS_CORETYPE is not set (set, even empty, it is the user's choice).
 * Only a new process can take the answer: OPENBLAS_CORETYPE is read when
 * OpenBLAS loads. The sfb command sets it, so the programs `sfb launch`
 * starts inherit it, and its computing commands (run, worker, eval) start
 * themselves again with it. Any thread. */
SFB_API const char *sfb_blas_better_core(void);

/* Under an address-space limit (RLIMIT_AS, `ulimit -v`), makes sure BLAS
 * has its working memory in the calling thread before anything relies on
 * it: OpenBLAS maps a 128 MiB buffer for each thread that runs it (its own
 * threads map theirs as they start, at load time) and retries a failed
 * mapping forever, a spin nothing times out. Waits (up to 1 s) for
 * OpenBLAS's threads to map theirs, checks that the limit leaves room for
 * those still missing and this thread's, then has OpenBLAS map them all
 * (one sgemm spread over every OpenBLAS thread: after a fork its threads
 * are gone and come back at the next threaded call, and one that mapped
 * later would take the buffer this thread reuses), so later calls in this
 * thread, and in processes forked from it, need no more. Without a limit it does
 * nothing. Returns 0, or -ENOMEM naming the limit, what is mapped and what
 * is needed. After -ENOMEM OpenBLAS's own threads may be stuck mapping,
 * and exit() would wait for them (its destructor joins them): leave with
 * _exit(). The estimate of OpenBLAS's missing buffers reads the process's
 * size; other big mappings (a second BLAS loaded by numpy) can hide one.
 * sfb_job_open calls it; a program that uses BLAS and then starts workers
 * with sfb_launch_local or sfb_launch_local_fork calls it before (fork
 * joins OpenBLAS's threads, which must not be stuck mapping then): the sfb
 * command does, first thing. Any thread; once per thread. */
SFB_API int sfb_blas_reserve(void);

#ifdef __cplusplus
}
#endif
#endif
