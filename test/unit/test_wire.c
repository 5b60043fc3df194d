/* Wire format: round trips, every rejection reason, bundles. */
#include "src/base/util.h"
#include "src/wire/wire.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <xxhash.h>

static const struct sfb__wire_shape shapes[] = {{10, 784}, {3, 4}};
static struct sfb__wire_stats stats;
static const struct sfb__wire_job job = {
    .job_key = 0x1122334455667788ull,
    .world_size = 4,
    .shapes = shapes,
    .nshapes = 2,
    .max_s = 64,
    .max_payload = 1 << 20,
    .stats = &stats,
};

static uint8_t frame[SFB_WIRE_HDR_SIZE + 4096];

/* An SF frame for matrix 1 (3×5), S = 2, dense f32: 2·(3+5)·4 = 64 bytes. */
static size_t make_sf(uint8_t *out, struct sfb__wire_hdr *h)
{
    memset(h, 0, sizeof *h);
    h->type = SFB_WIRE_SF;
    h->job_key = job.job_key;
    h->origin = 2;
    h->sender = 3;
    h->clock = -7;
    h->matrix = 1;
    h->k = 3;
    h->d = 4; /* 8 + S·(K+D)·4 = 64 payload bytes (sfb/codec.h) */
    h->s = 2;
    h->payload_len = 64;
    for (int i = 0; i < 64; i++) out[SFB_WIRE_HDR_SIZE + i] = (uint8_t)(i * 7 + 1);
    /* Payload in two pieces: the checksum is streamed. */
    struct sfb__wire_piece p[2] = {{out + SFB_WIRE_HDR_SIZE, 10}, {out + SFB_WIRE_HDR_SIZE + 10, 54}};
    if (sfb__wire_encode(h, p, 2, out)) return 0;
    return SFB_WIRE_HDR_SIZE + 64;
}

static uint64_t rej(enum sfb__wire_reason r)
{
    return atomic_load(&stats.rejected[r]);
}

static int test_roundtrip(void)
{
    struct sfb__wire_hdr h, d;
    size_t n = make_sf(frame, &h);
    ASSERT_EQ(n, 128);
    /* Explicit little-endian layout. */
    ASSERT_EQ(frame[0], 'S');
    ASSERT_EQ(frame[3], 'W');
    ASSERT_EQ(frame[6], SFB_WIRE_SF);
    ASSERT_EQ(frame[8], 0x88);
    ASSERT_EQ(frame[24], 0xf9); /* clock -7 */
    ASSERT_EQ(frame[31], 0xff);
    uint64_t acc = atomic_load(&stats.accepted);
    const uint8_t *pl = NULL;
    ASSERT_OK(sfb__wire_decode(&job, frame, n, 3, &d, &pl));
    ASSERT_EQ(atomic_load(&stats.accepted), acc + 1);
    ASSERT_EQ(d.type, SFB_WIRE_SF);
    ASSERT_EQ(d.origin, 2);
    ASSERT_EQ(d.sender, 3);
    ASSERT_EQ(d.clock, -7);
    ASSERT_EQ(d.matrix, 1);
    ASSERT_EQ(d.k, 3);
    ASSERT_EQ(d.d, 4);
    ASSERT_EQ(d.s, 2);
    ASSERT_EQ(d.payload_len, 64);
    ASSERT(pl == frame + SFB_WIRE_HDR_SIZE);
    /* The same checksum from one piece. */
    uint8_t again[SFB_WIRE_HDR_SIZE];
    struct sfb__wire_piece one = {frame + SFB_WIRE_HDR_SIZE, 64};
    ASSERT_OK(sfb__wire_encode(&h, &one, 1, again));
    ASSERT(memcmp(again, frame, SFB_WIRE_HDR_SIZE) == 0);
    /* Pieces that disagree with payload_len are refused. */
    one.n = 63;
    ASSERT_EQ(sfb__wire_encode(&h, &one, 1, again), -EINVAL);
    /* The checksum fed as the payload is produced, in pieces of any size:
     * the same header bytes; fed other than payload_len bytes: refused. */
    for (size_t step = 1; step <= 64; step *= 4) {
        struct sfb__wire_hash hs;
        ASSERT_OK(sfb__wire_hash_begin(&hs, &h));
        for (size_t off = 0; off < 64; off += step)
            sfb__wire_hash_update(&hs, frame + SFB_WIRE_HDR_SIZE + off, SFB_MIN(step, 64 - off));
        memset(again, 0, sizeof again);
        ASSERT_OK(sfb__wire_encode_hashed(&h, &hs, again));
        ASSERT(memcmp(again, frame, SFB_WIRE_HDR_SIZE) == 0);
    }
    struct sfb__wire_hash hs;
    ASSERT_OK(sfb__wire_hash_begin(&hs, &h));
    sfb__wire_hash_update(&hs, frame + SFB_WIRE_HDR_SIZE, 63);
    ASSERT_EQ(sfb__wire_encode_hashed(&h, &hs, again), -EINVAL);
    /* a payload byte other than the one hashed: the receiver's check fails */
    ASSERT_OK(sfb__wire_hash_begin(&hs, &h));
    sfb__wire_hash_update(&hs, frame + SFB_WIRE_HDR_SIZE, 64);
    ASSERT_OK(sfb__wire_encode_hashed(&h, &hs, again));
    memcpy(frame, again, SFB_WIRE_HDR_SIZE);
    frame[SFB_WIRE_HDR_SIZE + 5] ^= 1;
    uint64_t bad = rej(SFB_WIRE_R_CHECKSUM);
    ASSERT_EQ(sfb__wire_decode(&job, frame, n, 3, &d, &pl), -SFB_ECHECKSUM);
    ASSERT_EQ(rej(SFB_WIRE_R_CHECKSUM), bad + 1);
    frame[SFB_WIRE_HDR_SIZE + 5] ^= 1;
    /* a BUNDLE's checksum covers its header alone: not this way */
    struct sfb__wire_hdr b = {.type = SFB_WIRE_BUNDLE, .job_key = job.job_key};
    ASSERT_EQ(sfb__wire_hash_begin(&hs, &b), -EINVAL);
    return 0;
}

