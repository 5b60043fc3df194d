/* Topology registry, the shared broadcast tree and the routing queries.
 *
 * Why one tree: the graphs are circulant (node i → i + o_k), so the map
 * n ↦ n + r is an automorphism and the BFS tree from 0 shifted by r is a
 * shortest-path tree from r. A node therefore needs only the tree from 0
 * (P parents' link indices) to know, for every origin, whom to forward to.
 */
#include "config.h"
#include "src/base/util.h"
#include "topology/topo_ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const struct sfb__topo_ops *const registry[] = {
    &sfb__topo_full,
    &sfb__topo_halton,
    &sfb__topo_halton_classic,
};

#define NO_LINK UINT32_MAX

struct sfb_topo {
    const struct sfb__topo_ops *ops;
    uint32_t nodes, requested, degree;
    uint32_t diameter;
    uint64_t sum_hops;   /* Σ over positions v of dist[v] */
    uint32_t *offsets;   /* degree */
    uint32_t *link_frames; /* degree: positions reached via link k */
    uint32_t *via;       /* nodes: link index into position v; NO_LINK for 0 */
    uint32_t *dist;      /* nodes: hops from position 0 */
    uint32_t *nchild;    /* nodes: children of position v (early exit) */
};

const char *sfb_topo_registry_name(size_t i)
{
    return i < SFB_ARRAY_LEN(registry) ? registry[i]->name : NULL;
}

const char *sfb_topo_registry_summary(size_t i)
{
    return i < SFB_ARRAY_LEN(registry) ? registry[i]->summary : NULL;
}

