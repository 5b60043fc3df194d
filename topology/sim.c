/* `sfb topo` analysis: per-clock traffic and a discrete-event simulation of
 * one clock's dissemination.
 *
 * Why one node suffices: the graph is circulant and origin r's tree is the
 * tree from 0 shifted by r; if every node injects its frame at t = 0, the
 * whole system is invariant under n ↦ n + 1. Whatever node 0 does at time t,
 * node n does at time t shifted by n. So when node 0 sends a bundle of tree
 * positions {c} on link k, it simultaneously *receives* the same positions
 * from node −o_k (it is at position c of origin −c's tree). Simulating node 0
 * against itself is exact and costs O(P·Q) instead of O(P²·Q) — P = 10⁴
 * full P2P (10⁸ frames) takes milliseconds.
 */
#include "config.h"
#include "src/base/util.h"
#include "topology/topo_ops.h"

#include <string.h>

#define NONE UINT32_MAX

void sfb_topo_sim_default_settings(struct sfb_topo_sim_settings *s)
{
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->version = SFB_TOPO_SIM_SETTINGS_VERSION;
    s->sf_bytes = 4ull * 32 * (1024 + 1024) + 64;
    s->bundle_header = 64;
    s->link_gbps = 1.0;
    s->latency_us = 10.0;
    s->flush = SFB_TOPO_FLUSH_EAGER;
    s->nic = SFB_TOPO_NIC_FAIR;
}

static uint64_t message_bytes(const struct sfb_topo_sim_settings *s, uint64_t frames)
{
    /* A lone frame goes bare; two or more ride in one BUNDLE frame whose
     * payload is the inner frames byte-for-byte. */
    return frames * s->sf_bytes + (frames >= 2 ? s->bundle_header : 0);
}

struct sim {
    const struct sfb_topo *t;
    const struct sfb_topo_sim_settings *s;
    uint32_t P, Q;
    uint32_t *next;      /* P: chain of positions pending on a link / in flight */
    uint32_t *head, *tail, *count; /* Q: each link's pending chain */
    uint64_t *multi;     /* Q: bundles of ≥ 2 frames sent on the link */
    uint32_t *ready;     /* Q: ring of links with pending frames, FIFO */
    uint32_t ready_head, ready_len;
    uint32_t *links;     /* Q: scratch for sfb_topo_forward_links */
    double *msg_time;    /* P: in-flight messages (arrive in send order) */
    uint32_t *msg_chain;
    uint32_t msg_head, msg_tail;
    /* fair NIC: each link's message in transmission */
    uint32_t *cur;       /* Q: its chain of positions, NONE when the link is idle */
    double *vfin;        /* Q: virtual time its last byte leaves */
    uint32_t *heap;      /* Q: the busy links, a min-heap on vfin */
    uint32_t nheap;
};

/* Node 0 now holds the frame at tree position v: queue it on the links to
 * v's children. */
static void hold(struct sim *m, uint32_t v)
{
    uint32_t origin = (m->P - v) % m->P;
    uint32_t n = sfb_topo_forward_links(m->t, origin, 0, m->links);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = m->links[i];
        uint32_t c = (uint32_t)(((uint64_t)v + sfb_topo_offset(m->t, k)) % m->P);
        m->next[c] = NONE;
        if (m->head[k] == NONE) {
            m->head[k] = c;
            m->ready[(m->ready_head + m->ready_len++) % m->Q] = k;
        } else {
            m->next[m->tail[k]] = c;
        }
        m->tail[k] = c;
        m->count[k]++;
    }
}

/* The simulation's per-node and per-link arrays; -1 when out of memory
 * (the caller frees what was allocated). */
static int sim_alloc(struct sim *m)
{
    m->next = malloc(sizeof *m->next * m->P);
    m->msg_time = malloc(sizeof *m->msg_time * m->P);
    m->msg_chain = malloc(sizeof *m->msg_chain * m->P);
    m->head = malloc(sizeof *m->head * m->Q);
    m->tail = malloc(sizeof *m->tail * m->Q);
    m->count = calloc(m->Q, sizeof *m->count);
    m->multi = calloc(m->Q, sizeof *m->multi);
    m->ready = malloc(sizeof *m->ready * m->Q);
    m->links = malloc(sizeof *m->links * m->Q);
    m->cur = malloc(sizeof *m->cur * m->Q);
    m->vfin = malloc(sizeof *m->vfin * m->Q);
    m->heap = malloc(sizeof *m->heap * m->Q);
    if (!m->next || !m->msg_time || !m->msg_chain || !m->head || !m->tail || !m->count ||
        !m->multi || !m->ready || !m->links || !m->cur || !m->vfin || !m->heap)
        return -1;
    for (uint32_t k = 0; k < m->Q; k++) m->head[k] = m->cur[k] = NONE;
    return 0;
}

