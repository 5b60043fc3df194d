/* Topologies, routing trees and the one-clock simulator. The BFS here is
 * written independently over the explicit edge list (offsets read back
 * through the API), so diameter / mean hops / connectivity are checked
 * against code that shares nothing with topology/topo.c. */
#include <sfb/sfb.h>
#include "test.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#define SFB_ARRAY_LEN_T(a) (sizeof(a) / sizeof((a)[0]))
#define SFB_MAX_T(a, b) ((a) > (b) ? (a) : (b))

static uint32_t ceil_log2(uint32_t n)
{
    uint32_t l = 0;
    while ((1ull << l) < n) l++;
    return l;
}

/* Plain BFS from `src` over edges i → (i + off[k]) mod P. Fills dist
 * (UINT32_MAX = unreached); returns the number reached, *maxd, *sum. */
static uint32_t ref_bfs(uint32_t P, const uint32_t *off, uint32_t Q, uint32_t src, uint32_t *dist,
                        uint32_t *queue, uint32_t *maxd, uint64_t *sum)
{
    for (uint32_t i = 0; i < P; i++) dist[i] = UINT32_MAX;
    uint32_t h = 0, n = 0;
    dist[src] = 0;
    queue[n++] = src;
    *maxd = 0;
    *sum = 0;
    while (h < n) {
        uint32_t u = queue[h++];
        for (uint32_t k = 0; k < Q; k++) {
            uint32_t w = u + off[k]; /* both < P */
            if (w >= P) w -= P;
            if (dist[w] != UINT32_MAX) continue;
            dist[w] = dist[u] + 1;
            *maxd = dist[w];
            *sum += dist[w];
            queue[n++] = w;
        }
    }
    return n;
}

static int test_registry_and_errors(void)
{
    ASSERT(sfb_topo_registry_name(0) && strcmp(sfb_topo_registry_name(0), "full") == 0);
    ASSERT(strcmp(sfb_topo_registry_name(1), "halton") == 0);
    ASSERT(strcmp(sfb_topo_registry_name(2), "halton-classic") == 0);
    ASSERT(sfb_topo_registry_name(3) == NULL);
    ASSERT(sfb_topo_registry_summary(1) != NULL);
    struct sfb_topo *t = (struct sfb_topo *)&t;
    ASSERT_EQ(sfb_topo_open(&t, "ring", 8, 0), -SFB_EUSAGE);
    ASSERT(t == NULL);
    ASSERT_STR_CONTAINS(sfb_last_error(), "unknown topology 'ring'");
    ASSERT_EQ(sfb_topo_open(&t, NULL, 8, 0), -EINVAL); /* a NULL pointer (sfb/common.h) */
    ASSERT_EQ(sfb_topo_open(&t, "halton", 0, 0), -SFB_EUSAGE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "nodes 0 out of range");
    ASSERT_EQ(sfb_topo_open(&t, "halton", SFB_TOPO_MAX_NODES + 1, 0), -SFB_EUSAGE);
    sfb_topo_close(&t);
    sfb_topo_close(NULL);
    ASSERT_EQ(sfb_topo_default_degree(1), 0);
    ASSERT_EQ(sfb_topo_default_degree(2), 1);
    ASSERT_EQ(sfb_topo_default_degree(1024), 10);
    ASSERT_EQ(sfb_topo_default_degree(1025), 11);
    ASSERT_EQ(sfb_topo_default_degree(10000), 14);
    return 0;
}

static int open_diam(const char *name, uint32_t P, uint32_t Q, uint32_t *d)
{
    struct sfb_topo *t;
    int r = sfb_topo_open(&t, name, P, Q);
    if (r) return r;
    *d = sfb_topo_diameter(t);
    sfb_topo_close(&t);
    return 0;
}

