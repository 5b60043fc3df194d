/* Relay routing and coalescing (sfb/relay.c) through the SFB engine on an
 * in-process loopback: on the Halton overlay every rank receives every
 * other rank's factors exactly once per clock, and with clock flushing the
 * messages and bytes each rank sends per clock are what `sfb topo` predicts
 * (topology/sim.c) for P = 4, 8, 16. */
#include "engine_util.h"
#include "sfb/codec.h"
#include <sfb/topo.h>
#include "src/wire/wire.h"

/* Frames seen on the wire: count[dst][origin][clock] of SF frames (bare or
 * inside a bundle), and any frame that is neither. */
struct tally {
    uint8_t count[ENG_MAX_RANKS][ENG_MAX_RANKS][ENG_MAX_CLOCKS];
    uint64_t odd;
    /* updates in parts: which parts arrived (bits), out of how many */
    uint64_t parts[ENG_MAX_RANKS][ENG_MAX_RANKS][ENG_MAX_CLOCKS];
    uint32_t nparts;
    int by_priority;    /* check each bundle's order: clock, then priority */
    uint64_t misordered; /* bundles that broke it */
    size_t largest;     /* the largest bundle payload */
};

/* One SF frame (bare or inner) that reached dst. */
static void count_sf(struct tally *t, uint32_t dst, const struct sfb__wire_hdr *h,
                     const uint8_t *payload)
{
    if (h->type != SFB_WIRE_SF || h->origin >= ENG_MAX_RANKS || h->clock < 0 ||
        h->clock >= ENG_MAX_CLOCKS) {
        t->odd++;
        return;
    }
    struct sfb__wire_part part;
    sfb__wire_part(h, payload, &part);
    if (part.count != t->nparts ||
        (t->parts[dst][h->origin][h->clock] >> part.index & 1)) {
        t->odd++; /* a count other than the run's, or a part twice */
        return;
    }
    t->parts[dst][h->origin][h->clock] |= 1ull << part.index;
    if (__builtin_popcountll(t->parts[dst][h->origin][h->clock]) == (int)t->nparts)
        t->count[dst][h->origin][h->clock]++;
}

static void tap(void *user, uint32_t src, uint32_t dst, uint8_t *frame, size_t len)
{
    struct tally *t = user;
    (void)src;
    struct sfb__wire_hdr h, ih;
    const uint8_t *payload, *inner, *ip;
    size_t inner_len;
    if (len < SFB_WIRE_HDR_SIZE) {
        t->odd++;
        return;
    }
    sfb__wire_trusted(frame, &h, &payload);
    if (h.type != SFB_WIRE_BUNDLE) {
        count_sf(t, dst, &h, payload);
        return;
    }
    if (h.payload_len > t->largest) t->largest = h.payload_len;
    struct sfb__wire_iter it;
    sfb__wire_bundle_begin(&it, payload, h.payload_len, (int)src);
    int64_t clock = INT64_MIN;
    float prio = INFINITY;
    while (sfb__wire_bundle_next_trusted(&it, &inner, &inner_len, &ih, &ip) == 1) {
        struct sfb__wire_part part;
        sfb__wire_part(&ih, ip, &part);
        if (t->by_priority && (ih.clock < clock || (ih.clock == clock && part.priority > prio)))
            t->misordered++;
        if (ih.clock != clock) prio = INFINITY;
        clock = ih.clock;
        prio = part.priority;
        count_sf(t, dst, &ih, ip);
    }
}

/* Every rank received every other origin's frame of every clock exactly
 * once, and never its own. */
static int exactly_once(const struct tally *t, uint32_t world, int64_t clocks)
{
    ASSERT_EQ(t->odd, 0);
    for (uint32_t d = 0; d < world; d++)
        for (uint32_t o = 0; o < world; o++)
            for (int64_t c = 0; c < clocks; c++)
                if (t->count[d][o][c] != (o == d ? 0 : 1))
                    TEST_FAIL_AT("rank %u got origin %u's frame of clock %lld %u times", d, o,
                                 (long long)c, t->count[d][o][c]);
    return 0;
}