static void sim_free(struct sim *m)
{
    free(m->next);
    free(m->msg_time);
    free(m->msg_chain);
    free(m->head);
    free(m->tail);
    free(m->count);
    free(m->multi);
    free(m->ready);
    free(m->links);
    free(m->cur);
    free(m->vfin);
    free(m->heap);
}

/* Link k's pending frames become one message of `return` bytes. */
static uint64_t take_pending(struct sim *m, uint32_t k, uint64_t *msgs, uint64_t *bytes)
{
    uint64_t b = message_bytes(m->s, m->count[k]);
    if (m->count[k] >= 2) m->multi[k]++;
    m->head[k] = NONE;
    m->count[k] = 0;
    ++*msgs;
    *bytes += b;
    return b;
}

/* The report's per-node counts once every position was delivered. */
static int sim_report(struct sim *m, uint64_t delivered, uint64_t msgs, uint64_t bytes, double last,
                      struct sfb_topo_report *r)
{
    if (delivered != m->P - 1) /* a broken tree; never expected */
        return sfb__error(-SFB_EUSAGE, "topo sim: %llu of %u positions delivered",
                          (unsigned long long)delivered, m->P - 1);
    r->messages_per_node = msgs;
    r->bytes_per_node = bytes;
    r->max_link_bytes = 0;
    for (uint32_t k = 0; k < m->Q; k++) {
        uint64_t lb = (uint64_t)sfb_topo_link_frames(m->t, k) * m->s->sf_bytes + m->multi[k] * m->s->bundle_header;
        if (lb > r->max_link_bytes) r->max_link_bytes = lb;
    }
    r->time_s = last;
    r->clocks = 1;
    return 0;
}

/* The oldest message in flight arrives: node 0 holds its positions (and
 * queues their forwards). Returns how many it carried. */
static uint64_t deliver_next(struct sim *m)
{
    uint64_t n = 0;
    for (uint32_t c = m->msg_chain[m->msg_head++]; c != NONE; n++) {
        uint32_t nx = m->next[c];
        hold(m, c);
        c = nx;
    }
    return n;
}

/* FIFO NIC: one message at a time, links served in the order they became
 * ready; frames arriving no later than a link's send join its bundle. */
static int simulate_fifo(struct sim *m, struct sfb_topo_report *r)
{
    const struct sfb_topo_sim_settings *s = m->s;
    const double sec_per_byte = 8.0 / (s->link_gbps * 1e9), lat = s->latency_us * 1e-6;
    const double ovh = s->msg_overhead_us * 1e-6;
    double now = 0, nic_free = 0, last = 0;
    uint64_t msgs = 0, bytes = 0, delivered = 0;
    hold(m, 0);
    for (;;) {
        int have_msg = m->msg_head != m->msg_tail;
        if (m->ready_len > 0) {
            double start = nic_free > now ? nic_free : now;
            if (!have_msg || start < m->msg_time[m->msg_head]) {
                uint32_t k = m->ready[m->ready_head];
                m->ready_head = (m->ready_head + 1) % m->Q;
                m->ready_len--;
                uint32_t chain = m->head[k];
                nic_free = start + (double)take_pending(m, k, &msgs, &bytes) * sec_per_byte + ovh;
                m->msg_time[m->msg_tail] = nic_free + lat;
                m->msg_chain[m->msg_tail++] = chain;
                continue;
            }
        }
        if (!have_msg) break;
        now = last = m->msg_time[m->msg_head];
        delivered += deliver_next(m);
    }
    return sim_report(m, delivered, msgs, bytes, last, r);
}

/* ---- fair NIC: busy links share the rate (processor sharing) ----
 * Virtual time V grows at rate/n while n links are busy, so a message of w
 * bytes started at V0 leaves when V reaches V0 + w: a min-heap on that
 * finish keeps each event O(log Q). */