static int test_control_and_data(void)
{
    struct sfb__wire_hdr h = {.type = SFB_WIRE_ABORT, .job_key = job.job_key, .origin = 1,
                             .sender = 1, .payload_len = 5};
    struct sfb__wire_piece p = {"boom!", 5};
    ASSERT_OK(sfb__wire_encode(&h, &p, 1, frame));
    memcpy(frame + SFB_WIRE_HDR_SIZE, "boom!", 5);
    struct sfb__wire_hdr d;
    const uint8_t *pl;
    ASSERT_OK(sfb__wire_decode(&job, frame, SFB_WIRE_HDR_SIZE + 5, 1, &d, &pl));
    ASSERT(memcmp(pl, "boom!", 5) == 0);
    /* LOST (elastic jobs): exactly 4 bytes, a rank */
    for (uint64_t len = 3; len <= 5; len++) {
        h = (struct sfb__wire_hdr){.type = SFB_WIRE_LOST, .job_key = job.job_key, .origin = 1,
                                   .sender = 1, .payload_len = len};
        struct sfb__wire_piece lp = {"\2\0\0\0\0", (size_t)len};
        ASSERT_OK(sfb__wire_encode(&h, &lp, 1, frame));
        memcpy(frame + SFB_WIRE_HDR_SIZE, "\2\0\0\0\0", (size_t)len);
        int want = len == 4 ? 0 : -EMSGSIZE;
        ASSERT_EQ(sfb__wire_decode(&job, frame, SFB_WIRE_HDR_SIZE + len, 1, &d, &pl), want);
    }
    ASSERT(strcmp(sfb__wire_type_name(SFB_WIRE_LOST), "LOST") == 0);
    /* Empty DATA frame. */
    h = (struct sfb__wire_hdr){.type = SFB_WIRE_DATA, .job_key = job.job_key};
    ASSERT_OK(sfb__wire_encode(&h, NULL, 0, frame));
    ASSERT_OK(sfb__wire_decode(&job, frame, SFB_WIRE_HDR_SIZE, 0, &d, &pl));
    ASSERT_EQ(d.payload_len, 0);
    /* A control frame with a shape is rejected. */
    h = (struct sfb__wire_hdr){.type = SFB_WIRE_HEARTBEAT, .job_key = job.job_key, .k = 1};
    ASSERT_OK(sfb__wire_encode(&h, NULL, 0, frame));
    ASSERT_EQ(sfb__wire_decode(&job, frame, SFB_WIRE_HDR_SIZE, 0, &d, &pl), -SFB_ESHAPE);
    /* DENSE_ROWS: rows 8..9 of matrix 0. */
    h = (struct sfb__wire_hdr){.type = SFB_WIRE_DENSE_ROWS, .job_key = job.job_key, .k = 2,
                              .d = 784, .s = 8, .payload_len = 2 * 784 * 4};
    static uint8_t big[SFB_WIRE_HDR_SIZE + 2 * 784 * 4];
    struct sfb__wire_piece bp = {big + SFB_WIRE_HDR_SIZE, 2 * 784 * 4};
    ASSERT_OK(sfb__wire_encode(&h, &bp, 1, big));
    ASSERT_OK(sfb__wire_decode(&job, big, sizeof big, 0, &d, &pl));
    h.s = 9; /* rows 9..10 exceed K = 10 */
    ASSERT_OK(sfb__wire_encode(&h, &bp, 1, big));
    ASSERT_EQ(sfb__wire_decode(&job, big, sizeof big, 0, &d, &pl), -SFB_ESHAPE);
    return 0;
}