static int run_relay(uint32_t world, int flush_clock)
{
    struct sfb_topo *topo;
    ASSERT_OK(sfb_topo_open(&topo, "halton", world, 0));
    uint32_t diameter = sfb_topo_diameter(topo);
    struct eng_cfg cfg = {.ops = &sfb__broadcast_ops,
                          .world = world,
                          .k = 3,
                          .d = 5,
                          .s = 2,
                          .clocks = diameter + 5,
                          .staleness = flush_clock ? diameter : 0,
                          .topology = "halton",
                          .flush_clock = flush_clock,
                          .slow_rank = -1};
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    struct tally *tl = calloc(1, sizeof *tl);
    ASSERT(tl);
    tl->nparts = 1;
    sfb__loopback_set_tap(lb, tap, tl);
    int rets[ENG_MAX_RANKS];
    int ret = sfb__loopback_run(lb, eng_rank_main, &run, rets);
    ASSERT_OK(ret);
    for (uint32_t r = 0; r < world; r++)
        ASSERT_EQ(rets[r], 0);
    if (exactly_once(tl, world, cfg.clocks)) return 1;

    /* What `sfb topo` predicts for one clock: one SF frame of this shape
     * is B bytes, a message of two or more frames adds a bundle header. */
    struct sfb_sf one = {0};
    ASSERT_OK(eng_make_sf(&one, run.rows, run.cols, cfg.s, 0, 0));
    struct sfb_topo_sim_settings ss;
    sfb_topo_sim_default_settings(&ss);
    ss.sf_bytes = SFB_WIRE_HDR_SIZE + sfb__sf_payload_size(&one, 0, 0, SFB_WIRE_F32);
    ss.bundle_header = SFB_WIRE_HDR_SIZE;
    ss.flush = flush_clock ? SFB_TOPO_FLUSH_CLOCK : SFB_TOPO_FLUSH_EAGER;
    struct sfb_topo_report rep = {.size = sizeof rep};
    ASSERT_OK(sfb_topo_analyse(topo, &ss, &rep));
    sfb_sf_free(&one);
    uint64_t frames_per_clock = 0; /* frames each rank sends per clock, relayed ones included */
    for (uint32_t k = 0; k < sfb_topo_out_degree(topo); k++)
        frames_per_clock += sfb_topo_link_frames(topo, k);
    ASSERT_EQ(frames_per_clock, world - 1);

    for (uint32_t r = 0; r < world; r++) {
        struct eng_rank *er = &run.r[r];
        struct sfb__loopback_stats st;
        sfb__loopback_stats(lb, r, &st);
        /* the loopback saw what the relay counted: data frames only */
        ASSERT_EQ(st.sent_msgs, er->rep.data_msgs);
        ASSERT_EQ(st.sent_bytes, er->rep.data_bytes);
        uint32_t own_links[ENG_MAX_RANKS];
        ASSERT_LE(sfb_topo_out_degree(topo), ENG_MAX_RANKS);
        ASSERT_EQ(er->rep.forwarded + cfg.clocks * sfb_topo_forward_links(topo, r, r, own_links),
                  frames_per_clock * cfg.clocks);
        if (flush_clock) {
            /* steady state: every frame of a boundary has a full pipeline
             * behind it, one message per used link */
            for (int64_t t = diameter; t < cfg.clocks; t++) {
                ASSERT_EQ(er->data_msgs[t] - er->data_msgs[t - 1], rep.messages_per_node);
                ASSERT_EQ(er->data_bytes[t] - er->data_bytes[t - 1], rep.bytes_per_node);
            }
        } else {
            /* eager: never more messages than frames, bundles only when a
             * link had two or more waiting */
            ASSERT_LE(er->rep.data_msgs, frames_per_clock * cfg.clocks);
            ASSERT_GE(er->rep.data_msgs, (uint64_t)rep.links_used * cfg.clocks);
        }
        ASSERT(eng_replica_is(&run, r, cfg.clocks, "after draining"));
    }
    free(tl);
    eng_fini(&run);
    sfb__loopback_close(&lb);
    sfb_topo_close(&topo);
    return 0;
}

static int test_clock_p4(void)
{
    return run_relay(4, 1);
}

static int test_clock_p8(void)
{
    return run_relay(8, 1);
}

static int test_clock_p16(void)
{
    return run_relay(16, 1);
}

static int test_eager_p8(void)
{
    return run_relay(8, 0);
}

