/* The cost model behind `--sync auto`: an α-β prediction of each engine's
 * time per clock for one matrix, and the start-up measurements it needs
 * (the link's α and β, the sgemm and add rates). docs/design.md §"Choosing
 * the engine per matrix" gives the formulas.
 *
 *   SFB: msgs·α + bytes·β + 2·K·D·S·P / gemm       (P−1 peers' SFs + the own)
 *   FMS: (2(P−1) + 1)·α + 2(P−1)·(4·K·D/P + 64)·β
 *        + 2·K·D·S / gemm + K·D·(3 + (P−1)/P) / add
 *
 * A CSR c of nnz non-zeros (sparse rows) applies by the sparse pass: the
 * GEMM term 2·K·D·S becomes 2·K·nnz at the add rate.
 *
 * where msgs and bytes are what the topology's routing has one worker send
 * per clock (sfb_topo_analyse: full = P−1 frames of sf_bytes each; an
 * overlay relays, bundles and has fewer, larger messages), and the compute
 * terms are stretched by ranks_per_host / host_cores when the ranks of a
 * host share fewer cores. Everything here is deterministic: the same inputs
 * give the same plan on every rank. */
#ifndef SFB_COST_H
#define SFB_COST_H

#include <stddef.h>
#include <stdint.h>

struct sfb__comm;

/* One link's α-β model: a message of n bytes costs alpha_s + n·beta. */
struct sfb__link {
    double alpha_s, beta_s_per_byte;
    int measured;   /* 1: from sfb__link_probe; 0: given or none */
    uint32_t peers; /* sfb__link_probe: the links to rank 0 it timed */
};

enum sfb__engine_kind { SFB__ENG_SFB = 0, SFB__ENG_FMS = 1 };

struct sfb__cost_matrix {
    uint64_t rows, cols; /* K × D */
    /* one SF frame of this matrix for one clock of one worker as the codec
     * really encodes it (header included); 0 = the dense formula
     * 64 + 8 + e·S·(K+D) */
    double sf_bytes;
    /* non-zeros of c in that frame when c goes as CSR (0: dense c): the
     * apply is then the sparse pass, rows·nnz multiply-adds per SF */
    double c_nnz;
    /* the factors' precision (enum sfb__wire_prec): SFB_WIRE_F32 (0), e = 4
     * bytes a number; SFB_WIRE_BF16, e = 2, and each SF is widened to
     * float32 before its apply (S·(K+D) more element passes) */
    unsigned prec;
    /* FMS's rows' precision (dense_dtype): SFB_WIRE_BF16 halves its bytes
     * (the rounding and widening are element passes like its adds) */
    unsigned dense_prec;
    /* FMS pushes the factors of an owner's rows where they are fewer bytes
     * (an ordered job's SFs with dense c and float32 rows, sfb/fms.c): the
     * pushes' bytes and the owners' adds shrink, the flops stay */
    int fms_factors;
};

struct sfb__cost_env {
    uint32_t world, batch;  /* P workers, S samples per worker and clock */
    const char *topology;   /* NULL = "full" */
    uint32_t degree;        /* overlay out-degree, 0 = default */
    int flush_clock;        /* overlay forwarding at clock boundaries */
    struct sfb__link link;  /* α, β (both 0: 10 µs, 1 Gbit/s) */
    double gemm_flops_per_s; /* sgemm rate at the matrix's shape (> 0) */
    double add_flops_per_s;  /* element adds per second (> 0) */
    /* ranks sharing the cores of one host (emulated clusters): compute
     * terms × max(1, ranks_per_host / host_cores); 0 = off */
    uint32_t host_cores, ranks_per_host;
};

/* Predicted ms per clock of each engine for matrix m: ms[SFB__ENG_SFB],
 * ms[SFB__ENG_FMS]. Returns 0, -EINVAL (NULL, world or batch 0, a rate
 * ≤ 0, α or β < 0, an empty shape) or -SFB_EUSAGE (unknown topology), with
 * the detail in sfb_last_error(). Any thread. */
int sfb__cost_predict(const struct sfb__cost_env *e, const struct sfb__cost_matrix *m,
                      double ms[2]);

/* The terms of the prediction, per engine (SFB__ENG_*): messages and bytes
 * one worker sends per clock, the compute in ms, and the total ms. */
struct sfb__cost_parts {
    double ms[2], msgs[2], bytes[2], compute_ms[2];
    double sf_bytes; /* the SF frame counted (given, or the dense formula) */
};
/* sfb__cost_predict with every term; same errors. */
int sfb__cost_parts(const struct sfb__cost_env *e, const struct sfb__cost_matrix *m,
                    struct sfb__cost_parts *out);

/* Per matrix the cheaper engine (a tie goes to SFB): choice[i] = SFB__ENG_*,
 * and, when ms is not NULL, ms[i] its two predictions. Returns 0 or the
 * first matrix's error from sfb__cost_predict (prefixed "matrix i"). */
int sfb__cost_plan(const struct sfb__cost_env *e, const struct sfb__cost_matrix *m, uint32_t n,
                   int *choice, double (*ms)[2]);

/* One line per matrix into buf (NUL-terminated, truncated to cap):
 *   "matrix 0 1024x785: sfb 6.1 ms, fms 38.2 ms per clock -> sfb\n"
 * Returns the length the whole text needs (as snprintf), or -EINVAL. */
int sfb__cost_describe(const struct sfb__cost_matrix *m, uint32_t n, const int *choice,
                       const double (*ms)[2], char *buf, size_t cap);
/* The line of one matrix, named `index`; returns as snprintf (the length
 * the line needs) or -EINVAL. */
int sfb__cost_describe_one(uint32_t index, const struct sfb__cost_matrix *m, int choice,
                           const double ms[2], char *buf, size_t cap);

/* ---- start-up measurements (sfb/probe.c) ---- */

/* Collective, every rank after the comm is open and before any engine has
 * installed its hooks or sent a data frame: rank 0 ping-pongs small and
 * large SFB_WIRE_DATA frames with up to 3 peers (other hosts' first), fits
 * α (half the small round trip) and β (the large frame's extra half round
 * trip per byte), and sends the result to every rank; a barrier ends it, so
 * every rank returns the same *out (measured = 1). At most ~300 ms of
 * probing; each wait is bounded (a missing reply or result fails after
 * 20 s, a dead peer as soon as comm knows) and calls sfb__comm_check.
 * World 1: zeros, measured = 0. Returns 0, or a negative code with the
 * rank and peer in sfb_last_error(). Compute thread. */
int sfb__link_probe(struct sfb__comm *c, struct sfb__link *out);

/* sgemm flops per second of the real reconstruction (sfb_reconstruct_apply)
 * of s samples into a rows × cols matrix: one warm-up and up to 5 timed
 * repetitions, stopping after ~20 ms. 0 on a bad shape or no memory. */
double sfb__gemm_rate(uint64_t rows, uint64_t cols, uint32_t s);

/* Element adds per second (a[i] += b[i] over n floats), as sfb__gemm_rate.
 * 0 on n = 0 or no memory. */
double sfb__add_rate(uint64_t n);

#endif