/* DENSE_ROWS flagged FACTORS (FMS's push of factors): float32 only, exactly
 * the prefix and n·(K + D) numbers for some 1 ≤ n ≤ max_s, n read back;
 * the flag refused on other types. */
static int factors_decode(uint32_t n, uint64_t extra, uint8_t prec, uint8_t type)
{
    static uint8_t buf[SFB_WIRE_HDR_SIZE + 8 + 65 * (3 + 4) * 4 + 8];
    uint64_t len = type == SFB_WIRE_DENSE_ROWS ? 8 + (uint64_t)n * (3 + 4) * 4 + extra : 8;
    struct sfb__wire_hdr h = {.type = type, .flags = (uint8_t)(SFB_WIRE_F_FACTORS |
                                                               prec << SFB_WIRE_F_PREC_SHIFT),
                              .job_key = job.job_key, .matrix = 1, .k = 3, .d = 4, .s = 0,
                              .payload_len = len};
    if (type == SFB_WIRE_SF) h.s = 1;
    struct sfb__wire_piece p = {buf + SFB_WIRE_HDR_SIZE, (size_t)len};
    if (sfb__wire_encode(&h, &p, 1, buf)) return -1000;
    struct sfb__wire_hdr d;
    const uint8_t *pl;
    int rc = sfb__wire_decode(&job, buf, SFB_WIRE_HDR_SIZE + (size_t)len, 2, &d, &pl);
    if (rc == 0 && sfb__wire_factor_samples(&d) != n) return -1001;
    return rc;
}

static int test_factors(void)
{
    ASSERT_OK(factors_decode(1, 0, SFB_WIRE_F32, SFB_WIRE_DENSE_ROWS));
    ASSERT_OK(factors_decode(64, 0, SFB_WIRE_F32, SFB_WIRE_DENSE_ROWS));
    ASSERT_EQ(factors_decode(65, 0, SFB_WIRE_F32, SFB_WIRE_DENSE_ROWS), -EMSGSIZE); /* > max_s */
    ASSERT_EQ(factors_decode(0, 0, SFB_WIRE_F32, SFB_WIRE_DENSE_ROWS), -EMSGSIZE);
    ASSERT_EQ(factors_decode(2, 4, SFB_WIRE_F32, SFB_WIRE_DENSE_ROWS), -EMSGSIZE); /* a part */
    ASSERT_EQ(factors_decode(2, 0, SFB_WIRE_BF16, SFB_WIRE_DENSE_ROWS), -SFB_ESHAPE);
    ASSERT_EQ(factors_decode(2, 0, SFB_WIRE_F32, SFB_WIRE_SF), -EBADMSG);
    return 0;
}

/* Mutates one header field of a valid frame (re-encoding so only that field
 * is wrong) and expects `code` and one more count for `r`. */
static int expect_reject(const struct sfb__wire_hdr *h, size_t len_delta, int code,
                         enum sfb__wire_reason r)
{
    uint8_t *buf = malloc(SFB_WIRE_HDR_SIZE + 64 + 16);
    if (!buf) return 1;
    memcpy(buf, frame, SFB_WIRE_HDR_SIZE + 64);
    struct sfb__wire_piece p = {buf + SFB_WIRE_HDR_SIZE, 64};
    struct sfb__wire_hdr hh = *h;
    uint64_t pl_len = hh.payload_len;
    hh.payload_len = 64;
    sfb__wire_encode(&hh, &p, 1, buf);
    /* Lying payload_len: patch the field after encoding. */
    for (int i = 0; i < 8; i++) buf[48 + i] = (uint8_t)(pl_len >> (8 * i));
    uint64_t before = rej(r);
    struct sfb__wire_hdr d;
    const uint8_t *pl;
    int rc = sfb__wire_decode(&job, buf, SFB_WIRE_HDR_SIZE + 64 + len_delta, 3, &d, &pl);
    free(buf);
    ASSERT_EQ(rc, code);
    ASSERT_EQ(rej(r), before + 1);
    ASSERT_STR_CONTAINS(sfb_last_error(), "from rank 3");
    ASSERT_STR_CONTAINS(sfb_last_error(), sfb__wire_reason_name(r));
    return 0;
}