static int heap_less(const struct sim *m, uint32_t i, uint32_t j)
{
    return m->vfin[m->heap[i]] < m->vfin[m->heap[j]];
}

static void heap_swap(struct sim *m, uint32_t i, uint32_t j)
{
    uint32_t x = m->heap[i];
    m->heap[i] = m->heap[j];
    m->heap[j] = x;
}

static void heap_push(struct sim *m, uint32_t k)
{
    uint32_t i = m->nheap++;
    m->heap[i] = k;
    for (; i > 0 && heap_less(m, i, (i - 1) / 2); i = (i - 1) / 2) heap_swap(m, i, (i - 1) / 2);
}

static uint32_t heap_pop(struct sim *m)
{
    uint32_t top = m->heap[0];
    m->heap[0] = m->heap[--m->nheap];
    for (uint32_t i = 0;;) {
        uint32_t l = 2 * i + 1, r = l + 1, min = i;
        if (l < m->nheap && heap_less(m, l, min)) min = l;
        if (r < m->nheap && heap_less(m, r, min)) min = r;
        if (min == i) break;
        heap_swap(m, i, min);
        i = min;
    }
    return top;
}

/* Link k starts sending its pending frames at virtual time V. */
static void fair_start(struct sim *m, uint32_t k, double V, double ovh_bytes, uint64_t *msgs,
                       uint64_t *bytes)
{
    m->cur[k] = m->head[k];
    m->vfin[k] = V + (double)take_pending(m, k, msgs, bytes) + ovh_bytes;
    heap_push(m, k);
}

static int simulate_fair(struct sim *m, struct sfb_topo_report *r)
{
    const struct sfb_topo_sim_settings *s = m->s;
    const double rate = s->link_gbps * 1e9 / 8.0, lat = s->latency_us * 1e-6;
    const double ovh_bytes = s->msg_overhead_us * 1e-6 * rate; /* the sender's time, as NIC share */
    double now = 0, V = 0, last = 0;
    uint64_t msgs = 0, bytes = 0, delivered = 0;
    hold(m, 0);
    for (;;) {
        while (m->ready_len > 0) { /* idle links with frames start now */
            uint32_t k = m->ready[m->ready_head];
            m->ready_head = (m->ready_head + 1) % m->Q;
            m->ready_len--;
            if (m->cur[k] == NONE) fair_start(m, k, V, ovh_bytes, &msgs, &bytes);
        }
        int have_msg = m->msg_head != m->msg_tail;
        if (!m->nheap && !have_msg) break;
        double done = m->nheap ? now + (m->vfin[m->heap[0]] - V) * m->nheap / rate : 0;
        if (m->nheap && (!have_msg || done <= m->msg_time[m->msg_head])) {
            now = done;
            V = m->vfin[m->heap[0]];
            while (m->nheap && m->vfin[m->heap[0]] <= V) {
                uint32_t k = heap_pop(m);
                m->msg_time[m->msg_tail] = now + lat;
                m->msg_chain[m->msg_tail++] = m->cur[k];
                m->cur[k] = NONE;
                if (m->head[k] != NONE) fair_start(m, k, V, ovh_bytes, &msgs, &bytes);
            }
            continue;
        }
        double t = m->msg_time[m->msg_head];
        if (m->nheap) V += (t - now) * rate / m->nheap;
        now = last = t;
        delivered += deliver_next(m);
    }
    return sim_report(m, delivered, msgs, bytes, last, r);
}

static int simulate_eager(const struct sfb_topo *t, const struct sfb_topo_sim_settings *s,
                          struct sfb_topo_report *r)
{
    struct sim m = {.t = t, .s = s, .P = sfb_topo_nodes(t), .Q = sfb_topo_out_degree(t)};
    int ret = -ENOMEM;
    if (!sim_alloc(&m))
        ret = s->nic == SFB_TOPO_NIC_FIFO ? simulate_fifo(&m, r) : simulate_fair(&m, r);
    sim_free(&m);
    return ret;
}

static int analyse(const struct sfb_topo *t, const struct sfb_topo_sim_settings *s,
                   struct sfb_topo_report *r);

/* The first version's size of struct sfb_topo_report */
#define REPORT_V1 SFB_END_OF(struct sfb_topo_report, cpu_time_s)