/* The numbers docs/design.md states. */
static int test_design_numbers(void)
{
    uint32_t d;
    ASSERT_OK(open_diam("halton", 16, 0, &d));
    ASSERT_EQ(d, 3);
    ASSERT_OK(open_diam("halton", 1024, 0, &d));
    ASSERT_EQ(d, 7);
    ASSERT_OK(open_diam("halton", 10000, 0, &d));
    ASSERT_EQ(d, 8);
    ASSERT_OK(open_diam("halton-classic", 64, 0, &d));
    ASSERT_EQ(d, 9);
    ASSERT_OK(open_diam("halton-classic", 1024, 0, &d));
    ASSERT_EQ(d, 65);
    ASSERT_OK(open_diam("full", 10000, 0, &d));
    ASSERT_EQ(d, 1);
    return 0;
}

static int check_offsets(const char *name, uint32_t P, uint32_t Q, const uint32_t *want, uint32_t n)
{
    struct sfb_topo *t;
    ASSERT_OK(sfb_topo_open(&t, name, P, Q));
    int bad = sfb_topo_out_degree(t) != n;
    for (uint32_t k = 0; !bad && k < n; k++) bad = sfb_topo_offset(t, k) != want[k];
    if (bad) {
        fprintf(stderr, "  %s P=%u Q=%u offsets:", name, P, Q);
        for (uint32_t k = 0; k < sfb_topo_out_degree(t); k++) fprintf(stderr, " %u", sfb_topo_offset(t, k));
        fprintf(stderr, "\n");
    }
    ASSERT_EQ(sfb_topo_offset(t, sfb_topo_out_degree(t)), 0);
    sfb_topo_close(&t);
    ASSERT_EQ(bad, 0);
    return 0;
}

/* Offsets worked out by hand from the formulas. */
static int test_offsets_by_hand(void)
{
    /* P=16, L=4, Q=4: j = k; φ₃(1..4) = 1/3, 2/3, 1/9, 4/9:
     * 1+0, 2+1, 4+0, 8+3. */
    static const uint32_t h16[] = {1, 3, 4, 11};
    if (check_offsets("halton", 16, 0, h16, 4)) return 1;
    /* P=16 Q=1: the ring. */
    static const uint32_t ring[] = {1};
    if (check_offsets("halton", 16, 1, ring, 1)) return 1;
    /* P=16 Q=2: j = 0, 3; o = 1, 8 + ⌊8·2/3⌋ = 13. */
    static const uint32_t h16q2[] = {1, 13};
    if (check_offsets("halton", 16, 2, h16q2, 2)) return 1;
    /* P=10, L=4, Q=4: last scale 8 + ⌊8·4/9⌋ = 11 clipped to 9. */
    static const uint32_t h10[] = {1, 3, 4, 9};
    if (check_offsets("halton", 10, 0, h10, 4)) return 1;
    /* P=8, L=3 is divisible by 3: each scale pins the last base-3 digit of
     * k+1, so only {1, 3, 4, 5} exist for Q > L; asking 6 gives 4. */
    static const uint32_t h8[] = {1, 3, 4, 5};
    if (check_offsets("halton", 8, 6, h8, 4)) return 1;
    /* Q ≥ P−1: complete digraph. */
    static const uint32_t c5[] = {1, 2, 3, 4};
    if (check_offsets("halton", 5, 100, c5, 4)) return 1;
    if (check_offsets("halton-classic", 5, 4, c5, 4)) return 1;
    /* classic P=16: 1 + ⌊15·φ₂(l)⌋ for φ₂ = 1/2, 1/4, 3/4, 1/8 = 8, 4, 12, 2;
     * gcd(8,4,12,2,16) = 2 → offset 1 added (degree Q+1). */
    static const uint32_t c16[] = {8, 4, 12, 2, 1};
    if (check_offsets("halton-classic", 16, 0, c16, 5)) return 1;
    /* classic P=17: 9, 5, 13, 3 — gcd with 17 is 1, nothing added. */
    static const uint32_t c17[] = {9, 5, 13, 3, 11};
    if (check_offsets("halton-classic", 17, 0, c17, 5)) return 1;
    /* P=2: one offset, 1, for every topology and any Q. */
    static const uint32_t one[] = {1};
    if (check_offsets("halton", 2, 5, one, 1)) return 1;
    if (check_offsets("halton-classic", 2, 0, one, 1)) return 1;
    if (check_offsets("full", 2, 0, one, 1)) return 1;
    return 0;
}