/* A part (flag bit 2): the payload is 8 prefix bytes longer; the prefix
 * is read back, validated after the checksum, and the flag is refused on
 * frames that are not SF. */
static int part_frame(uint8_t *out, uint32_t index, uint32_t count, float prio, uint8_t flags,
                      uint8_t type, size_t *len)
{
    struct sfb__wire_hdr h;
    memset(&h, 0, sizeof h);
    h.type = type;
    h.flags = flags;
    h.job_key = job.job_key;
    h.origin = 1;
    h.sender = 1;
    h.clock = 5;
    if (type == SFB_WIRE_SF) {
        h.matrix = 1;
        h.k = 3;
        h.d = 4;
        h.s = 2;
    }
    h.payload_len = 72;
    struct sfb__wire_part part = {index, count, prio};
    sfb__wire_put_part(out + SFB_WIRE_HDR_SIZE, &part);
    for (int i = 8; i < 72; i++) out[SFB_WIRE_HDR_SIZE + i] = (uint8_t)i;
    struct sfb__wire_piece pl = {out + SFB_WIRE_HDR_SIZE, 72};
    *len = SFB_WIRE_HDR_SIZE + 72;
    return sfb__wire_encode(&h, &pl, 1, out);
}

static int test_parts(void)
{
    uint8_t buf[SFB_WIRE_HDR_SIZE + 72];
    size_t n;
    struct sfb__wire_hdr d;
    const uint8_t *pl;
    ASSERT_OK(part_frame(buf, 3, 7, 2.5f, SFB_WIRE_F_PART, SFB_WIRE_SF, &n));
    ASSERT_OK(sfb__wire_decode(&job, buf, n, 1, &d, &pl));
    struct sfb__wire_part part;
    sfb__wire_part(&d, pl, &part);
    ASSERT(part.index == 3 && part.count == 7 && part.priority == 2.5f);
    uint64_t sf_len;
    const uint8_t *sf = sfb__wire_sf_payload(&d, pl, &sf_len);
    ASSERT(sf == pl + SFB_WIRE_PART_PREFIX && sf_len == 64);
    /* the same payload without the flag is 8 bytes too long */
    ASSERT_OK(part_frame(buf, 3, 7, 2.5f, 0, SFB_WIRE_SF, &n));
    ASSERT_EQ(sfb__wire_decode(&job, buf, n, 1, &d, &pl), -EMSGSIZE);
    /* a frame that is not a part reads as part 0 of 1 */
    size_t m = make_sf(frame, &d);
    ASSERT_OK(sfb__wire_decode(&job, frame, m, 1, &d, &pl));
    sfb__wire_part(&d, pl, &part);
    ASSERT(part.index == 0 && part.count == 1 && part.priority == 0);
    /* bad prefixes: index >= count, count 0 or > 64, priority NaN or < 0 */
    const struct {
        uint32_t index, count;
        float prio;
    } bad[] = {{7, 7, 1}, {0, 0, 1}, {0, 65, 1}, {0, 2, NAN}, {0, 2, -1}, {0, 2, INFINITY}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_OK(part_frame(buf, bad[i].index, bad[i].count, bad[i].prio, SFB_WIRE_F_PART,
                             SFB_WIRE_SF, &n));
        uint64_t before = rej(SFB_WIRE_R_SHAPE);
        ASSERT_EQ(sfb__wire_decode(&job, buf, n, 1, &d, &pl), -SFB_ESHAPE);
        ASSERT_EQ(rej(SFB_WIRE_R_SHAPE), before + 1);
    }
    ASSERT_OK(part_frame(buf, 63, 64, 0, SFB_WIRE_F_PART, SFB_WIRE_SF, &n));
    ASSERT_OK(sfb__wire_decode(&job, buf, n, 1, &d, &pl));
    /* only SF frames have parts */
    ASSERT_OK(part_frame(buf, 0, 2, 1, SFB_WIRE_F_PART, SFB_WIRE_DATA, &n));
    ASSERT_EQ(sfb__wire_decode(&job, buf, n, 1, &d, &pl), -SFB_ESHAPE);
    return 0;
}

