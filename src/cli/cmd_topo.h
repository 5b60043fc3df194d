/* `sfb topo`: topology analysis and one-clock simulation (public API only). */
#ifndef SFB_CLI_CMD_TOPO_H
#define SFB_CLI_CMD_TOPO_H

#include <sfb/topo.h>

#include <stddef.h>
#include <stdint.h>

/* argv[0] is the subcommand name ("topo"); options follow. Prints to
 * stdout/stderr. Returns the process exit status: 0, 1 (failure), 2 (usage). */
int sfb_cli_topo(int argc, char **argv);

/* `sfb topo --engines` (src/cli/cmd_topo_engines.c): for every node count and
 * topology, each engine's predicted ms per clock for a K × D matrix at S
 * samples per worker, and the winner. */
struct topo_engines {
    const uint32_t *nodes;
    size_t n_nodes;
    const char *const *topo;
    size_t n_topo;
    uint32_t degree;
    uint32_t k, d, s;
    double sf_bytes;       /* 0: dense fp32 */
    double gemm_gflops;    /* 0: measured here */
    double add_gadds;      /* 0: measured here */
    const struct sfb_topo_sim_settings *sim; /* link, flush, host cores */
    int json;
};
/* Prints the table (or JSON lines). Returns 0, or 1 naming the failure. */
int sfb_cli_topo_engines(const struct topo_engines *te);

#endif