static uint32_t gcd_u32(uint32_t a, uint32_t b)
{
    while (b) {
        uint32_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* One (topology, P, Q): offsets valid, and — when `bfs` — reachability,
 * diameter and mean hops from an independent BFS equal the library's. */
static int sweep_one(const char *name, uint32_t P, uint32_t Q, int bfs, uint32_t *dist,
                     uint32_t *queue)
{
    uint32_t off[64], q, g = P;
    ASSERT_OK(sfb_topo_offsets(name, P, Q, off, 64, &q));
    ASSERT_LE(q, 64);
    ASSERT_GE(q, 1);
    ASSERT_LE(q, Q + 1); /* the gcd fix adds at most one */
    ASSERT_LE(q, P - 1);
    for (uint32_t k = 0; k < q; k++) {
        if (off[k] < 1 || off[k] >= P) TEST_FAIL_AT("%s P=%u offset %u", name, P, off[k]);
        for (uint32_t i = 0; i < k; i++)
            if (off[i] == off[k]) TEST_FAIL_AT("%s P=%u Q=%u: offset %u twice", name, P, Q, off[k]);
        g = gcd_u32(g, off[k]);
    }
    /* A circulant digraph is strongly connected iff gcd(offsets, P) = 1
     * (the offsets generate Z_P); the BFS below confirms it on a sample. */
    if (g != 1) TEST_FAIL_AT("%s P=%u Q=%u: gcd %u, not connected", name, P, Q, g);
    if (!bfs) return 0;
    struct sfb_topo *t;
    ASSERT_OK(sfb_topo_open(&t, name, P, Q));
    ASSERT_EQ(sfb_topo_out_degree(t), q);
    for (uint32_t k = 0; k < q; k++) ASSERT_EQ(sfb_topo_offset(t, k), off[k]);
    uint32_t maxd;
    uint64_t sum;
    uint32_t reached = ref_bfs(P, off, q, 0, dist, queue, &maxd, &sum);
    if (reached != P) TEST_FAIL_AT("%s P=%u Q=%u: only %u nodes reachable", name, P, Q, reached);
    if (maxd != sfb_topo_diameter(t))
        TEST_FAIL_AT("%s P=%u Q=%u: diameter %u vs BFS %u", name, P, Q, sfb_topo_diameter(t), maxd);
    double mean = (double)sum / (P - 1);
    if (fabs(mean - sfb_topo_mean_hops(t)) > 1e-9)
        TEST_FAIL_AT("%s P=%u Q=%u: mean hops %.9f vs BFS %.9f", name, P, Q, sfb_topo_mean_hops(t), mean);
    if (strcmp(name, "halton") == 0 && Q == ceil_log2(P) && maxd > 8)
        TEST_FAIL_AT("halton P=%u default degree: diameter %u > 8", P, maxd);
    sfb_topo_close(&t);
    return 0;
}

/* Both Halton graphs strongly connected for every P in 2…4096 and Q in
 * 1…⌈log₂P⌉+2 (gcd criterion for all; explicit BFS with diameter and mean
 * hops for every P ≤ 256, every 16th P beyond, and for the default degree
 * of every P — which also checks halton's diameter ≤ 8 there). */
static int test_connectivity_sweep(void)
{
    enum { PMAX = 4096 };
    uint32_t *dist = malloc(sizeof *dist * PMAX), *queue = malloc(sizeof *queue * PMAX);
    ASSERT(dist && queue);
    static const char *const names[] = {"halton", "halton-classic"};
    for (int n = 0; n < 2; n++) {
        for (uint32_t P = 2; P <= PMAX; P++) {
            uint32_t L = ceil_log2(P);
            for (uint32_t Q = 1; Q <= L + 2; Q++) {
                int bfs = P <= 256 || P % 16 == 1 || Q == L;
                if (sweep_one(names[n], P, Q, bfs, dist, queue)) return 1;
            }
        }
    }
    /* Small P: BFS from every source gives the same distances (the shift
     * argument the routing relies on). */
    for (int n = 0; n < 2; n++) {
        for (uint32_t P = 2; P <= 40; P++) {
            struct sfb_topo *t;
            uint32_t off[64];
            ASSERT_OK(sfb_topo_open(&t, names[n], P, 0));
            uint32_t q = sfb_topo_out_degree(t);
            for (uint32_t k = 0; k < q; k++) off[k] = sfb_topo_offset(t, k);
            for (uint32_t s = 0; s < P; s++) {
                uint32_t maxd;
                uint64_t sum;
                ASSERT_EQ(ref_bfs(P, off, q, s, dist, queue, &maxd, &sum), P);
                ASSERT_EQ(maxd, sfb_topo_diameter(t));
                for (uint32_t v = 0; v < P; v++) ASSERT_EQ(dist[v], sfb_topo_hops(t, s, v));
            }
            sfb_topo_close(&t);
        }
    }
    free(dist);
    free(queue);
    return 0;
}

/* For every origin, following children from the origin reaches every node
 * exactly once, along shortest paths, consistently with parent(). */
static int check_routing(const char *name, uint32_t P, uint32_t Q, uint32_t origins_step)
{
    struct sfb_topo *t;
    ASSERT_OK(sfb_topo_open(&t, name, P, Q));
    uint32_t q = sfb_topo_out_degree(t);
    uint32_t *got = calloc(P, sizeof *got), *stack = malloc(sizeof *stack * P);
    uint32_t *kids = malloc(sizeof *kids * (q + 1)), *links = malloc(sizeof *links * (q + 1));
    uint32_t *dist = malloc(sizeof *dist * P), *queue = malloc(sizeof *queue * P);
    uint32_t *off = malloc(sizeof *off * (q + 1));
    uint64_t *sent = calloc(P, sizeof *sent);
    ASSERT(got && stack && kids && links && dist && queue && off && sent);
    for (uint32_t k = 0; k < q; k++) off[k] = sfb_topo_offset(t, k);
    uint64_t frames_total = 0;
    uint32_t maxd;
    uint64_t sum;
    uint32_t *dist0 = malloc(sizeof *dist0 * P);
    ASSERT(dist0);
    ref_bfs(P, off, q, 0, dist0, queue, &maxd, &sum);
    for (uint32_t r = 0; r < P; r += origins_step) {
        /* Independent BFS from r, except for big complete graphs where it
         * would cost P²·Q: there use BFS from 0 shifted (checked above). */
        if (q <= 64)
            ref_bfs(P, off, q, r, dist, queue, &maxd, &sum);
        else
            for (uint32_t v = 0; v < P; v++) dist[v] = dist0[(v + P - r) % P];
        memset(got, 0, sizeof *got * P);
        uint32_t sp = 0;
        stack[sp++] = r;
        got[r] = 1;
        ASSERT_EQ(sfb_topo_parent(t, r, r), UINT32_MAX);
        ASSERT_EQ(sfb_topo_parent_link(t, r, r), UINT32_MAX);
        ASSERT_EQ(sfb_topo_hops(t, r, r), 0);
        while (sp > 0) {
            uint32_t u = stack[--sp];
            uint32_t n = sfb_topo_children(t, r, u, kids);
            ASSERT_EQ(sfb_topo_forward_links(t, r, u, links), n);
            sent[u] += n;
            frames_total += n;
            for (uint32_t i = 0; i < n; i++) {
                uint32_t c = kids[i];
                ASSERT_LT(c, P);
                ASSERT_EQ(sfb_topo_neighbor(t, u, links[i]), c);
                if (i) ASSERT_LT(links[i - 1], links[i]);
                got[c]++;
                if (got[c] != 1) TEST_FAIL_AT("%s P=%u origin %u: node %u reached twice", name, P, r, c);
                ASSERT_EQ(sfb_topo_parent(t, r, c), u);
                ASSERT_EQ(sfb_topo_parent_link(t, r, c), links[i]);
                ASSERT_EQ(sfb_topo_link_index(t, u, c), links[i]);
                ASSERT_EQ(sfb_topo_hops(t, r, c), sfb_topo_hops(t, r, u) + 1);
                ASSERT_EQ(sfb_topo_hops(t, r, c), dist[c]); /* shortest path */
                stack[sp++] = c;
            }
        }
        for (uint32_t v = 0; v < P; v++)
            if (got[v] != 1) TEST_FAIL_AT("%s P=%u origin %u: node %u reached %u times", name, P, r, v, got[v]);
    }
    if (origins_step == 1) {
        /* Every node forwards exactly P−1 frames per clock, and the per-link
         * loads add up to the same. */
        ASSERT_EQ(frames_total, (uint64_t)P * (P - 1));
        for (uint32_t v = 0; v < P; v++) ASSERT_EQ(sent[v], P - 1);
    }
    uint64_t lf = 0;
    for (uint32_t k = 0; k < q; k++) lf += sfb_topo_link_frames(t, k);
    ASSERT_EQ(lf, P - 1);
    free(got);
    free(stack);
    free(kids);
    free(links);
    free(dist);
    free(queue);
    free(off);
    free(sent);
    free(dist0);
    sfb_topo_close(&t);
    return 0;
}

static int test_routing_trees(void)
{
    static const char *const names[] = {"full", "halton", "halton-classic"};
    static const uint32_t small[] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 32};
    for (int n = 0; n < 3; n++) {
        for (size_t i = 0; i < SFB_ARRAY_LEN_T(small); i++) {
            for (uint32_t Q = 0; Q <= 3; Q++)
                if (check_routing(names[n], small[i], Q, 1)) return 1;
        }
        if (check_routing(names[n], 1000, 0, 1)) return 1;
        if (check_routing(names[n], 4096, 0, 97)) return 1;
    }
    if (check_routing("halton", 10000, 0, 997)) return 1;
    return 0;
}

static int test_untrusted_queries(void)
{
    struct sfb_topo *t;
    uint32_t out[16];
    ASSERT_OK(sfb_topo_open(&t, "halton", 100, 0));
    ASSERT_EQ(sfb_topo_children(t, 100, 0, out), 0);
    ASSERT_EQ(sfb_topo_children(t, 0, UINT32_MAX, out), 0);
    ASSERT_EQ(sfb_topo_forward_links(t, UINT32_MAX, 3, out), 0);
    ASSERT_EQ(sfb_topo_parent(t, 100, 1), UINT32_MAX);
    ASSERT_EQ(sfb_topo_parent_link(t, 1, 100), UINT32_MAX);
    ASSERT_EQ(sfb_topo_hops(t, 0, 100), UINT32_MAX);
    ASSERT_EQ(sfb_topo_neighbor(t, 100, 0), UINT32_MAX);
    ASSERT_EQ(sfb_topo_neighbor(t, 0, 7), UINT32_MAX);
    ASSERT_EQ(sfb_topo_link_index(t, 0, 100), UINT32_MAX);
    ASSERT_EQ(sfb_topo_link_index(t, 5, 7), UINT32_MAX); /* offset 2 not used */
    ASSERT_EQ(sfb_topo_link_index(t, 99, 0), 0);         /* offset 1 wraps */
    ASSERT_EQ(sfb_topo_link_frames(t, 7), 0);
    sfb_topo_close(&t);

    /* P = 1: nothing to route. */
    ASSERT_OK(sfb_topo_open(&t, "halton", 1, 0));
    ASSERT_EQ(sfb_topo_out_degree(t), 0);
    ASSERT_EQ(sfb_topo_diameter(t), 0);
    ASSERT_NEAR(sfb_topo_mean_hops(t), 0, 0);
    ASSERT_EQ(sfb_topo_children(t, 0, 0, out), 0);
    ASSERT_EQ(sfb_topo_parent(t, 0, 0), UINT32_MAX);
    struct sfb_topo_report r = {.size = sizeof r};
    ASSERT_OK(sfb_topo_analyse(t, NULL, &r));
    ASSERT_EQ(r.frames_per_clock, 0);
    ASSERT_EQ(r.messages_per_clock, 0);
    ASSERT_NEAR(r.time_s, 0, 0);
    sfb_topo_close(&t);
    return 0;
}

static int test_traffic_per_clock(void)
{
    struct sfb_topo *t;
    struct sfb_topo_sim_settings s;
    struct sfb_topo_report r = {.size = sizeof r};
    sfb_topo_sim_default_settings(&s);
    ASSERT_EQ(s.sf_bytes, 262208);
    ASSERT_EQ(s.bundle_header, 64);
    s.flush = SFB_TOPO_FLUSH_CLOCK;

    ASSERT_OK(sfb_topo_open(&t, "full", 1024, 0));
    ASSERT_OK(sfb_topo_analyse(t, &s, &r));
    ASSERT_EQ(r.degree, 1023);
    ASSERT_EQ(r.frames_per_clock, 1047552);
    ASSERT_EQ(r.messages_per_clock, 1047552);
    ASSERT_EQ(r.bytes_per_clock, 1047552ull * 262208);
    ASSERT_EQ(r.max_link_frames, 1);
    sfb_topo_close(&t);

    ASSERT_OK(sfb_topo_open(&t, "halton", 1024, 0));
    ASSERT_OK(sfb_topo_analyse(t, &s, &r));
    ASSERT_EQ(r.degree, 10);
    ASSERT_EQ(r.frames_per_clock, 1047552);
    ASSERT_LE(r.messages_per_clock, 1024 * 10);
    ASSERT_EQ(r.messages_per_clock, 1024ull * r.links_used);
    ASSERT_EQ(r.clocks, 7);
    /* bytes: every frame once, plus one bundle header per used link. */
    ASSERT_EQ(r.bytes_per_node, 1023ull * 262208 + 64ull * r.links_used);
    uint32_t maxf = 0;
    for (uint32_t k = 0; k < 10; k++) maxf = SFB_MAX_T(maxf, sfb_topo_link_frames(t, k));
    ASSERT_EQ(r.max_link_frames, maxf);
    ASSERT_GE(maxf, (1023 + 9) / 10); /* cannot beat perfect balance */
    ASSERT_LE(maxf, 2 * (1023 + 9) / 10); /* the greedy balance works */
    sfb_topo_close(&t);

    /* Bad settings. */
    ASSERT_OK(sfb_topo_open(&t, "halton", 16, 0));
    s.link_gbps = 0;
    ASSERT_EQ(sfb_topo_analyse(t, &s, &r), -SFB_EUSAGE);
    s.link_gbps = 1;
    s.latency_us = -1;
    ASSERT_EQ(sfb_topo_analyse(t, &s, &r), -SFB_EUSAGE);
    s.latency_us = 0;
    s.sf_bytes = 0;
    ASSERT_EQ(sfb_topo_analyse(t, &s, &r), -SFB_EUSAGE);
    s.sf_bytes = 1;
    s.flush = (enum sfb_topo_flush)7;
    ASSERT_EQ(sfb_topo_analyse(t, &s, &r), -SFB_EUSAGE);
    sfb_topo_close(&t);
    return 0;
}

/* The time with a 5 µs per-message overhead, then with 25 µs of latency
 * instead; leaves s as it found it (latency 1 µs, no overhead). */
static int overhead_and_latency(const struct sfb_topo *t, struct sfb_topo_sim_settings *s,
                                double with_overhead_s, double with_latency_s)
{
    struct sfb_topo_report r = {.size = sizeof r};
    s->msg_overhead_us = 5;
    ASSERT_OK(sfb_topo_analyse(t, s, &r));
    ASSERT_NEAR(r.time_s, with_overhead_s, 1e-12);
    s->msg_overhead_us = 0;
    s->latency_us = 25;
    ASSERT_OK(sfb_topo_analyse(t, s, &r));
    ASSERT_NEAR(r.time_s, with_latency_s, 1e-12);
    s->latency_us = 1;
    return 0;
}

static int test_simulation(void)
{
    struct sfb_topo *t;
    struct sfb_topo_sim_settings s;
    struct sfb_topo_report r = {.size = sizeof r};
    sfb_topo_sim_default_settings(&s);
    s.sf_bytes = 1250; /* 10 µs at 1 Gbit/s */
    s.latency_us = 1;

    /* Full P2P under either NIC: closed form (P−1)·tx + L (fair: every
     * link's frame leaves at the end; FIFO: the last one does). */
    ASSERT_EQ(s.nic, SFB_TOPO_NIC_FAIR);
    for (int nic = 0; nic < 2; nic++) {
        s.nic = nic ? SFB_TOPO_NIC_FIFO : SFB_TOPO_NIC_FAIR;
        for (uint32_t P = 2; P <= 10000; P = P * 3 + 1) {
            ASSERT_OK(sfb_topo_open(&t, "full", P, 0));
            ASSERT_OK(sfb_topo_analyse(t, &s, &r));
            ASSERT_NEAR(r.time_s, (P - 1) * 10e-6 + 1e-6, 1e-9 * P);
            ASSERT_EQ(r.messages_per_node, P - 1);
            ASSERT_EQ(r.bytes_per_clock, (uint64_t)P * (P - 1) * 1250);
            sfb_topo_close(&t);
        }
    }

    /* P = 4 halton, fair NIC: node 0 sends pos 1 (link 0) and pos 3 (link
     * 1) side by side at half the rate, both leave at 20 and arrive at 21;
     * then pos 2 goes alone, [21, 31], +1. */
    s.nic = SFB_TOPO_NIC_FAIR;
    ASSERT_OK(sfb_topo_open(&t, "halton", 4, 0));
    ASSERT_OK(sfb_topo_analyse(t, &s, &r));
    ASSERT_NEAR(r.time_s, 32e-6, 1e-12);
    ASSERT_EQ(r.messages_per_node, 3);
    ASSERT_EQ(r.bytes_per_node, 3 * 1250);
    /* A 5 µs overhead is 625 bytes of NIC share: [0, 30], +1, [31, 46], +1.
     * Latency 25 µs: [0, 20], +25, [45, 55], +25. */
    ASSERT_OK(overhead_and_latency(t, &s, 47e-6, 80e-6));
    s.nic = 99;
    ASSERT_EQ(sfb_topo_analyse(t, &s, &r), -SFB_EUSAGE);
    sfb_topo_close(&t);
    s.nic = SFB_TOPO_NIC_FIFO;

    /* FIFO NIC, P = 4 halton: offsets {1, 3}; position 2 is reached via 1 (tie broken
     * to link 0). Node 0 sends pos 1 [0,10], pos 3 [10,20]; pos 1 arrives
     * at 11 and its child pos 2 leaves when the NIC frees, [20,30], +1. */
    ASSERT_OK(sfb_topo_open(&t, "halton", 4, 0));
    ASSERT_EQ(sfb_topo_offset(t, 1), 3);
    ASSERT_EQ(sfb_topo_parent(t, 0, 2), 1);
    ASSERT_OK(sfb_topo_analyse(t, &s, &r));
    ASSERT_NEAR(r.time_s, 31e-6, 1e-12);
    ASSERT_EQ(r.messages_per_node, 3);
    ASSERT_EQ(r.bytes_per_node, 3 * 1250);
    ASSERT_EQ(r.max_link_frames, 2);
    ASSERT_EQ(r.max_link_bytes, 2 * 1250); /* sent as two lone frames */
    /* With a per-message overhead of 5 µs every send takes 15 µs. Latency
     * 25 µs: pos 1 arrives at 35 > 20, so pos 2 leaves at 35. */
    ASSERT_OK(overhead_and_latency(t, &s, 46e-6, 70e-6));
    /* Flush at clock boundaries: link 0 carries a 2-frame bundle (pos 1
     * and 2, of different clocks), link 1 one frame; two clocks deep. */
    s.flush = SFB_TOPO_FLUSH_CLOCK;
    s.latency_us = 1;
    ASSERT_OK(sfb_topo_analyse(t, &s, &r));
    ASSERT_EQ(r.messages_per_node, 2);
    ASSERT_EQ(r.bytes_per_node, 3 * 1250 + 64);
    ASSERT_EQ(r.max_link_bytes, 2 * 1250 + 64);
    ASSERT_EQ(r.clocks, 2);
    ASSERT_NEAR(r.time_s, (3 * 1250 + 64) * 8e-9 + 1e-6, 1e-12);
    ASSERT_NEAR(r.network_time_s, r.time_s, 1e-15);
    ASSERT_NEAR(r.cpu_time_s, 0, 1e-15); /* host_cores 0: no CPU term */
    /* Shared host CPU: 4 nodes on 2 cores, 100 µs a message, 1 ns a byte:
     * (8 msgs · 100 µs + 4·(3·1250 + 64) B · 1 ns) / 2 dominates; the
     * counts do not move. */
    s.host_cores = 2;
    s.cpu_msg_us = 100;
    s.cpu_byte_ns = 1;
    ASSERT_OK(sfb_topo_analyse(t, &s, &r));
    ASSERT_EQ(r.messages_per_clock, 8);
    ASSERT_EQ(r.bytes_per_node, 3 * 1250 + 64);
    ASSERT_NEAR(r.cpu_time_s, (8 * 100e-6 + 4 * (3 * 1250 + 64) * 1e-9) / 2, 1e-12);
    ASSERT_NEAR(r.network_time_s, (3 * 1250 + 64) * 8e-9 + 1e-6, 1e-12);
    ASSERT_NEAR(r.time_s, r.cpu_time_s, 1e-15);
    /* a cheap CPU leaves the network time */
    s.cpu_msg_us = 0.001;
    s.cpu_byte_ns = 0;
    ASSERT_OK(sfb_topo_analyse(t, &s, &r));
    ASSERT_NEAR(r.time_s, r.network_time_s, 1e-15);
    s.cpu_msg_us = -1;
    ASSERT_EQ(sfb_topo_analyse(t, &s, &r), -SFB_EUSAGE);
    s.host_cores = 0;
    s.cpu_msg_us = 0;
    sfb_topo_close(&t);

    /* Large overlays: every frame is delivered (the simulator checks), the
     * time is at least the egress bound (P−1)·tx and the whole thing is
     * fast. */
    s.flush = SFB_TOPO_FLUSH_EAGER;
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    static const char *const names[] = {"full", "halton", "halton-classic"};
    for (int n = 0; n < 6; n++) {
        s.nic = n < 3 ? SFB_TOPO_NIC_FIFO : SFB_TOPO_NIC_FAIR;
        ASSERT_OK(sfb_topo_open(&t, names[n % 3], 10000, 0));
        ASSERT_OK(sfb_topo_analyse(t, &s, &r));
        ASSERT_GE(r.time_s, 9999 * 10e-6);
        /* the NIC never idles long: within 10% of the bandwidth bound */
        ASSERT_LE(r.time_s, 1.1 * r.bytes_per_node * 8e-9 + r.diameter * 11e-6);
        ASSERT_GE(r.messages_per_node, sfb_topo_out_degree(t) - 1);
        ASSERT_LE(r.messages_per_node, 9999);
        sfb_topo_close(&t);
    }
    ASSERT_LT((double)clock() / CLOCKS_PER_SEC - t0, 10.0);
    return 0;
}

static const struct test_case tests[] = {
    {"registry_and_errors", test_registry_and_errors},
    {"design_numbers", test_design_numbers},
    {"offsets_by_hand", test_offsets_by_hand},
    {"connectivity_sweep", test_connectivity_sweep},
    {"routing_trees", test_routing_trees},
    {"untrusted_queries", test_untrusted_queries},
    {"traffic_per_clock", test_traffic_per_clock},
    {"simulation", test_simulation},
};

TEST_MAIN(tests)
