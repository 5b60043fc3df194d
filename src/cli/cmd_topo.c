/* `sfb topo`: degree, diameter, hops, traffic per clock and the simulated
 * dissemination time of full / halton / halton-classic, side by side. Uses
 * only the public API, i.e. the same routing code the runtime uses. */
#include "src/cli/cmd_topo.h"
#include "src/cli/optparse.h"

#include <sfb/sfb.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIST 64

static const char usage_head[] =
    "usage: sfb topo --nodes P[,P...] [options]\n"
    "       sfb topo --engines --sf K,D,S --nodes P[,P...] [options]\n"
    "\n"
    "Analyse overlay topologies and simulate one clock of SF dissemination.\n"
    "Every node broadcasts one SF frame per clock; overlays relay it along the\n"
    "shifted BFS tree (the runtime's routing code).\n"
    "\n";

static const char usage_tail[] =
    "\n"
    "Model: each node has one egress NIC of G Gbit/s shared by all its out-links\n"
    "(--nic: fair, the links with a message in flight sharing the rate, or fifo,\n"
    "one whole message at a time); a message of n bytes takes 8n/G + O on the NIC\n"
    "alone and arrives L later; ingress is not a bottleneck. A lone frame is sent\n"
    "bare, >= 2 frames as one BUNDLE.\n"
    "Columns: msgs and bytes per clock are over all nodes; max link = frames and\n"
    "bytes per clock on the busiest directed link.\n";

struct opts {
    uint32_t nodes[MAX_LIST];
    size_t n_nodes;
    const char *topo[MAX_LIST];
    size_t n_topo;
    uint32_t degree;
    int json, offsets, engines;
    uint32_t k, d, s; /* --sf */
    double gemm_gflops, add_gadds;
    struct sfb_topo_sim_settings sim;
    int sf_bytes_given;
    char topo_buf[512];
};

static int bad(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "sfb topo: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n(see sfb topo --help)\n");
    return 2;
}

/* Reads a calibration file: `key value` lines, '#' comments. alpha_s and
 * beta_s_per_byte are required, gap_s optional (0). Returns 0 or 2 (usage
 * error, printed with file:line). */
static int read_calibration(const char *path, struct sfb_topo_sim_settings *sim)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "sfb topo: --calibrate: cannot open %s: %s\n", path, strerror(errno));
        return 2;
    }
    static const char *const keys[] = {"alpha_s", "beta_s_per_byte", "gap_s",
                                       "beta_pingpong_s_per_byte"};
    double val[4] = {0};
    int have[4] = {0}, line = 0, rc = 0;
    char buf[512];
    while (!rc && fgets(buf, sizeof buf, f)) {
        line++;
        size_t len = strlen(buf);
        if (len == sizeof buf - 1 && buf[len - 1] != '\n') {
            fprintf(stderr, "sfb topo: %s:%d: line longer than %zu bytes\n", path, line, sizeof buf - 2);
            rc = 2;
            break;
        }
        char key[64], num[128], extra[2];
        int n = sscanf(buf, " %63s %127s %1s", key, num, extra);
        if (n <= 0 || key[0] == '#') continue;
        size_t k = 0;
        while (k < 4 && strcmp(key, keys[k])) k++;
        double d;
        if (k == 4) {
            fprintf(stderr, "sfb topo: %s:%d: unknown key '%s' (alpha_s, beta_s_per_byte, gap_s, "
                            "beta_pingpong_s_per_byte)\n", path, line, key);
            rc = 2;
        } else if (n != 2 || cli_parse_double(num, &d) || !(d >= 0) || d > 1e3) {
            fprintf(stderr, "sfb topo: %s:%d: %s needs one number of seconds in [0, 1000]\n",
                    path, line, key);
            rc = 2;
        } else if (have[k]) {
            fprintf(stderr, "sfb topo: %s:%d: %s given twice\n", path, line, key);
            rc = 2;
        } else {
            val[k] = d;
            have[k] = 1;
        }
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "sfb topo: --calibrate: error reading %s\n", path);
        rc = 2;
    }
    fclose(f);
    if (rc) return rc;
    if (!have[0] || !have[1] || !(val[1] > 0)) {
        fprintf(stderr, "sfb topo: %s: needs alpha_s and beta_s_per_byte > 0\n", path);
        return 2;
    }
    sim->link_gbps = 8.0 / (val[1] * 1e9);
    sim->msg_overhead_us = val[2] * 1e6;
    sim->latency_us = val[0] > val[2] ? (val[0] - val[2]) * 1e6 : 0;
    sim->cpu_msg_us = val[0] * 1e6;
    if (!(sim->link_gbps <= 1e6)) {
        fprintf(stderr, "sfb topo: %s: beta_s_per_byte %g is below 8e-15 (over 1e6 Gbit/s)\n", path, val[1]);
        return 2;
    }
    return 0;
}