int sfb_topo_analyse(const struct sfb_topo *t, const struct sfb_topo_sim_settings *s,
                     struct sfb_topo_report *r)
{
    SFB_ENTER();
    SFB_ARG(t);
    SFB_ARG(r);
    int ret = SFB_CHECK_SIZE(r, "sfb_topo_report", REPORT_V1);
    struct sfb_topo_sim_settings def;
    if (!s) {
        sfb_topo_sim_default_settings(&def);
        s = &def;
    }
    if (!ret)
        ret = SFB_CHECK_VERSION(s, "sfb_topo_sim_settings", "sfb_topo_sim_default_settings",
                                SFB_TOPO_SIM_SETTINGS_VERSION);
    struct sfb_topo_report all = {.size = sizeof all};
    if (!ret) ret = analyse(t, s, &all);
    if (!ret) sfb__sized_copy(r, r->size, &all, sizeof all);
    return ret;
}

/* sfb_topo_analyse into the library's whole report */
static int analyse(const struct sfb_topo *t, const struct sfb_topo_sim_settings *s,
                   struct sfb_topo_report *r)
{
    if (!(s->link_gbps > 0) || !(s->latency_us >= 0) || s->sf_bytes == 0 ||
        s->link_gbps > 1e9 || s->latency_us > 1e12 || !(s->msg_overhead_us >= 0) || s->msg_overhead_us > 1e12 ||
        !(s->cpu_msg_us >= 0) || s->cpu_msg_us > 1e12 || !(s->cpu_byte_ns >= 0) || s->cpu_byte_ns > 1e12)
        return sfb__error(-SFB_EUSAGE, "topo sim: need link_gbps > 0, latency_us >= 0, sf_bytes > 0, "
                          "msg_overhead_us, cpu_msg_us, cpu_byte_ns >= 0");
    if (s->flush != SFB_TOPO_FLUSH_EAGER && s->flush != SFB_TOPO_FLUSH_CLOCK)
        return sfb__error(-SFB_EUSAGE, "topo sim: unknown flush mode %d", (int)s->flush);
    if (s->nic != SFB_TOPO_NIC_FAIR && s->nic != SFB_TOPO_NIC_FIFO)
        return sfb__error(-SFB_EUSAGE, "topo sim: unknown NIC model %d", (int)s->nic);

    memset(r, 0, sizeof *r);
    r->size = sizeof *r;
    uint32_t P = sfb_topo_nodes(t), Q = sfb_topo_out_degree(t);
    r->nodes = P;
    r->degree = Q;
    r->diameter = sfb_topo_diameter(t);
    r->mean_hops = sfb_topo_mean_hops(t);
    r->frames_per_clock = (uint64_t)P * (P - 1);
    if (P == 1) return 0;

    uint64_t clock_bytes = 0;
    for (uint32_t k = 0; k < Q; k++) {
        uint32_t f = sfb_topo_link_frames(t, k);
        if (f == 0) continue;
        r->links_used++;
        if (f > r->max_link_frames) r->max_link_frames = f;
        uint64_t b = message_bytes(s, f);
        clock_bytes += b;
        if (b > r->max_link_bytes) r->max_link_bytes = b;
    }
    if (s->flush == SFB_TOPO_FLUSH_CLOCK) {
        /* Steady state: every used link carries one bundle per clock. */
        r->messages_per_node = r->links_used;
        r->bytes_per_node = clock_bytes;
        r->time_s = (double)clock_bytes * 8.0 / (s->link_gbps * 1e9) +
                    r->links_used * s->msg_overhead_us * 1e-6 + s->latency_us * 1e-6;
        r->clocks = r->diameter;
    } else {
        int ret = simulate_eager(t, s, r);
        if (ret) return ret;
    }
    r->messages_per_clock = r->messages_per_node * P;
    r->bytes_per_clock = r->bytes_per_node * P;
    r->network_time_s = r->time_s;
    if (s->host_cores > 0) {
        /* Every node's messages run on the same host_cores cores. */
        r->cpu_time_s = ((double)r->messages_per_clock * s->cpu_msg_us * 1e-6 +
                         (double)r->bytes_per_clock * s->cpu_byte_ns * 1e-9) / s->host_cores;
        if (r->cpu_time_s > r->time_s) r->time_s = r->cpu_time_s;
    }
    return 0;
}
