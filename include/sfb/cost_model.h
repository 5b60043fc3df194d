/* sfb — the cost model behind `--sync auto`: the predicted time per clock of
 * each synchronization engine for one matrix under an α-β link model, as
 * `sfb topo --engines` prints it (docs/design.md, "Choosing the engine per
 * matrix", gives the formulas). The runtime measures α, β and the rates at
 * start-up; here the caller gives them. */
#ifndef SFB_COST_MODEL_H
#define SFB_COST_MODEL_H

#include <sfb/common.h>

#ifdef __cplusplus
extern "C" {
#endif

enum sfb_cost_engine { SFB_COST_SFB = 0, SFB_COST_FMS = 1 };

/* The version of struct sfb_cost_settings (docs/api.md, "Versions of the
 * structures"): a later release that adds a field (in `reserved`, zero
 * meaning its default) raises it. Fill it with sfb_cost_default_settings;
 * an unknown version or a reserved byte set is -SFB_EVERSION. */
#define SFB_COST_SETTINGS_VERSION 1

struct sfb_cost_settings {
    uint32_t version;        /* SFB_COST_SETTINGS_VERSION */
    uint32_t world, batch;   /* P workers, S samples per worker and clock */
    const char *topology;    /* SFB's overlay; NULL = "full" */
    uint32_t degree;         /* overlay out-degree, 0 = ceil(log2 P) */
    int flush_clock;         /* overlay forwarding at clock boundaries */
    double link_gbps;        /* per-worker bandwidth (β = 8 / (G·1e9) s/byte) */
    double latency_us;       /* per-message latency α */
    double gemm_gflops;      /* sgemm rate of the reconstruction, GFLOP/s (> 0) */
    double add_gadds;        /* element adds, 1e9 per second (> 0) */
    /* every rank of a host shares host_cores cores (0: off): compute terms
     * × ranks_per_host / host_cores when above 1 */
    uint32_t host_cores, ranks_per_host;
    uint8_t reserved[32];    /* for fields of later versions: zero */
};

/* P = 2, S = 32, full, 1 Gbit/s, 10 µs; rates 0 (the caller sets them);
 * the version. NULL is a no-op. */
SFB_API void sfb_cost_default_settings(struct sfb_cost_settings *s);

/* The caller sets size (sizeof) and gets the fields that fit in it (a later
 * version may add fields at the end). */
struct sfb_cost_result {
    uint32_t size;   /* sizeof(struct sfb_cost_result), set by the caller */
    /* per engine (enum sfb_cost_engine): ms per clock, and its terms:
     * messages and bytes one worker sends per clock, compute ms */
    double ms[2], msgs[2], bytes[2], compute_ms[2];
    double sf_bytes; /* the SF frame counted */
    int winner;      /* the cheaper (a tie: SFB_COST_SFB) */
};

/* Prediction for a rows × cols matrix whose SF frame (one worker, one
 * clock, header included) is sf_bytes (0: dense fp32, 72 + 4·S·(rows+cols)).
 * Returns 0, -EINVAL (NULL, zero shape, world or batch; rates ≤ 0; out->size
 * below this version's), -SFB_EVERSION (settings of an unknown version) or
 * -SFB_EUSAGE (unknown topology, link out of range), with the detail in
 * sfb_last_error(). Any thread. */
SFB_API int sfb_cost_predict(const struct sfb_cost_settings *s, uint64_t rows, uint64_t cols,
                             double sf_bytes, struct sfb_cost_result *out);

/* Measured on this machine: sgemm FLOP/s of the reconstruction of s samples
 * into rows × cols, and element adds per second over n floats (a few ms
 * each); 0 on a bad shape or no memory. */
SFB_API double sfb_cost_gemm_rate(uint64_t rows, uint64_t cols, uint32_t s);
SFB_API double sfb_cost_add_rate(uint64_t n);

#ifdef __cplusplus
}
#endif
#endif