static int set_nodes(void *base, void *ctx, const struct cli_opt *o, const char *spelled,
                     const char *val)
{
    struct opts *op = base;
    char buf[1024];
    uint64_t u;
    (void)ctx, (void)o, (void)spelled;
    if (strlen(val) >= sizeof buf) return bad("--nodes: list too long%s%s", "", "");
    snprintf(buf, sizeof buf, "%s", val);
    op->n_nodes = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (cli_parse_u64(tok, 1, SFB_TOPO_MAX_NODES, &u))
            return bad("--nodes: '%s' is not a node count in 1..16777216%s", tok, "");
        if (op->n_nodes == MAX_LIST) return bad("--nodes: more than 64 values%s%s", "", "");
        op->nodes[op->n_nodes++] = (uint32_t)u;
    }
    if (op->n_nodes == 0) return bad("--nodes: empty list%s%s", "", "");
    return 0;
}

static int set_topology(void *base, void *ctx, const struct cli_opt *o, const char *spelled,
                        const char *val)
{
    struct opts *op = base;
    (void)ctx, (void)o, (void)spelled;
    if (strlen(val) >= sizeof op->topo_buf) return bad("--topology: list too long%s%s", "", "");
    snprintf(op->topo_buf, sizeof op->topo_buf, "%s", val);
    op->n_topo = 0;
    for (char *save, *tok = strtok_r(op->topo_buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (sfb_topo_is_overlay(tok) < 0)
            return bad("--topology: unknown '%s' (%s)", tok, sfb_topo_names());
        if (op->n_topo == MAX_LIST) return bad("--topology: too many%s%s", "", "");
        op->topo[op->n_topo++] = tok;
    }
    if (op->n_topo == 0) return bad("--topology: empty list%s%s", "", "");
    return 0;
}

static int set_sf(void *base, void *ctx, const struct cli_opt *o, const char *spelled,
                  const char *val)
{
    struct opts *op = base;
    unsigned long long k, dd, s;
    char tail;
    (void)ctx, (void)o, (void)spelled;
    if (sscanf(val, "%llu,%llu,%llu%c", &k, &dd, &s, &tail) != 3 || !k || !dd || !s ||
        k > 1ull << 24 || dd > 1ull << 24 || s > 1ull << 16)
        return bad("--sf: '%s' is not K,D,S (positive; K, D <= 2^24, S <= 65536)%s", val, "");
    op->sim.sf_bytes = 4 * s * (k + dd) + 64;
    op->k = (uint32_t)k;
    op->d = (uint32_t)dd;
    op->s = (uint32_t)s;
    return 0;
}

static int set_calibration(void *base, void *ctx, const struct cli_opt *o, const char *spelled,
                           const char *val)
{
    (void)ctx, (void)o, (void)spelled;
    return read_calibration(val, &((struct opts *)base)->sim);
}

#define O(field) .off = offsetof(struct opts, field), .size = sizeof(((struct opts *)0)->field)
#define TIME(n, f, meta, h) \
    {.kind = CLI_REAL, .name = n, O(f), meta, h, .lo = 0, .hi = 1e9, .want = "a time in [0, 1e9]"}

static const int flushes[] = {SFB_TOPO_FLUSH_EAGER, SFB_TOPO_FLUSH_CLOCK};
static const int nics[] = {SFB_TOPO_NIC_FAIR, SFB_TOPO_NIC_FIFO};
static char topo_help[256];

static const struct cli_opt topo_table[] = {
    {.kind = CLI_CALL, .name = "nodes", O(n_nodes), "LIST",
     "node counts P, comma separated (1..16777216), required", .call = set_nodes},
    {.kind = CLI_CALL, .name = "topology", O(n_topo), "LIST", topo_help, .call = set_topology},
    {.kind = CLI_UINT, .name = "degree", O(degree), "Q",
     "out-links per node for overlays (default ceil(log2 P));\n"
     "the actual degree is printed (gcd fix may add offset 1)",
     .umin = 1, .umax = SFB_TOPO_MAX_NODES},
    {.kind = CLI_UINT, .name = "sf-bytes", O(sim.sf_bytes), "B",
     "bytes of one SF frame, header included\n"
     "(default 262208 = K=D=1024, S=32, fp32, + 64 B header)",
     .umin = 1, .umax = UINT64_C(1) << 40},
    {.kind = CLI_CALL, .name = "sf", O(sim.sf_bytes), "K,D,S",
     "set B = 4*S*(K+D) + 64 (fp32 dense factors)", .call = set_sf},
    {.kind = CLI_UINT, .name = "bundle-header", O(sim.bundle_header), "H",
     "outer header of a message carrying >= 2 frames (64)", .umin = 0, .umax = 1 << 20},
    {.kind = CLI_REAL, .name = "link-gbps", O(sim.link_gbps), "G",
     "egress bandwidth of each node, Gbit/s (1)", .lo = 0, .hi = 1e6, .open = CLI_OPEN_LO},
    TIME("latency-us", sim.latency_us, "L", "per-message latency, microseconds (10)"),
    TIME("msg-overhead-us", sim.msg_overhead_us, "O",
         "per-message sender time (software, doorbell), us (0)"),
    {.kind = CLI_CALL, .name = "calibrate", .size = 0, "FILE",
     "take G, L and O from a link calibration (written by\n"
     "scripts/calibrate-links or scripts/netns-cluster\n"
     "--calibrate): G = 8/beta, O = gap, L = alpha - gap\n"
     "(>= 0), M = alpha; options after it override\n"
     "single values", .call = set_calibration},
    {.kind = CLI_UINT, .name = "host-cores", O(sim.host_cores), "C",
     "all P nodes share C CPU cores (an emulated cluster,\n"
     "many ranks per host): time = max(network, CPU), CPU =\n"
     "(msgs/clock * M + bytes/clock * N) / C (default 0: off)",
     .umin = 0, .umax = 1 << 20},
    TIME("cpu-msg-us", sim.cpu_msg_us, "M", "CPU per message, both ends, us (--calibrate: alpha)"),
    TIME("cpu-byte-ns", sim.cpu_byte_ns, "N", "CPU per byte, ns (0)"),
    {.kind = CLI_ENUM, .name = "flush", O(sim.flush), "eager|clock",
     "eager (default): a link sends everything pending as\n"
     "one bundle as soon as the node's NIC is free, relays\n"
     "forward within the clock; time = until every node has\n"
     "every origin's frame.\n"
     "clock: every node forwards what is pending on each\n"
     "link at the clock boundary, one bundle per used link\n"
     "per clock; time = one clock's exchange, and frames\n"
     "need up to `diameter` clocks",
     .choices = "eager|clock", .values = flushes},
    {.kind = CLI_ENUM, .name = "nic", O(sim.nic), "fair|fifo",
     "how a node's NIC serves its links (eager):\n"
     "fair (default): links with a message in flight share\n"
     "the egress rate (fair queueing; an RDMA NIC's round\n"
     "robin over queue pairs); fifo: one message at a time,\n"
     "links in the order they became ready",
     .choices = "fair|fifo", .values = nics},
    {.kind = CLI_FLAG, .name = "offsets", O(offsets), NULL, "also print each topology's offsets",
     .ival = 1},
    {.kind = CLI_FLAG, .name = "engines", O(engines), NULL,
     "instead: the break-even surface of --sync auto's\n"
     "cost model (needs --sf K,D,S): per P and topology,\n"
     "SFB's and FMS's predicted ms per clock for one\n"
     "KxD matrix and the winner (docs/performance.md);\n"
     "--sf-bytes then gives the SF frame the codec sends\n"
     "(default: dense fp32, 72 + 4*S*(K+D))", .ival = 1},
    {.kind = CLI_REAL, .name = "gemm-gflops", O(gemm_gflops), "F",
     "--engines: sgemm rate of the reconstruction,\n"
     "GFLOP/s (default: measured here at KxDxS)", .lo = 0, .hi = 1e9, .open = CLI_OPEN_LO},
    {.kind = CLI_REAL, .name = "add-gadds", O(add_gadds), "A",
     "--engines: element adds, 1e9 per second (default:\n"
     "measured here over K*D floats)", .lo = 0, .hi = 1e9, .open = CLI_OPEN_LO},
    {.kind = CLI_FLAG, .name = "json", O(json), NULL,
     "one JSON object per line instead of the table", .ival = 1},
    {.kind = CLI_HELP, .name = "help", .short_name = 'h', .size = 0, NULL, "this text"},
    {.kind = CLI_END},
};

static int parse(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    sfb_topo_sim_default_settings(&o->sim);
    snprintf(topo_help, sizeof topo_help, "%s, comma separated\n(default: all, side by side)",
             sfb_topo_names());
    struct cli_optparse p;
    cli_opt_init(&p, argc, argv, "topo");
    int r = cli_opt_parse(&p, topo_table, o, NULL);
    if (r == CLI_OPT_HELP) {
        fputs(usage_head, stdout);
        cli_opt_help(stdout, topo_table);
        fputs(usage_tail, stdout);
        return 1;
    }
    if (r) return r;
    if (o->n_nodes == 0) return bad("missing --nodes%s%s", "", "");
    o->sf_bytes_given = cli_opt_given(&p, topo_table, "sf-bytes");
    if (o->engines && !o->k) return bad("--engines needs --sf K,D,S%s%s", "", "");
    if (!o->engines && (cli_opt_given(&p, topo_table, "gemm-gflops") ||
                        cli_opt_given(&p, topo_table, "add-gadds")))
        return bad("--gemm-gflops and --add-gadds apply to --engines%s%s", "", "");
    if (o->engines && o->offsets) return bad("--offsets does not apply to --engines%s%s", "", "");
    if (o->n_topo == 0)
        for (size_t i = 0; sfb_topo_registry_name(i) && o->n_topo < MAX_LIST; i++)
            o->topo[o->n_topo++] = sfb_topo_registry_name(i);
    return 0;
}

static void print_offsets(const struct sfb_topo *t, int json)
{
    uint32_t q = sfb_topo_out_degree(t);
    for (uint32_t k = 0; k < q; k++)
        printf("%s%" PRIu32, k ? (json ? "," : " ") : "", sfb_topo_offset(t, k));
}

static const char *nic_name(enum sfb_topo_nic n)
{
    return n == SFB_TOPO_NIC_FIFO ? "fifo" : "fair";
}

static void print_row(const struct opts *o, const struct sfb_topo *t, const struct sfb_topo_report *r)
{
    if (o->json) {
        printf("{\"topology\":\"%s\",\"nodes\":%" PRIu32 ",\"requested_degree\":%" PRIu32
               ",\"degree\":%" PRIu32 ",\"diameter\":%" PRIu32 ",\"mean_hops\":%.6f"
               ",\"links_used\":%" PRIu32 ",\"frames_per_clock\":%" PRIu64
               ",\"messages_per_clock\":%" PRIu64 ",\"bytes_per_clock\":%" PRIu64
               ",\"messages_per_node\":%" PRIu64 ",\"bytes_per_node\":%" PRIu64
               ",\"max_link_frames\":%" PRIu32 ",\"max_link_bytes\":%" PRIu64
               ",\"time_s\":%.9g,\"clocks\":%" PRIu32 ",\"flush\":\"%s\",\"nic\":\"%s\",\"sf_bytes\":%" PRIu64
               ",\"bundle_header\":%" PRIu32 ",\"link_gbps\":%g,\"latency_us\":%g,\"msg_overhead_us\":%g"
               ",\"host_cores\":%" PRIu32 ",\"cpu_msg_us\":%g,\"cpu_byte_ns\":%g"
               ",\"network_time_s\":%.9g,\"cpu_time_s\":%.9g",
               sfb_topo_name(t), r->nodes, sfb_topo_requested_degree(t), r->degree, r->diameter,
               r->mean_hops, r->links_used, r->frames_per_clock, r->messages_per_clock,
               r->bytes_per_clock, r->messages_per_node, r->bytes_per_node, r->max_link_frames,
               r->max_link_bytes, r->time_s, r->clocks,
               o->sim.flush == SFB_TOPO_FLUSH_CLOCK ? "clock" : "eager", nic_name(o->sim.nic), o->sim.sf_bytes,
               o->sim.bundle_header, o->sim.link_gbps, o->sim.latency_us, o->sim.msg_overhead_us,
               o->sim.host_cores, o->sim.cpu_msg_us, o->sim.cpu_byte_ns, r->network_time_s, r->cpu_time_s);
        if (o->sim.flush == SFB_TOPO_FLUSH_EAGER)
            /* what a real run must stay within (per node, per clock, on average) */
            printf(",\"eager_bounds\":{\"frames_per_node\":%" PRIu32
                   ",\"messages_per_node_min\":%" PRIu32 ",\"messages_per_node_max\":%" PRIu32 "}",
                   r->nodes - 1, r->links_used, r->nodes - 1);
        if (o->offsets) {
            printf(",\"offsets\":[");
            print_offsets(t, 1);
            printf("]");
        }
        printf("}\n");
        return;
    }
    printf("%-15s %8" PRIu32 " %6" PRIu32 " %5" PRIu32 " %9.3f %14" PRIu64 " %12.1f %10" PRIu64
           " %9" PRIu32 " %10.2f %11.3f %6" PRIu32 "\n",
           sfb_topo_name(t), r->nodes, r->degree, r->diameter, r->mean_hops, r->messages_per_clock,
           (double)r->bytes_per_clock / 1e6, r->messages_per_node, r->max_link_frames,
           (double)r->max_link_bytes / 1e6, r->time_s * 1e3, r->clocks);
    if (o->sim.host_cores > 0)
        printf("#   network %.3f ms, host CPU %.3f ms (%" PRIu32 " cores): %s-bound\n",
               r->network_time_s * 1e3, r->cpu_time_s * 1e3, o->sim.host_cores,
               r->cpu_time_s > r->network_time_s ? "CPU" : "network");
    if (o->sim.flush == SFB_TOPO_FLUSH_EAGER && r->nodes > 1)
        printf("#   eager bounds per node per clock: frames = %" PRIu32 ", messages in [%" PRIu32
               ", %" PRIu32 "] (the simulation's %.2f is one point inside), bytes = frames·B + "
               "%" PRIu32 "·bundles\n",
               r->nodes - 1, r->links_used, r->nodes - 1,
               (double)r->messages_per_node, o->sim.bundle_header);
    if (o->offsets) {
        printf("  offsets:");
        print_offsets(t, 0);
        printf("\n");
    }
}

int sfb_cli_topo(int argc, char **argv)
{
    struct opts o;
    int ret = parse(argc, argv, &o);
    if (ret) return ret == 1 ? 0 : ret;
    if (o.engines) {
        struct topo_engines te = {.nodes = o.nodes, .n_nodes = o.n_nodes, .topo = o.topo,
                                  .n_topo = o.n_topo, .degree = o.degree, .k = o.k, .d = o.d,
                                  .s = o.s, .sf_bytes = o.sf_bytes_given ? (double)o.sim.sf_bytes : 0,
                                  .gemm_gflops = o.gemm_gflops, .add_gadds = o.add_gadds,
                                  .sim = &o.sim, .json = o.json};
        return sfb_cli_topo_engines(&te);
    }
    if (!o.json) {
        printf("# SF frame %" PRIu64 " B, bundle header %" PRIu32 " B, egress %g Gbit/s per node, "
               "latency %g us, msg overhead %g us, flush %s, nic %s\n",
               o.sim.sf_bytes, o.sim.bundle_header, o.sim.link_gbps, o.sim.latency_us, o.sim.msg_overhead_us,
               o.sim.flush == SFB_TOPO_FLUSH_CLOCK ? "clock" : "eager", nic_name(o.sim.nic));
        if (o.sim.host_cores > 0)
            printf("# shared host CPU: %" PRIu32 " cores, %g us per message, %g ns per byte\n",
                   o.sim.host_cores, o.sim.cpu_msg_us, o.sim.cpu_byte_ns);
        printf("%-15s %8s %6s %5s %9s %14s %12s %10s %9s %10s %11s %6s\n", "topology", "P", "degree",
               "diam", "mean_hops", "msgs/clock", "MB/clock", "msgs/node", "maxlink_f",
               "maxlink_MB", "time_ms", "clocks");
    }
    for (size_t i = 0; i < o.n_nodes; i++) {
        for (size_t j = 0; j < o.n_topo; j++) {
            struct sfb_topo *t;
            struct sfb_topo_report r = {.size = sizeof r};
            ret = sfb_topo_open(&t, o.topo[j], o.nodes[i], o.degree);
            if (ret == 0) {
                ret = sfb_topo_analyse(t, &o.sim, &r);
                if (ret == 0) print_row(&o, t, &r);
                sfb_topo_close(&t);
            }
            if (ret) {
                fprintf(stderr, "sfb topo: %s P=%" PRIu32 ": %s: %s\n", o.topo[j], o.nodes[i],
                        sfb_strerror(ret), sfb_last_error());
                return 1;
            }
        }
    }
    return 0;
}