static int test_eager_p16(void)
{
    return run_relay(16, 0);
}

/* Updates in parts (managed communication) over the relays, with a slow
 * rank and SSP: every part reaches every rank exactly once, every bundle
 * holds its parts in the policy's order and within the message cap, and
 * every replica ends equal to the reference (the parts sum to the update,
 * so a lost or doubled part shows). */
static int run_parts(uint32_t world, int flush_clock, int priority)
{
    struct eng_cfg cfg = {.ops = &sfb__broadcast_ops,
                          .world = world,
                          .k = 3,
                          .d = 5,
                          .s = 4,
                          .clocks = 8,
                          .staleness = 3,
                          .apply_early = 1,
                          .topology = "halton",
                          .flush_clock = flush_clock,
                          .slow_rank = 1,
                          .slow_yields = 3,
                          .priority = priority,
                          .part_bytes = 1, /* a sample a part: 4 parts */
                          .msg_cap = 300}; /* two or three parts a message */
    struct eng_run run;
    struct sfb__loopback *lb = NULL;
    ASSERT_OK(eng_init(&run, &cfg, &lb));
    struct tally *tl = calloc(1, sizeof *tl);
    ASSERT(tl);
    tl->nparts = 4;
    tl->by_priority = priority != 0;
    sfb__loopback_set_tap(lb, tap, tl);
    int rets[ENG_MAX_RANKS];
    ASSERT_OK(sfb__loopback_run(lb, eng_rank_main, &run, rets));
    for (uint32_t r = 0; r < world; r++) ASSERT_EQ(rets[r], 0);
    if (exactly_once(tl, world, cfg.clocks)) return 1;
    ASSERT_EQ(tl->misordered, 0);
    ASSERT_LE(tl->largest, 300);
    for (uint32_t r = 0; r < world; r++) {
        ASSERT(eng_replica_is(&run, r, cfg.clocks, "after draining"));
        for (uint32_t o = 0; o < world; o++) ASSERT_EQ(run.r[r].per_origin[o], o == r ? 0 : cfg.clocks);
    }
    free(tl);
    eng_fini(&run);
    sfb__loopback_close(&lb);
    return 0;
}

static int test_parts_eager(void)
{
    for (int p = 0; p < 3; p++) ASSERT_OK(run_parts(8, 0, p));
    return 0;
}

static int test_parts_clock(void)
{
    for (int p = 0; p < 3; p++) ASSERT_OK(run_parts(8, 1, p));
    return 0;
}

/* The same run twice: the same frames, in the same messages. */
static int test_deterministic(void)
{
    uint64_t first[2][ENG_MAX_RANKS] = {{0}};
    for (int round = 0; round < 2; round++) {
        struct eng_cfg cfg = {.ops = &sfb__broadcast_ops,
                              .world = 8,
                              .k = 3,
                              .d = 5,
                              .s = 2,
                              .clocks = 6,
                              .staleness = 2,
                              .apply_early = 1,
                              .topology = "halton",
                              .slow_rank = 3,
                              .slow_yields = 2};
        struct eng_run run;
        struct sfb__loopback *lb = NULL;
        ASSERT_OK(eng_init(&run, &cfg, &lb));
        ASSERT_OK(sfb__loopback_run(lb, eng_rank_main, &run, NULL));
        for (uint32_t r = 0; r < cfg.world; r++) {
            struct sfb__loopback_stats st;
            sfb__loopback_stats(lb, r, &st);
            if (round == 0) {
                first[0][r] = st.sent_msgs;
                first[1][r] = st.sent_bytes;
            } else {
                ASSERT_EQ(st.sent_msgs, first[0][r]);
                ASSERT_EQ(st.sent_bytes, first[1][r]);
            }
            ASSERT(eng_replica_is(&run, r, cfg.clocks, "after draining"));
        }
        eng_fini(&run);
        sfb__loopback_close(&lb);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        {"clock_p4", test_clock_p4},   {"clock_p8", test_clock_p8},
        {"clock_p16", test_clock_p16}, {"eager_p8", test_eager_p8},
        {"eager_p16", test_eager_p16}, {"deterministic", test_deterministic},
        {"parts_eager", test_parts_eager}, {"parts_clock", test_parts_clock},
    };
    return test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
}
