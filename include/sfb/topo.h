/* sfb — overlay topologies, broadcast routing trees, and the `sfb topo`
 * analysis / simulator.
 *
 * Every topology is a circulant digraph on P nodes 0…P−1: node i sends to
 * (i + o_k) mod P for its out-links k = 0…Q−1 (offsets o_k, distinct, in
 * [1, P−1]). `full` has all P−1 offsets; `halton` and `halton-classic` have
 * about ⌈log₂P⌉ (see docs/topology.md for the exact rules and edge cases).
 *
 * Routing: one BFS tree from node 0, shifted by the origin, is every origin's
 * broadcast tree, so a node computes locally — with no coordination and the
 * same answer on every node — whom it forwards each origin's frames to. In
 * origin r's tree, node n sits at *position* v = (n − r) mod P; the tree from
 * 0 records, for every position v ≠ 0, the out-link index via which its parent
 * reaches it. Memory is O(P + Q); each query below is O(Q) or O(1).
 *
 * Thread safety: a `struct sfb_topo` is immutable after sfb_topo_open, so any
 * number of threads may query it concurrently; open/close are not concurrent
 * with queries on the same handle.
 */
#ifndef SFB_TOPO_H
#define SFB_TOPO_H

#include <sfb/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest node count sfb_topo_open accepts. */
#define SFB_TOPO_MAX_NODES (1u << 24)

struct sfb_topo;

/* Names of the registered topologies, in registry order ("full", "halton",
 * "halton-classic"), and a one-line description; NULL past the end. */
SFB_API const char *sfb_topo_registry_name(size_t i);
SFB_API const char *sfb_topo_registry_summary(size_t i);
/* 1 if `name` is a registered overlay (its frames are relayed), 0 for a
 * topology where every node sends to every other ("full"), -1 if no
 * topology has that name. Any thread. */
SFB_API int sfb_topo_is_overlay(const char *name);
/* The registered names, ", "-separated, for messages and help texts. */
SFB_API const char *sfb_topo_names(void);

/* The default out-degree for P nodes: ⌈log₂P⌉ (0 for P = 1). */
SFB_API uint32_t sfb_topo_default_degree(uint32_t nodes);

/* Only the offsets of topology `name` (what sfb_topo_open would use), without
 * building the routing tree: O(Q) for the overlays, O(P) for full. Writes
 * up to `cap` offsets to out and the actual degree to *n (if *n > cap, only
 * cap were written; min(degree, P−1) + 1 always suffices). Returns 0 or
 * -SFB_EUSAGE as sfb_topo_open. */
SFB_API int sfb_topo_offsets(const char *name, uint32_t nodes, uint32_t degree, uint32_t *out,
                             uint32_t cap, uint32_t *n);

/* Builds topology `name` on `nodes` nodes with requested out-degree `degree`
 * (0 = sfb_topo_default_degree; ignored by "full"). The actual out-degree
 * (sfb_topo_out_degree) can differ from the request: it is capped at P−1, a
 * `halton` sequence that cannot produce enough distinct offsets stops short,
 * and the gcd fix can add offset 1 (so Q+1). On success *t owns all memory.
 * Returns 0; -SFB_EUSAGE for an unknown name, nodes = 0 or
 * nodes > SFB_TOPO_MAX_NODES (message via sfb_last_error); -EINVAL for a NULL
 * pointer; -ENOMEM. On
 * failure *t is NULL. Any thread. */
SFB_API int sfb_topo_open(struct sfb_topo **t, const char *name, uint32_t nodes, uint32_t degree);
/* Frees *t and sets it to NULL; NULL or *t == NULL is a no-op. */
SFB_API void sfb_topo_close(struct sfb_topo **t);

SFB_API const char *sfb_topo_name(const struct sfb_topo *t);
SFB_API uint32_t sfb_topo_nodes(const struct sfb_topo *t);
/* Requested degree after defaulting (before caps and the gcd fix). */
SFB_API uint32_t sfb_topo_requested_degree(const struct sfb_topo *t);
/* Number of out-links Q of every node. */
SFB_API uint32_t sfb_topo_out_degree(const struct sfb_topo *t);
/* Offset o_k of out-link k (0 if k ≥ Q). Offsets keep generation order. */
SFB_API uint32_t sfb_topo_offset(const struct sfb_topo *t, uint32_t k);
/* Link enumeration: the node that out-link k of `node` reaches,
 * (node + o_k) mod P; UINT32_MAX if node ≥ P or k ≥ Q. The P·Q directed
 * links are exactly {(n, sfb_topo_neighbor(t, n, k))}. */