static const struct sfb__topo_ops *find(const char *name)
{
    for (size_t i = 0; name && i < SFB_ARRAY_LEN(registry); i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

int sfb_topo_is_overlay(const char *name)
{
    const struct sfb__topo_ops *ops = find(name);
    return ops ? ops->overlay : -1;
}

const char *sfb_topo_names(void)
{
    /* Built once from the constant table: two first callers write the same bytes. */
    static char names[256];
    if (names[0]) return names;
    char buf[sizeof names];
    size_t len = 0;
    for (size_t i = 0; i < SFB_ARRAY_LEN(registry); i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", i ? ", " : "",
                                registry[i]->name);
    memcpy(names, buf, len + 1);
    return names;
}

uint32_t sfb_topo_default_degree(uint32_t nodes)
{
    return sfb__topo_ceil_log2(nodes);
}

static uint32_t wrap(const struct sfb_topo *t, uint64_t x)
{
    return (uint32_t)(x % t->nodes);
}

/* (a + b) mod P for a, b < P, without a division (hot BFS loops). */
static uint32_t add_mod(uint32_t a, uint32_t b, uint32_t P)
{
    uint32_t s = a + b; /* < 2P ≤ 2^25: no overflow */
    return s >= P ? s - P : s;
}

/* Level-by-level BFS from 0. Within a level, nodes are assigned in discovery
 * order; each picks, among the links k whose source v − o_k lies on the
 * previous level, the one that carries the fewest frames so far (ties: lowest
 * k). That balances per-link load across offsets, which is what bounds the
 * busiest link, and is deterministic, so every node builds the same tree. */
static int build_tree(struct sfb_topo *t)
{
    uint32_t P = t->nodes, Q = t->degree;
    for (uint32_t v = 0; v < P; v++) {
        t->dist[v] = UINT32_MAX;
        t->via[v] = NO_LINK;
        t->nchild[v] = 0;
    }
    t->dist[0] = 0;
    t->diameter = 0;
    t->sum_hops = 0;
    if (P == 1) return 0;

    if (Q == P - 1) {
        /* Complete digraph: everything is one hop; skip the O(P²) BFS. */
        for (uint32_t k = 0; k < Q; k++) {
            uint32_t v = t->offsets[k];
            t->dist[v] = 1;
            t->via[v] = k;
            t->link_frames[k] = 1;
        }
        t->nchild[0] = Q;
        t->diameter = 1;
        t->sum_hops = P - 1;
        return 0;
    }

    /* The dist array doubles as the BFS queue's "seen" mark; the queue is
     * `order`, whose levels are contiguous ranges. */
    uint32_t *order = malloc(sizeof *order * P);
    if (!order) return -ENOMEM;
    uint32_t head = 0, tail = 0, seen = 1;
    order[tail++] = 0;
    while (head < tail && seen < P) {
        uint32_t level_end = tail, d = t->dist[order[head]];
        uint32_t next_begin = tail;
        for (; head < level_end; head++) {
            uint32_t u = order[head];
            for (uint32_t k = 0; k < Q; k++) {
                uint32_t w = add_mod(u, t->offsets[k], P);
                if (t->dist[w] == UINT32_MAX) {
                    t->dist[w] = d + 1;
                    order[tail++] = w;
                    seen++;
                }
            }
        }
        for (uint32_t i = next_begin; i < tail; i++) {
            uint32_t w = order[i], best = NO_LINK;
            for (uint32_t k = 0; k < Q; k++) {
                uint32_t u = add_mod(w, P - t->offsets[k], P);
                if (t->dist[u] != d) continue;
                if (best == NO_LINK || t->link_frames[k] < t->link_frames[best]) best = k;
            }
            t->via[w] = best;
            t->link_frames[best]++;
            t->nchild[add_mod(w, P - t->offsets[best], P)]++;
            t->sum_hops += d + 1;
            t->diameter = d + 1;
        }
    }
    free(order);
    if (seen != P) /* cannot happen after the gcd fix; guards a broken ops */
        return sfb__error(-SFB_EUSAGE, "topology %s: P=%u not strongly connected",
                          t->ops->name, P);
    return 0;
}

/* Resolves the name, validates P and computes the offsets into a fresh
 * array (*offs, *n). The one code path for sfb_topo_open and
 * sfb_topo_offsets, so both always agree. */
static int make_offsets(const char *name, uint32_t nodes, uint32_t degree,
                        const struct sfb__topo_ops **ops_out, uint32_t *requested, uint32_t **offs,
                        uint32_t *n)
{
    const struct sfb__topo_ops *ops = find(name);
    *offs = NULL;
    *n = 0;
    if (!ops)
        return sfb__error(-SFB_EUSAGE, "unknown topology '%s' (%s)", name ? name : "(null)",
                          sfb_topo_names());
    if (nodes == 0 || nodes > SFB_TOPO_MAX_NODES)
        return sfb__error(-SFB_EUSAGE, "topology %s: nodes %u out of range 1..%u", name, nodes,
                          SFB_TOPO_MAX_NODES);
    *ops_out = ops;
    *requested = degree ? degree : sfb_topo_default_degree(nodes);
    if (!ops->overlay) *requested = nodes - 1;
    uint32_t q = SFB_MIN(*requested, nodes - 1);
    *offs = calloc((size_t)q + 1, sizeof **offs);
    if (!*offs) return -ENOMEM;
    if (nodes >= 2) {
        int ret = ops->offsets(nodes, q, *offs, n);
        if (ret) {
            free(*offs);
            *offs = NULL;
            return ret;
        }
    }
    return 0;
}

int sfb_topo_offsets(const char *name, uint32_t nodes, uint32_t degree, uint32_t *out, uint32_t cap,
                     uint32_t *n)
{
    SFB_ENTER();
    SFB_ARG(name);
    SFB_ARG(n);
    if (cap && !out)
        return sfb__error(-EINVAL, "%s: argument 'out' is NULL (cap %u)", __func__, cap);
    const struct sfb__topo_ops *ops;
    uint32_t req, *offs;
    int ret = make_offsets(name, nodes, degree, &ops, &req, &offs, n);
    if (ret) return ret;
    if (cap && *n) memcpy(out, offs, sizeof *out * SFB_MIN(cap, *n));
    free(offs);
    return 0;
}

int sfb_topo_open(struct sfb_topo **out, const char *name, uint32_t nodes, uint32_t degree)
{
    SFB_ENTER();
    SFB_ARG(out);
    SFB_ARG(name);
    *out = NULL;
    struct sfb_topo *t = calloc(1, sizeof *t);
    if (!t) return -ENOMEM;
    int ret = make_offsets(name, nodes, degree, &t->ops, &t->requested, &t->offsets, &t->degree);
    if (ret) {
        free(t);
        return ret;
    }
    t->nodes = nodes;
    ret = -ENOMEM;
    t->via = malloc(sizeof *t->via * nodes);
    t->dist = malloc(sizeof *t->dist * nodes);
    t->nchild = malloc(sizeof *t->nchild * nodes);
    t->link_frames = calloc((size_t)t->degree + 1, sizeof *t->link_frames);
    if (!t->via || !t->dist || !t->nchild || !t->link_frames) goto fail;
    ret = build_tree(t);
    if (ret) goto fail;
    *out = t;
    return 0;
fail:
    sfb_topo_close(&t);
    return ret;
}

void sfb_topo_close(struct sfb_topo **tp)
{
    if (!tp || !*tp) return;
    struct sfb_topo *t = *tp;
    free(t->offsets);
    free(t->link_frames);
    free(t->via);
    free(t->dist);
    free(t->nchild);
    free(t);
    *tp = NULL;
}

const char *sfb_topo_name(const struct sfb_topo *t)
{
    SFB_ARG_OR(t, NULL);
    return t->ops->name;
}

uint32_t sfb_topo_nodes(const struct sfb_topo *t)
{
    SFB_ARG_OR(t, 0);
    return t->nodes;
}

uint32_t sfb_topo_requested_degree(const struct sfb_topo *t)
{
    SFB_ARG_OR(t, 0);
    return t->requested;
}

uint32_t sfb_topo_out_degree(const struct sfb_topo *t)
{
    SFB_ARG_OR(t, 0);
    return t->degree;
}

uint32_t sfb_topo_diameter(const struct sfb_topo *t)
{
    SFB_ARG_OR(t, 0);
    return t->diameter;
}

uint32_t sfb_topo_offset(const struct sfb_topo *t, uint32_t k)
{
    SFB_ARG_OR(t, 0);
    return k < t->degree ? t->offsets[k] : 0;
}

uint32_t sfb_topo_neighbor(const struct sfb_topo *t, uint32_t node, uint32_t k)
{
    SFB_ARG_OR(t, UINT32_MAX);
    if (node >= t->nodes || k >= t->degree) return UINT32_MAX;
    return wrap(t, (uint64_t)node + t->offsets[k]);
}

uint32_t sfb_topo_link_index(const struct sfb_topo *t, uint32_t from, uint32_t to)
{
    SFB_ARG_OR(t, UINT32_MAX);
    if (from >= t->nodes || to >= t->nodes) return UINT32_MAX;
    uint32_t o = wrap(t, (uint64_t)to + t->nodes - from);
    for (uint32_t k = 0; k < t->degree; k++)
        if (t->offsets[k] == o) return k;
    return UINT32_MAX;
}

double sfb_topo_mean_hops(const struct sfb_topo *t)
{
    SFB_ARG_OR(t, NAN);
    return t->nodes > 1 ? (double)t->sum_hops / (double)(t->nodes - 1) : 0.0;
}

uint32_t sfb_topo_link_frames(const struct sfb_topo *t, uint32_t k)
{
    SFB_ARG_OR(t, 0);
    return k < t->degree ? t->link_frames[k] : 0;
}

/* Position of `node` in origin's tree, or UINT32_MAX if out of range. */
static uint32_t position(const struct sfb_topo *t, uint32_t origin, uint32_t node)
{
    if (origin >= t->nodes || node >= t->nodes) return UINT32_MAX;
    return wrap(t, (uint64_t)node + t->nodes - origin);
}

uint32_t sfb_topo_forward_links(const struct sfb_topo *t, uint32_t origin, uint32_t node,
                                uint32_t *out)
{
    SFB_ARG_OR(t, 0);
    SFB_ARG_OR(out, 0);
    uint32_t v = position(t, origin, node), n = 0;
    if (v == UINT32_MAX || t->nchild[v] == 0) return 0;
    for (uint32_t k = 0; k < t->degree && n < t->nchild[v]; k++) {
        uint32_t c = add_mod(v, t->offsets[k], t->nodes);
        if (t->via[c] == k) out[n++] = k;
    }
    return n;
}

uint32_t sfb_topo_children(const struct sfb_topo *t, uint32_t origin, uint32_t node, uint32_t *out)
{
    SFB_ARG_OR(t, 0);
    SFB_ARG_OR(out, 0);
    uint32_t n = sfb_topo_forward_links(t, origin, node, out);
    for (uint32_t i = 0; i < n; i++) out[i] = wrap(t, (uint64_t)node + t->offsets[out[i]]);
    return n;
}

uint32_t sfb_topo_parent_link(const struct sfb_topo *t, uint32_t origin, uint32_t node)
{
    SFB_ARG_OR(t, UINT32_MAX);
    uint32_t v = position(t, origin, node);
    return v == UINT32_MAX ? UINT32_MAX : t->via[v];
}

uint32_t sfb_topo_parent(const struct sfb_topo *t, uint32_t origin, uint32_t node)
{
    SFB_ARG_OR(t, UINT32_MAX);
    uint32_t k = sfb_topo_parent_link(t, origin, node);
    if (k == NO_LINK) return UINT32_MAX;
    return wrap(t, (uint64_t)node + t->nodes - t->offsets[k]);
}

uint32_t sfb_topo_hops(const struct sfb_topo *t, uint32_t origin, uint32_t node)
{
    SFB_ARG_OR(t, UINT32_MAX);
    uint32_t v = position(t, origin, node);
    return v == UINT32_MAX ? UINT32_MAX : t->dist[v];
}