static int test_rejects(void)
{
    struct sfb__wire_hdr h, bad;
    size_t n = make_sf(frame, &h);
    ASSERT_EQ(n, 128);

    bad = h;
    bad.job_key ^= 1;
    ASSERT_OK(expect_reject(&bad, 0, -SFB_EJOBKEY, SFB_WIRE_R_JOBKEY));
    bad = h;
    bad.origin = 4;
    ASSERT_OK(expect_reject(&bad, 0, -ERANGE, SFB_WIRE_R_RANK));
    bad = h;
    bad.sender = 1000;
    ASSERT_OK(expect_reject(&bad, 0, -ERANGE, SFB_WIRE_R_RANK));
    bad = h;
    bad.k = 4; /* matrix 1 is 3×5 */
    ASSERT_OK(expect_reject(&bad, 0, -SFB_ESHAPE, SFB_WIRE_R_SHAPE));
    bad = h;
    bad.matrix = 2;
    ASSERT_OK(expect_reject(&bad, 0, -SFB_ESHAPE, SFB_WIRE_R_SHAPE));
    bad = h;
    bad.s = 65;
    ASSERT_OK(expect_reject(&bad, 0, -SFB_ESHAPE, SFB_WIRE_R_SHAPE));
    bad = h;
    bad.flags = 0x80;
    ASSERT_OK(expect_reject(&bad, 0, -EBADMSG, SFB_WIRE_R_FLAGS));
    /* Fields that sfb__wire_encode would fix up are patched in the bytes. */
    {
        uint8_t buf[SFB_WIRE_HDR_SIZE + 64];
        memcpy(buf, frame, sizeof buf);
        buf[6] = 99;
        struct sfb__wire_hdr d;
        const uint8_t *pl;
        uint64_t before = rej(SFB_WIRE_R_TYPE);
        ASSERT_EQ(sfb__wire_decode(&job, buf, sizeof buf, 1, &d, &pl), -EPROTO);
        ASSERT_EQ(rej(SFB_WIRE_R_TYPE), before + 1);
        memcpy(buf, frame, sizeof buf);
        buf[0] ^= 0xff; /* magic */
        before = rej(SFB_WIRE_R_MAGIC);
        ASSERT_EQ(sfb__wire_decode(&job, buf, sizeof buf, 1, &d, &pl), -SFB_EFORMAT);
        ASSERT_EQ(rej(SFB_WIRE_R_MAGIC), before + 1);
        memcpy(buf, frame, sizeof buf);
        buf[4] = SFB_WIRE_VERSION + 1; /* version */
        before = rej(SFB_WIRE_R_VERSION);
        ASSERT_EQ(sfb__wire_decode(&job, buf, sizeof buf, 1, &d, &pl), -SFB_EVERSION);
        ASSERT_EQ(rej(SFB_WIRE_R_VERSION), before + 1);
        memcpy(buf, frame, sizeof buf);
        buf[SFB_WIRE_HDR_SIZE + 17] ^= 0x10; /* payload byte */
        before = rej(SFB_WIRE_R_CHECKSUM);
        ASSERT_EQ(sfb__wire_decode(&job, buf, sizeof buf, 1, &d, &pl), -SFB_ECHECKSUM);
        ASSERT_EQ(rej(SFB_WIRE_R_CHECKSUM), before + 1);
        memcpy(buf, frame, sizeof buf);
        buf[24] ^= 0x01; /* clock: the header is covered by the checksum too */
        ASSERT_EQ(sfb__wire_decode(&job, buf, sizeof buf, 1, &d, &pl), -SFB_ECHECKSUM);
        /* Too short for a header. */
        before = rej(SFB_WIRE_R_TRUNC);
        ASSERT_EQ(sfb__wire_decode(&job, buf, 63, 1, &d, &pl), -SFB_ETRUNC);
        ASSERT_EQ(rej(SFB_WIRE_R_TRUNC), before + 1);
    }
    /* payload_len says 64 but only 60 bytes are there / 8 bytes trail. */
    ASSERT_OK(expect_reject(&h, (size_t)-4, -SFB_ETRUNC, SFB_WIRE_R_TRUNC));
    ASSERT_OK(expect_reject(&h, 8, -EMSGSIZE, SFB_WIRE_R_LENGTH));
    /* payload_len lies: inconsistent with the shape, or absurdly large. */
    bad = h;
    bad.payload_len = 60;
    ASSERT_OK(expect_reject(&bad, 0, -EMSGSIZE, SFB_WIRE_R_LENGTH));
    bad.payload_len = UINT64_MAX;
    ASSERT_OK(expect_reject(&bad, 0, -EMSGSIZE, SFB_WIRE_R_LENGTH));
    return 0;
}