SFB_API uint32_t sfb_topo_neighbor(const struct sfb_topo *t, uint32_t node, uint32_t k);
/* Out-link index k with o_k == (to − from) mod P, or UINT32_MAX if there is
 * no such link. O(Q). */
SFB_API uint32_t sfb_topo_link_index(const struct sfb_topo *t, uint32_t from, uint32_t to);

/* Routing. `origin` and `node` come from frames (untrusted): out-of-range
 * values give "no children" / UINT32_MAX, never a crash. */

/* The out-link indices on which `node` forwards frames of `origin` (its
 * children in origin's tree are sfb_topo_neighbor(t, node, k) for each k),
 * in increasing k. `out` must hold sfb_topo_out_degree(t) entries. Returns
 * the count (0 for a leaf). O(Q). */
SFB_API uint32_t sfb_topo_forward_links(const struct sfb_topo *t, uint32_t origin, uint32_t node,
                                        uint32_t *out);
/* Same, as node ids. */
SFB_API uint32_t sfb_topo_children(const struct sfb_topo *t, uint32_t origin, uint32_t node,
                                   uint32_t *out);
/* The node `node` receives origin's frames from, or UINT32_MAX when
 * node == origin (or out of range). O(1). */
SFB_API uint32_t sfb_topo_parent(const struct sfb_topo *t, uint32_t origin, uint32_t node);
/* Index k of the parent's out-link that reaches `node` (UINT32_MAX as above). */
SFB_API uint32_t sfb_topo_parent_link(const struct sfb_topo *t, uint32_t origin, uint32_t node);
/* Hops from origin to node along the tree (= shortest-path distance); 0 for
 * node == origin; UINT32_MAX if out of range. O(1). */
SFB_API uint32_t sfb_topo_hops(const struct sfb_topo *t, uint32_t origin, uint32_t node);

/* Graph metrics: the largest hop count, and the mean over all ordered pairs
 * (origin ≠ node) — 0 for P = 1. */
SFB_API uint32_t sfb_topo_diameter(const struct sfb_topo *t);
SFB_API double sfb_topo_mean_hops(const struct sfb_topo *t);
/* Frames per clock carried by every link of out-link index k (each origin
 * broadcasts one frame per clock): the number of tree positions reached via
 * k. The sum over k is P−1 (every node sends P−1 frames per clock). */
SFB_API uint32_t sfb_topo_link_frames(const struct sfb_topo *t, uint32_t k);

/* ---- analysis and simulation of one clock ---------------------------- */

enum sfb_topo_flush {
    /* A link sends whatever is pending on it as one message as soon as the
     * sender's NIC is free; relayed frames move on within the same clock. */
    SFB_TOPO_FLUSH_EAGER = 0,
    /* Every node forwards everything pending on a link at a clock boundary:
     * per clock each used link carries exactly one message holding the
     * frames routed through it; a frame h hops away arrives h clocks late. */
    SFB_TOPO_FLUSH_CLOCK = 1,
};

/* How a node's NIC serves its links in eager mode (clock mode sends one
 * bundle per used link at once either way). */
enum sfb_topo_nic {
    /* Fair (default): the links with a message in transmission share the
     * egress rate equally (a host's fair queueing, an RDMA NIC's round
     * robin over queue pairs); a link sends one message at a time. */
    SFB_TOPO_NIC_FAIR = 0,
    /* FIFO: one message at a time at the full rate, in the order the links
     * became ready; a link waiting for the NIC gathers its next bundle. */
    SFB_TOPO_NIC_FIFO = 1,
};

/* The version of struct sfb_topo_sim_settings (docs/api.md, "Versions of
 * the structures"): a later release that adds a field (in `reserved`, zero
 * meaning its default) raises it. Fill it with
 * sfb_topo_sim_default_settings; an unknown version or a reserved byte set
 * is -SFB_EVERSION. */
