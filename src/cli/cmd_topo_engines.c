/* `sfb topo --engines`: the break-even surface of the two synchronization
 * engines. For each node count P and topology, the cost model of `--sync
 * auto` (include/sfb/cost_model.h; the formulas in docs/design.md) predicts
 * SFB's and FMS's ms per clock for one K × D matrix at S samples per
 * worker, and names the winner; a footer per topology says over which P
 * each engine wins. Public API only. */
#include "src/cli/cli.h"
#include "src/cli/cmd_topo.h"

#include <sfb/sfb.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define ENGINE(w) ((w) == SFB_COST_FMS ? "fms" : "sfb")

static void print_row(const struct topo_engines *te, const char *topo, uint32_t p,
                      const struct sfb_cost_settings *cs, const struct sfb_cost_result *r)
{
    if (te->json) {
        printf("{\"topology\":\"%s\",\"nodes\":%" PRIu32 ",\"k\":%" PRIu32 ",\"d\":%" PRIu32
               ",\"s\":%" PRIu32 ",\"sf_bytes\":%.0f,\"link_gbps\":%g,\"latency_us\":%g"
               ",\"gemm_gflops\":%.6g,\"add_gadds\":%.6g,\"host_cores\":%" PRIu32
               ",\"sfb_ms\":%.9g,\"fms_ms\":%.9g,\"sfb_msgs\":%.0f,\"fms_msgs\":%.0f"
               ",\"sfb_bytes\":%.0f,\"fms_bytes\":%.0f,\"sfb_compute_ms\":%.9g"
               ",\"fms_compute_ms\":%.9g,\"winner\":\"%s\"}\n",
               topo, p, te->k, te->d, te->s, r->sf_bytes, cs->link_gbps, cs->latency_us,
               cs->gemm_gflops, cs->add_gadds, cs->host_cores, r->ms[0], r->ms[1], r->msgs[0],
               r->msgs[1], r->bytes[0], r->bytes[1], r->compute_ms[0], r->compute_ms[1],
               ENGINE(r->winner));
        return;
    }
    printf("%-15s %8" PRIu32 " %9.0f %11.3f %11.3f %9.0f %11.3f %11.3f %10.3f %10.3f  %s\n",
           topo, p, r->msgs[0], r->bytes[0] / 1e6, r->compute_ms[0], r->msgs[1],
           r->bytes[1] / 1e6, r->compute_ms[1], r->ms[0], r->ms[1], ENGINE(r->winner));
}

/* "# halton: sfb at P = 2..8, fms at P = 16..256" from the winners in
 * node order. */
static void print_ranges(const char *topo, const uint32_t *nodes, const int *win, size_t n)
{
    printf("# %s:", topo);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && win[j + 1] == win[i]) j++;
        if (j == i) printf("%s %s at P = %" PRIu32, i ? "," : "", ENGINE(win[i]), nodes[i]);
        else
            printf("%s %s at P = %" PRIu32 "..%" PRIu32, i ? "," : "", ENGINE(win[i]), nodes[i],
                   nodes[j]);
        i = j + 1;
    }
    printf("\n");
}

int sfb_cli_topo_engines(const struct topo_engines *te)
{
    const struct sfb_topo_sim_settings *sim = te->sim;
    struct sfb_cost_settings cs;
    sfb_cost_default_settings(&cs);
    cs.batch = te->s;
    cs.degree = te->degree;
    cs.flush_clock = sim->flush == SFB_TOPO_FLUSH_CLOCK;
    cs.link_gbps = sim->link_gbps;
    /* the model's α is all of a message's fixed cost: wire latency and the
     * sender's per-message overhead (--calibrate splits them) */
    cs.latency_us = sim->latency_us + sim->msg_overhead_us;
    cs.host_cores = sim->host_cores;
    int measured = !(te->gemm_gflops > 0) || !(te->add_gadds > 0);
    if (measured) {
        cli_blas_kernels();
        sfb_set_blas_threads(1); /* as a worker runs (--threads 1) */
        cli_blas_reserve("topo");
    }
    cs.gemm_gflops = te->gemm_gflops > 0 ? te->gemm_gflops
                                         : sfb_cost_gemm_rate(te->k, te->d, te->s) / 1e9;
    cs.add_gadds = te->add_gadds > 0 ? te->add_gadds
                                     : sfb_cost_add_rate((uint64_t)te->k * te->d) / 1e9;
    if (!(cs.gemm_gflops > 0) || !(cs.add_gadds > 0)) {
        fprintf(stderr, "sfb topo: --engines: cannot measure the sgemm and add rates at "
                        "%" PRIu32 "x%" PRIu32 " (out of memory?); give --gemm-gflops and "
                        "--add-gadds\n", te->k, te->d);
        return 1;
    }
    if (!te->json) {
        printf("# engines: K=%" PRIu32 " D=%" PRIu32 " S=%" PRIu32 ", link %g Gbit/s, latency "
               "%g us per message, sgemm %.3g GFLOP/s, adds %.3g G/s%s, flush %s",
               te->k, te->d, te->s, cs.link_gbps, cs.latency_us, cs.gemm_gflops, cs.add_gadds,
               measured ? " (measured here, 1 thread)" : "", cs.flush_clock ? "clock" : "eager");
        if (cs.host_cores) printf(", P ranks on %" PRIu32 " cores", cs.host_cores);
        printf("\n# per worker and clock; sfb = msgs*alpha + bytes*beta + 2KDS*P/gemm; "
               "fms = (2(P-1)+1)*alpha + bytes*beta + 2KDS/gemm + KD(3+(P-1)/P)/adds\n");
        printf("%-15s %8s %9s %11s %11s %9s %11s %11s %10s %10s  %s\n", "topology", "P",
               "sfb_msgs", "sfb_MB", "sfb_cpu_ms", "fms_msgs", "fms_MB", "fms_cpu_ms", "sfb_ms",
               "fms_ms", "winner");
    }
    int win[64];
    for (size_t j = 0; j < te->n_topo; j++) {
        for (size_t i = 0; i < te->n_nodes; i++) {
            struct sfb_cost_result r = {.size = sizeof r};
            cs.world = te->nodes[i];
            cs.topology = te->topo[j];
            cs.ranks_per_host = te->nodes[i];
            int ret = sfb_cost_predict(&cs, te->k, te->d, te->sf_bytes, &r);
            if (ret) {
                fprintf(stderr, "sfb topo: %s P=%" PRIu32 ": %s: %s\n", te->topo[j],
                        te->nodes[i], sfb_strerror(ret), sfb_last_error());
                return 1;
            }
            print_row(te, te->topo[j], te->nodes[i], &cs, &r);
            if (i < 64) win[i] = r.winner;
        }
        if (!te->json) print_ranges(te->topo[j], te->nodes, win, te->n_nodes < 64 ? te->n_nodes : 64);
    }
    return 0;
}