/* A bundle of n inner frames built from `inner` (each inner_len bytes). */
static size_t make_bundle(uint8_t *out, const uint8_t *inner, size_t inner_len, int n,
                          size_t extra_tail)
{
    size_t pl = (size_t)n * inner_len + extra_tail;
    for (int i = 0; i < n; i++) memcpy(out + SFB_WIRE_HDR_SIZE + i * inner_len, inner, inner_len);
    memset(out + SFB_WIRE_HDR_SIZE + n * inner_len, 0xab, extra_tail);
    struct sfb__wire_hdr b = {.type = SFB_WIRE_BUNDLE, .job_key = job.job_key, .origin = 0,
                             .sender = 1, .payload_len = pl};
    struct sfb__wire_piece p = {out + SFB_WIRE_HDR_SIZE, pl};
    sfb__wire_encode(&b, &p, 1, out);
    return SFB_WIRE_HDR_SIZE + pl;
}

static int test_bundle(void)
{
    struct sfb__wire_hdr h, d, ih;
    uint8_t inner[128];
    ASSERT_EQ(make_sf(inner, &h), 128);
    static uint8_t b[4096];
    size_t n = make_bundle(b, inner, 128, 3, 0);
    const uint8_t *pl, *f, *ipl;
    size_t flen;
    ASSERT_OK(sfb__wire_decode(&job, b, n, 1, &d, &pl));
    ASSERT_EQ(d.type, SFB_WIRE_BUNDLE);
    struct sfb__wire_iter it;
    sfb__wire_bundle_begin(&it, pl, d.payload_len, 1);
    int count = 0, rc;
    while ((rc = sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl)) == 1) {
        ASSERT_EQ(flen, 128);
        ASSERT(memcmp(f, inner, 128) == 0); /* byte-for-byte slice */
        ASSERT(f == pl + count * 128);
        ASSERT_EQ(ih.clock, -7);
        count++;
    }
    ASSERT_EQ(rc, 0);
    ASSERT_EQ(count, 3);

    /* Trailing garbage shorter than a header. */
    n = make_bundle(b, inner, 128, 2, 10);
    ASSERT_OK(sfb__wire_decode(&job, b, n, 1, &d, &pl));
    sfb__wire_bundle_begin(&it, pl, d.payload_len, 1);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), 1);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), 1);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), -SFB_ETRUNC);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), 0);

    /* Inner frame claims more payload than the bundle holds. */
    uint8_t liar[128];
    memcpy(liar, inner, 128);
    liar[48] = 200;
    n = make_bundle(b, liar, 128, 1, 0);
    ASSERT_OK(sfb__wire_decode(&job, b, n, 1, &d, &pl));
    sfb__wire_bundle_begin(&it, pl, d.payload_len, 1);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), -SFB_ETRUNC);

    /* Corrupted inner frame: its own checksum catches it. */
    memcpy(liar, inner, 128);
    liar[100] ^= 1;
    n = make_bundle(b, liar, 128, 1, 0);
    ASSERT_OK(sfb__wire_decode(&job, b, n, 1, &d, &pl));
    sfb__wire_bundle_begin(&it, pl, d.payload_len, 1);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), -SFB_ECHECKSUM);

    /* A bundle's checksum covers its header alone (wire version 2): a byte
     * flipped in an inner frame after the bundle was built passes the
     * bundle's check and fails the inner frame's; one flipped in the
     * bundle's header fails the bundle. */
    n = make_bundle(b, inner, 128, 2, 0);
    b[SFB_WIRE_HDR_SIZE + 128 + 100] ^= 1;
    ASSERT_OK(sfb__wire_decode(&job, b, n, 1, &d, &pl));
    sfb__wire_bundle_begin(&it, pl, d.payload_len, 1);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), 1);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), -SFB_ECHECKSUM);
    b[SFB_WIRE_HDR_SIZE + 128 + 100] ^= 1;
    b[20] ^= 1; /* sender */
    ASSERT_EQ(sfb__wire_decode(&job, b, n, 1, &d, &pl), -SFB_ECHECKSUM);

    /* Nested bundle. */
    static uint8_t inner_bundle[512];
    size_t ibl = make_bundle(inner_bundle, inner, 128, 1, 0);
    n = make_bundle(b, inner_bundle, ibl, 1, 0);
    ASSERT_OK(sfb__wire_decode(&job, b, n, 1, &d, &pl));
    sfb__wire_bundle_begin(&it, pl, d.payload_len, 1);
    uint64_t before = rej(SFB_WIRE_R_NESTED);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), -ELOOP);
    ASSERT_EQ(rej(SFB_WIRE_R_NESTED), before + 1);

    /* Empty bundle. */
    n = make_bundle(b, inner, 128, 0, 0);
    ASSERT_OK(sfb__wire_decode(&job, b, n, 1, &d, &pl));
    sfb__wire_bundle_begin(&it, pl, d.payload_len, 1);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), 0);
    return 0;
}