#define SFB_TOPO_SIM_SETTINGS_VERSION 1

struct sfb_topo_sim_settings {
    uint32_t version;       /* SFB_TOPO_SIM_SETTINGS_VERSION */
    uint64_t sf_bytes;      /* B: one origin's SF frame, header included */
    uint32_t bundle_header; /* outer header of a message with ≥ 2 frames (64) */
    double link_gbps;       /* G: each node's egress bandwidth, Gbit/s (1) */
    double latency_us;      /* L: per-message latency, µs (10) */
    double msg_overhead_us; /* per-message NIC/CPU time on the sender, µs (0) */
    enum sfb_topo_flush flush;
    /* Shared host CPU (emulated clusters, many ranks per host): all P nodes
     * share host_cores cores, and every message costs cpu_msg_us plus
     * cpu_byte_ns per byte of CPU, both ends together. 0 cores: every node
     * has its own CPU, the term is off (default). */
    uint32_t host_cores;
    double cpu_msg_us;
    double cpu_byte_ns;
    enum sfb_topo_nic nic;
    uint8_t reserved[32];   /* for fields of later versions: zero */
};

/* Defaults: B = 262208 (K = D = 1024, S = 32, fp32 dense c: 4·S·(K+D) bytes
 * plus a 64-byte frame header), bundle header 64 B, 1 Gbit/s, 10 µs, no
 * per-message overhead, eager, fair NIC. */
SFB_API void sfb_topo_sim_default_settings(struct sfb_topo_sim_settings *s);

/* What sfb_topo_analyse computed. The caller sets size (sizeof) and gets
 * the fields that fit in it (a later version may add fields at the end). */
struct sfb_topo_report {
    uint32_t size;                /* sizeof(struct sfb_topo_report), set by the caller */
    uint32_t nodes, degree, diameter;
    uint32_t links_used;          /* out-links per node with traffic */
    double mean_hops;
    uint64_t frames_per_clock;    /* P·(P−1) for every topology */
    uint64_t messages_per_clock;  /* over all nodes (see the flush modes) */
    uint64_t bytes_per_clock;     /* over all nodes, on the wire */
    uint64_t messages_per_node;   /* every node sends the same (symmetry) */
    uint64_t bytes_per_node;
    uint32_t max_link_frames;     /* frames per clock on the busiest link */
    uint64_t max_link_bytes;      /* bytes per clock on the busiest link */
    /* eager: time from every node injecting its frame at t = 0 until every
     * node holds every origin's frame. clock: the time of one clock's
     * exchange (every node sends its bundles); frames then need up to
     * `diameter` clocks. Seconds. */
    double time_s;
    uint32_t clocks;              /* clocks until the last delivery (1 eager) */
    /* time_s = max(network_time_s, cpu_time_s): the network model above, and
     * the shared host CPU's work per clock, (messages_per_clock·cpu_msg +
     * bytes_per_clock·cpu_byte) / host_cores (0 when host_cores is 0). */
    double network_time_s;
    double cpu_time_s;
};

/* Computes the report for topology t under settings s (NULL = defaults).
 * Network model: each node has one egress NIC of G Gbit/s shared by all its
 * out-links and serializing whole messages (oldest pending link first);
 * a message of n bytes occupies the NIC 8n/G + overhead and arrives L later; ingress is
 * not a bottleneck (non-blocking switch). O(P·Q) time, O(P + Q) memory: the
 * graph and trees are shift-invariant, so one node is simulated and every
 * other node does the same at the same times. Returns 0, -SFB_EUSAGE for
 * settings out of range (G ≤ 0, L < 0, overhead < 0, B = 0), -SFB_EVERSION
 * (settings of an unknown version), -EINVAL (NULL t or r, r->size below this
 * version's), -ENOMEM. Any thread. */
SFB_API int sfb_topo_analyse(const struct sfb_topo *t, const struct sfb_topo_sim_settings *s,
                             struct sfb_topo_report *r);

#ifdef __cplusplus
}
#endif
#endif