/* Random byte flips and truncations never crash and are always rejected. */
/* Whether an SF frame of matrix 1 (3×4) with this S, flags and payload_len
 * passes the header checks (the payload all zeros). */
static int sf_len_ok(uint32_t s, uint8_t flags, uint64_t len)
{
    static uint8_t buf[SFB_WIRE_HDR_SIZE + 256];
    struct sfb__wire_hdr h = {.type = SFB_WIRE_SF, .flags = flags, .job_key = job.job_key,
                              .origin = 1, .sender = 1, .matrix = 1, .k = 3, .d = 4, .s = s,
                              .payload_len = len};
    memset(buf, 0, sizeof buf);
    struct sfb__wire_piece p = {buf + SFB_WIRE_HDR_SIZE, len};
    if (len > 256 || sfb__wire_encode(&h, &p, 1, buf)) return -1;
    struct sfb__wire_hdr d;
    enum sfb__wire_reason why;
    return sfb__wire_check_header(&job, buf, SFB_WIRE_HDR_SIZE + len, &d, &why) == 0;
}

/* Precision bits 4..5: a bf16 (e = 2) SF payload is 8 + S·K·2 + (dense)
 * S·D·2 or (CSR) (S+1)·4 + nnz·6, then zero bytes to a multiple of 4; a
 * float32 one as before. A bundle's inner frames are whole 4-byte words,
 * so a float32 payload behind any of them stays aligned. */
static int test_precision(void)
{
    const uint8_t B = SFB_WIRE_BF16 << SFB_WIRE_F_PREC_SHIFT, SP = SFB_WIRE_F_SPARSE;
    ASSERT_EQ(sfb__wire_elem_size(B), 2);
    ASSERT_EQ(sfb__wire_elem_size(0), 4);
    ASSERT_EQ(sf_len_ok(1, 0, 36), 1);  /* f32 dense: 8 + 7·4 */
    ASSERT_EQ(sf_len_ok(1, B, 24), 1);  /* bf16 dense: 8 + 7·2 = 22, padded */
    ASSERT_EQ(sf_len_ok(1, B, 22), 0);
    ASSERT_EQ(sf_len_ok(1, B, 26), 0);
    ASSERT_EQ(sf_len_ok(2, B, 36), 1);  /* 8 + 14·2: no padding */
    ASSERT_EQ(sf_len_ok(2, B, 40), 0);
    /* CSR, S = 1: 22 bytes before the pairs; nnz 0..4 */
    const uint64_t csr_ok[] = {24, 28, 36, 40, 48}; /* 22, 28, 34, 40, 46 padded */
    for (uint64_t len = 20; len <= 56; len++) {
        int want = 0;
        for (size_t i = 0; i < SFB_ARRAY_LEN(csr_ok); i++) want |= len == csr_ok[i];
        ASSERT_EQ(sf_len_ok(1, B | SP, len), want);
    }
    ASSERT_EQ(sf_len_ok(1, SP, 8 + 12 + 8 + 8), 1); /* f32 CSR, nnz 1 */
    ASSERT_EQ(sf_len_ok(1, SP, 8 + 12 + 8 + 6), 0);
    /* a bundle holding an inner frame of 5 payload bytes: refused there */
    uint8_t inner[SFB_WIRE_HDR_SIZE + 8] = {0};
    struct sfb__wire_hdr dh = {.type = SFB_WIRE_DATA, .job_key = job.job_key, .origin = 1,
                               .sender = 1, .payload_len = 5};
    struct sfb__wire_piece dp = {inner + SFB_WIRE_HDR_SIZE, 5};
    ASSERT_OK(sfb__wire_encode(&dh, &dp, 1, inner));
    static uint8_t b[1024];
    size_t n = make_bundle(b, inner, SFB_WIRE_HDR_SIZE + 5, 2, 0);
    struct sfb__wire_hdr d, ih;
    const uint8_t *pl, *f, *ipl;
    size_t flen;
    ASSERT_OK(sfb__wire_decode(&job, b, n, 1, &d, &pl));
    struct sfb__wire_iter it;
    sfb__wire_bundle_begin(&it, pl, d.payload_len, 1);
    uint64_t before = rej(SFB_WIRE_R_LENGTH);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), -EMSGSIZE);
    ASSERT_EQ(rej(SFB_WIRE_R_LENGTH), before + 1);
    ASSERT_EQ(sfb__wire_bundle_next(&job, &it, &f, &flen, &ih, &ipl), 0);
    return 0;
}

static int test_random_corruption(void)
{
    struct sfb__wire_hdr h, d;
    size_t n = make_sf(frame, &h);
    uint8_t buf[128];
    unsigned seed = 12345;
    for (int i = 0; i < 20000; i++) {
        memcpy(buf, frame, n);
        seed = seed * 1103515245u + 12345u;
        size_t pos = (seed >> 8) % n;
        uint8_t x = (uint8_t)(1u << ((seed >> 4) & 7));
        buf[pos] ^= x;
        size_t len = (seed & 0x10000) ? n : (seed >> 3) % n;
        const uint8_t *pl;
        int rc = sfb__wire_decode(&job, buf, len, 0, &d, &pl);
        ASSERT_LT(rc, 0);
    }
    return 0;
}

/* The checksum is XXH3-64 of the header (checksum field zero) and the
 * payload, whichever kernels computed it (src/wire/xxh3_avx2.c where the
 * processor has AVX2, libxxhash's otherwise), for payloads of every length
 * class of XXH3 (short, mid, long with a partial stripe and block) fed in
 * pieces of any size, streamed or at once. */
static int test_checksum_is_xxh3(void)
{
    static const size_t lens[] = {0, 1, 3, 16, 17, 128, 129, 240, 241, 1000, 1024, 4096,
                                  65543, 262157, 1048583};
    const size_t most = 1048583;
    uint8_t *buf = malloc(SFB_WIRE_HDR_SIZE + most);
    ASSERT(buf != NULL);
    unsigned seed = 7;
    for (size_t i = 0; i < SFB_WIRE_HDR_SIZE + most; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (uint8_t)(seed >> 16);
    }
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        struct sfb__wire_hdr h;
        memset(&h, 0, sizeof h);
        h.type = SFB_WIRE_DATA;
        h.job_key = job.job_key;
        h.payload_len = lens[k];
        uint8_t *pl = buf + SFB_WIRE_HDR_SIZE;
        size_t cut = lens[k] / 3, cut2 = lens[k] - lens[k] / 7;
        struct sfb__wire_piece p[3] = {{pl, cut}, {pl + cut, cut2 - cut}, {pl + cut2, lens[k] - cut2}};
        uint8_t out[SFB_WIRE_HDR_SIZE];
        ASSERT_EQ(sfb__wire_encode(&h, p, 3, out), 0);
        struct sfb__wire_hash hs;
        ASSERT_EQ(sfb__wire_hash_begin(&hs, &h), 0);
        for (size_t off = 0; off < lens[k]; off += 4099)
            sfb__wire_hash_update(&hs, pl + off, SFB_MIN((size_t)4099, lens[k] - off));
        uint8_t out2[SFB_WIRE_HDR_SIZE];
        ASSERT_EQ(sfb__wire_encode_hashed(&h, &hs, out2), 0);
        /* the reference: libxxhash at once over the frame, checksum zero */
        memcpy(buf, out, SFB_WIRE_HDR_SIZE);
        memset(buf + 56, 0, 8);
        uint64_t want = XXH3_64bits(buf, SFB_WIRE_HDR_SIZE + lens[k]);
        uint64_t got = 0, got2 = 0;
        for (int b = 7; b >= 0; b--) {
            got = got << 8 | out[56 + b];
            got2 = got2 << 8 | out2[56 + b];
        }
        ASSERT_EQ(got, want);
        ASSERT_EQ(got2, want);
    }
    free(buf);
    return 0;
}

static const struct test_case tests[] = {
    {"roundtrip", test_roundtrip},
    {"control_and_data", test_control_and_data},
    {"rejects", test_rejects},
    {"parts", test_parts},
    {"factors", test_factors},
    {"bundle", test_bundle},
    {"precision", test_precision},
    {"random_corruption", test_random_corruption},
    {"checksum_is_xxh3", test_checksum_is_xxh3},
};

TEST_MAIN(tests)
