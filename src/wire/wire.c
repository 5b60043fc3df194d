/* Frame encoding and validation. Bytes are assembled and read one by one
 * (explicit little-endian): untrusted input is never cast to a struct. */
#include "config.h"
#include "src/wire/wire.h"

#include "src/base/bytes.h"
#include "src/base/util.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no malloc */
#include <xxhash.h>

#if SFB_AVX2
#include "src/wire/xxh3_avx2.h"

/* The checksums run xxHash's AVX2 kernels where the processor has them
 * (xxh3_avx2.c), else libxxhash's. */
static int xxh3_avx2;

__attribute__((constructor)) static void xxh3_pick(void)
{
    __builtin_cpu_init();
    xxh3_avx2 = __builtin_cpu_supports("avx2");
}

static void xxh3_reset(XXH3_state_t *st)
{
    if (xxh3_avx2) sfb__xxh3_avx2_reset(st);
    else XXH3_64bits_reset(st);
}

static void xxh3_update(XXH3_state_t *st, const void *p, size_t n)
{
    if (xxh3_avx2) sfb__xxh3_avx2_update(st, p, n);
    else XXH3_64bits_update(st, p, n);
}

static uint64_t xxh3_digest(const XXH3_state_t *st)
{
    return xxh3_avx2 ? sfb__xxh3_avx2_digest(st) : XXH3_64bits_digest(st);
}
#else
#define xxh3_reset XXH3_64bits_reset
#define xxh3_update XXH3_64bits_update
#define xxh3_digest XXH3_64bits_digest
#endif

/* Field offsets (docs/wire.md). */
enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 4,
    OFF_TYPE = 6,
    OFF_FLAGS = 7,
    OFF_JOBKEY = 8,
    OFF_ORIGIN = 16,
    OFF_SENDER = 20,
    OFF_CLOCK = 24,
    OFF_MATRIX = 32,
    OFF_K = 36,
    OFF_D = 40,
    OFF_S = 44,
    OFF_PAYLOAD_LEN = 48,
    OFF_CHECKSUM = 56,
};

static const char *const reason_names[SFB_WIRE_NREASONS] = {
    [SFB_WIRE_R_TRUNC] = "truncated",  [SFB_WIRE_R_MAGIC] = "magic",
    [SFB_WIRE_R_VERSION] = "version",  [SFB_WIRE_R_TYPE] = "type",
    [SFB_WIRE_R_JOBKEY] = "job key",   [SFB_WIRE_R_RANK] = "rank",
    [SFB_WIRE_R_FLAGS] = "flags",      [SFB_WIRE_R_SHAPE] = "shape",
    [SFB_WIRE_R_LENGTH] = "length",    [SFB_WIRE_R_CHECKSUM] = "checksum",
    [SFB_WIRE_R_NESTED] = "nested bundle",
};

const char *sfb__wire_reason_name(enum sfb__wire_reason r)
{
    return (unsigned)r < SFB_WIRE_NREASONS ? reason_names[r] : "?";
}

int sfb__wire_reason_code(enum sfb__wire_reason r)
{
    switch (r) {
    case SFB_WIRE_R_TRUNC: return -SFB_ETRUNC;
    case SFB_WIRE_R_MAGIC: return -SFB_EFORMAT;
    case SFB_WIRE_R_VERSION: return -SFB_EVERSION;
    case SFB_WIRE_R_TYPE: return -EPROTO;
    case SFB_WIRE_R_JOBKEY: return -SFB_EJOBKEY;
    case SFB_WIRE_R_RANK: return -ERANGE;
    case SFB_WIRE_R_FLAGS: return -EBADMSG;
    case SFB_WIRE_R_SHAPE: return -SFB_ESHAPE;
    case SFB_WIRE_R_LENGTH: return -EMSGSIZE;
    case SFB_WIRE_R_CHECKSUM: return -SFB_ECHECKSUM;
    case SFB_WIRE_R_NESTED: return -ELOOP;
    default: return -EINVAL;
    }
}

const char *sfb__wire_type_name(unsigned type)
{
    static const char *const names[] = {"?",     "SF",  "BUNDLE",    "DENSE_ROWS", "HELLO",
                                        "BYE",   "HEARTBEAT", "ABORT", "DATA",       "LOST"};
    return type <= SFB_WIRE_TYPE_MAX ? names[type] : "?";
}

size_t sfb__wire_elem_size(uint8_t flags)
{
    static const size_t sz[4] = {4, 8, 2, 2};
    return sz[(flags & SFB_WIRE_F_PREC_MASK) >> SFB_WIRE_F_PREC_SHIFT];
}

static void pack(const struct sfb__wire_hdr *h, uint8_t *o)
{
    sfb__put_u32(o + OFF_MAGIC, SFB_WIRE_MAGIC);
    sfb__put_u16(o + OFF_VERSION, SFB_WIRE_VERSION);
    o[OFF_TYPE] = h->type;
    o[OFF_FLAGS] = h->flags;
    sfb__put_u64(o + OFF_JOBKEY, h->job_key);
    sfb__put_u32(o + OFF_ORIGIN, h->origin);
    sfb__put_u32(o + OFF_SENDER, h->sender);
    sfb__put_u64(o + OFF_CLOCK, (uint64_t)h->clock);
    sfb__put_u32(o + OFF_MATRIX, h->matrix);
    sfb__put_u32(o + OFF_K, h->k);
    sfb__put_u32(o + OFF_D, h->d);
    sfb__put_u32(o + OFF_S, h->s);
    sfb__put_u64(o + OFF_PAYLOAD_LEN, h->payload_len);
    sfb__put_u64(o + OFF_CHECKSUM, 0);
}

void sfb__wire_parse_header(const uint8_t in[SFB_WIRE_HDR_SIZE], struct sfb__wire_hdr *h)
{
    h->magic = sfb__get_u32(in + OFF_MAGIC);
    h->version = sfb__get_u16(in + OFF_VERSION);
    h->type = in[OFF_TYPE];
    h->flags = in[OFF_FLAGS];
    h->job_key = sfb__get_u64(in + OFF_JOBKEY);
    h->origin = sfb__get_u32(in + OFF_ORIGIN);
    h->sender = sfb__get_u32(in + OFF_SENDER);
    h->clock = (int64_t)sfb__get_u64(in + OFF_CLOCK);
    h->matrix = sfb__get_u32(in + OFF_MATRIX);
    h->k = sfb__get_u32(in + OFF_K);
    h->d = sfb__get_u32(in + OFF_D);
    h->s = sfb__get_u32(in + OFF_S);
    h->payload_len = sfb__get_u64(in + OFF_PAYLOAD_LEN);
    h->checksum = sfb__get_u64(in + OFF_CHECKSUM);
}

/* Checksum of the header (checksum field read as zero) and the payload; a
 * BUNDLE's covers its header alone (docs/wire.md): every inner frame
 * carries its own, which the receiver checks, so hashing the payload again
 * would only cost (twice per hop: the sending relay and the receiver). */
static uint64_t checksum(const uint8_t *hdr, const struct sfb__wire_piece *pieces, size_t n)
{
    if (hdr[OFF_TYPE] == SFB_WIRE_BUNDLE) n = 0;
    uint8_t h0[SFB_WIRE_HDR_SIZE];
    memcpy(h0, hdr, sizeof h0);
    sfb__put_u64(h0 + OFF_CHECKSUM, 0);
    XXH3_state_t st;
    xxh3_reset(&st);
    xxh3_update(&st, h0, sizeof h0);
    for (size_t i = 0; i < n; i++)
        if (pieces[i].n) xxh3_update(&st, pieces[i].p, pieces[i].n);
    return xxh3_digest(&st);
}

static int encodable(const struct sfb__wire_hdr *h, uint64_t total)
{
    if (total != h->payload_len)
        return sfb__error(-EINVAL, "wire encode: pieces hold %llu bytes, payload_len %llu",
                          (unsigned long long)total, (unsigned long long)h->payload_len);
    if (h->type == 0 || h->type > SFB_WIRE_TYPE_MAX)
        return sfb__error(-EINVAL, "wire encode: unknown type %u", h->type);
    return 0;
}

int sfb__wire_encode(const struct sfb__wire_hdr *h, const struct sfb__wire_piece *pieces,
                     size_t npieces, uint8_t out[SFB_WIRE_HDR_SIZE])
{
    uint64_t total = 0;
    for (size_t i = 0; i < npieces; i++) total += pieces[i].n;
    int ret = encodable(h, total);
    if (ret) return ret;
    pack(h, out);
    sfb__put_u64(out + OFF_CHECKSUM, checksum(out, pieces, npieces));
    return 0;
}

_Static_assert(sizeof(XXH3_state_t) <= sizeof(((struct sfb__wire_hash *)0)->state) &&
                   _Alignof(XXH3_state_t) <= 64,
               "struct sfb__wire_hash holds an XXH3 state");

static XXH3_state_t *hash_state(struct sfb__wire_hash *s)
{
    return (XXH3_state_t *)(void *)s->state;
}

int sfb__wire_hash_begin(struct sfb__wire_hash *s, const struct sfb__wire_hdr *h)
{
    if (h->type == SFB_WIRE_BUNDLE)
        return sfb__error(-EINVAL, "wire encode: a BUNDLE's checksum covers its header alone");
    uint8_t h0[SFB_WIRE_HDR_SIZE];
    pack(h, h0); /* (the checksum field zero) */
    xxh3_reset(hash_state(s));
    xxh3_update(hash_state(s), h0, sizeof h0);
    s->fed = 0;
    return 0;
}

void sfb__wire_hash_update(struct sfb__wire_hash *s, const void *p, size_t n)
{
    if (n) xxh3_update(hash_state(s), p, n);
    s->fed += n;
}

int sfb__wire_encode_hashed(const struct sfb__wire_hdr *h, struct sfb__wire_hash *s,
                            uint8_t out[SFB_WIRE_HDR_SIZE])
{
    int ret = encodable(h, s->fed);
    if (ret) return ret;
    pack(h, out);
    sfb__put_u64(out + OFF_CHECKSUM, xxh3_digest(hash_state(s)));
    return 0;
}

uint32_t sfb__wire_factor_samples(const struct sfb__wire_hdr *h)
{
    uint64_t per = ((uint64_t)h->k + h->d) * 4;
    return h->payload_len > SFB_WIRE_FACTORS_PREFIX && per
               ? (uint32_t)((h->payload_len - SFB_WIRE_FACTORS_PREFIX) / per)
               : 0;
}

/* Zero bytes that pad n bytes to a multiple of 4. */
static uint64_t pad4(uint64_t n)
{
    return (4 - n % 4) % 4;
}

/* Checks payload_len against what the shape implies. SF payload (the codec's
 * contract, sfb/codec.h and docs/wire.md): an 8-byte prefix (scale, nnz),
 * then B (S·K·e), then dense c (S·D·e) or CSR c: S+1 u32 row pointers and at
 * most S·D (u32 column, value) pairs; then zero bytes up to a multiple of 4
 * (e = 2 only: every SF and DENSE_ROWS payload is whole 4-byte words). */
static int shape_ok(const struct sfb__wire_job *job, const struct sfb__wire_hdr *h,
                    enum sfb__wire_reason *why)
{
    size_t e = sfb__wire_elem_size(h->flags);
    if ((h->flags & SFB_WIRE_F_FACTORS) && h->type != SFB_WIRE_DENSE_ROWS) {
        *why = SFB_WIRE_R_FLAGS;
        return 0;
    }
    *why = SFB_WIRE_R_SHAPE;
    switch (h->type) {
    case SFB_WIRE_SF: {
        if (h->matrix >= job->nshapes) return 0;
        const struct sfb__wire_shape *m = &job->shapes[h->matrix];
        if (h->k != m->k || h->d != m->d || h->s == 0 || h->s > job->max_s) return 0;
        *why = SFB_WIRE_R_LENGTH;
        /* u32 operands in u64 arithmetic: cannot overflow for K, D, S < 2^32. */
        uint64_t s = h->s, k = h->k, d = h->d;
        uint64_t pre = 8 + (h->flags & SFB_WIRE_F_PART ? SFB_WIRE_PART_PREFIX : 0);
        if (!(h->flags & SFB_WIRE_F_SPARSE))
            return h->payload_len == pre + s * (k + d) * e + pad4(s * (k + d) * e);
        uint64_t lo = pre + s * k * e + (s + 1) * 4;
        if (h->payload_len < lo) return 0;
        /* nnz pairs, then the padding (< 4 + e bytes: nnz is determined) */
        uint64_t nnz = (h->payload_len - lo) / (4 + e), pad = (h->payload_len - lo) % (4 + e);
        return nnz <= s * d && pad == pad4(s * k * e + nnz * (4 + e));
    }
    case SFB_WIRE_DENSE_ROWS: {
        if (h->matrix >= job->nshapes || (h->flags & SFB_WIRE_F_PART)) return 0;
        const struct sfb__wire_shape *m = &job->shapes[h->matrix];
        if (h->k == 0 || h->d != m->d || h->s >= m->k || h->k > m->k - h->s) return 0;
        if (h->flags & SFB_WIRE_F_SPARSE) return 0;
        if (h->flags & SFB_WIRE_F_FACTORS) { /* n samples of float32 factors */
            if (e != 4) return 0;
            *why = SFB_WIRE_R_LENGTH;
            uint64_t n = sfb__wire_factor_samples(h);
            return n >= 1 && n <= job->max_s &&
                   h->payload_len == SFB_WIRE_FACTORS_PREFIX + n * ((uint64_t)h->k + h->d) * 4;
        }
        *why = SFB_WIRE_R_LENGTH;
        return h->payload_len == (uint64_t)h->k * h->d * e + pad4((uint64_t)h->k * h->d * e);
    }
    default:
        /* BUNDLE, control and DATA frames have no shape (nor parts). */
        if (h->matrix || h->k || h->d || h->s || (h->flags & SFB_WIRE_F_PART)) return 0;
        *why = SFB_WIRE_R_LENGTH;
        if (h->type == SFB_WIRE_LOST) return h->payload_len == 4;
        if (h->type >= SFB_WIRE_HELLO && h->type <= SFB_WIRE_ABORT)
            return h->payload_len <= SFB_WIRE_CONTROL_MAX;
        return 1;
    }
}

int sfb__wire_check_header(const struct sfb__wire_job *job, const void *buf, size_t len,
                           struct sfb__wire_hdr *h, enum sfb__wire_reason *reason)
{
    const uint8_t *b = buf;
    enum sfb__wire_reason r;
    memset(h, 0, sizeof *h);
    if (len < SFB_WIRE_HDR_SIZE) {
        r = SFB_WIRE_R_TRUNC;
        goto bad;
    }
    sfb__wire_parse_header(b, h);
    if (h->magic != SFB_WIRE_MAGIC) r = SFB_WIRE_R_MAGIC;
    else if (h->version != SFB_WIRE_VERSION) r = SFB_WIRE_R_VERSION;
    else if (h->type == 0 || h->type > SFB_WIRE_TYPE_MAX) r = SFB_WIRE_R_TYPE;
    else if (h->job_key != job->job_key) r = SFB_WIRE_R_JOBKEY;
    else if (h->origin >= job->world_size || h->sender >= job->world_size) r = SFB_WIRE_R_RANK;
    else if (h->flags & ~SFB_WIRE_F_KNOWN) r = SFB_WIRE_R_FLAGS;
    else if (h->payload_len > job->max_payload) r = SFB_WIRE_R_LENGTH;
    else if (!shape_ok(job, h, &r)) { /* r set by shape_ok */ }
    else if (h->payload_len > len - SFB_WIRE_HDR_SIZE) r = SFB_WIRE_R_TRUNC;
    else if (h->payload_len < len - SFB_WIRE_HDR_SIZE) r = SFB_WIRE_R_LENGTH;
    else return 0;
bad:
    *reason = r;
    return sfb__wire_reason_code(r);
}

static int reject(const struct sfb__wire_job *job, const struct sfb__wire_hdr *h, size_t len,
                  int from, enum sfb__wire_reason r)
{
    if (job->stats) atomic_fetch_add_explicit(&job->stats->rejected[r], 1, memory_order_relaxed);
    int code = sfb__wire_reason_code(r);
    /* Header fields may be garbage; they are printed as numbers only. */
    sfb__error(code,
               "frame from rank %d rejected (%s): %zu bytes, type %u (%s), header sender %u, "
               "origin %u, version %u, job key %016llx, matrix %u, K %u, D %u, S %u, "
               "payload_len %llu",
               from, sfb__wire_reason_name(r), len, h->type, sfb__wire_type_name(h->type),
               h->sender, h->origin, h->version, (unsigned long long)h->job_key, h->matrix,
               h->k, h->d, h->s, (unsigned long long)h->payload_len);
    SFB_LOG_W("wire: %s", sfb_last_error());
    return code;
}

void sfb__wire_part(const struct sfb__wire_hdr *h, const uint8_t *payload,
                    struct sfb__wire_part *out)
{
    *out = (struct sfb__wire_part){0, 1, 0.0f};
    if (h->type != SFB_WIRE_SF || !(h->flags & SFB_WIRE_F_PART)) return;
    out->index = sfb__get_u16(payload);
    out->count = sfb__get_u16(payload + 2);
    uint32_t bits = sfb__get_u32(payload + 4);
    memcpy(&out->priority, &bits, sizeof bits);
}

const uint8_t *sfb__wire_sf_payload(const struct sfb__wire_hdr *h, const uint8_t *payload,
                                    uint64_t *len)
{
    uint64_t skip = h->flags & SFB_WIRE_F_PART ? SFB_WIRE_PART_PREFIX : 0;
    *len = h->payload_len - skip;
    return payload + skip;
}

void sfb__wire_put_part(uint8_t *out, const struct sfb__wire_part *part)
{
    sfb__put_u16(out, (uint16_t)part->index);
    sfb__put_u16(out + 2, (uint16_t)part->count);
    uint32_t bits;
    memcpy(&bits, &part->priority, sizeof bits);
    sfb__put_u32(out + 4, bits);
}

/* The part prefix (after the checksum: its bytes are the sender's). */
static int part_ok(const struct sfb__wire_hdr *h, const uint8_t *payload)
{
    if (h->type != SFB_WIRE_SF || !(h->flags & SFB_WIRE_F_PART)) return 1;
    struct sfb__wire_part p;
    sfb__wire_part(h, payload, &p);
    return p.count >= 1 && p.count <= SFB_WIRE_MAX_PARTS && p.index < p.count &&
           isfinite(p.priority) &&
           p.priority >= 0;
}

static int decode(const struct sfb__wire_job *job, const void *buf, size_t len, int from,
                  struct sfb__wire_hdr *h, const uint8_t **payload, int inner)
{
    enum sfb__wire_reason r;
    if (sfb__wire_check_header(job, buf, len, h, &r)) return reject(job, h, len, from, r);
    if (inner && h->type == SFB_WIRE_BUNDLE) return reject(job, h, len, from, SFB_WIRE_R_NESTED);
    const uint8_t *b = buf;
    struct sfb__wire_piece pl = {b + SFB_WIRE_HDR_SIZE, (size_t)h->payload_len};
    if (checksum(b, &pl, 1) != h->checksum) return reject(job, h, len, from, SFB_WIRE_R_CHECKSUM);
    if (!part_ok(h, b + SFB_WIRE_HDR_SIZE)) return reject(job, h, len, from, SFB_WIRE_R_SHAPE);
    if (job->stats) atomic_fetch_add_explicit(&job->stats->accepted, 1, memory_order_relaxed);
    *payload = b + SFB_WIRE_HDR_SIZE;
    return 0;
}

int sfb__wire_decode(const struct sfb__wire_job *job, const void *buf, size_t len, int from,
                     struct sfb__wire_hdr *h, const uint8_t **payload)
{
    return decode(job, buf, len, from, h, payload, 0);
}

void sfb__wire_bundle_begin(struct sfb__wire_iter *it, const uint8_t *payload,
                            uint64_t payload_len, int from)
{
    it->p = payload;
    it->end = payload + payload_len;
    it->from = from;
}

int sfb__wire_bundle_next(const struct sfb__wire_job *job, struct sfb__wire_iter *it,
                          const uint8_t **frame, size_t *frame_len, struct sfb__wire_hdr *h,
                          const uint8_t **payload)
{
    size_t left = (size_t)(it->end - it->p);
    if (left == 0) return 0;
    memset(h, 0, sizeof *h);
    if (left < SFB_WIRE_HDR_SIZE) goto trunc;
    uint64_t plen = sfb__get_u64(it->p + OFF_PAYLOAD_LEN);
    if (plen > left - SFB_WIRE_HDR_SIZE) {
        sfb__wire_parse_header(it->p, h);
        goto trunc;
    }
    size_t n = SFB_WIRE_HDR_SIZE + (size_t)plen;
    if (plen % 4) {
        /* every inner frame whole 4-byte words: the payloads behind it stay
         * aligned for in-place float32 views (SF and DENSE_ROWS frames are) */
        sfb__wire_parse_header(it->p, h);
        it->p = it->end;
        return reject(job, h, n, it->from, SFB_WIRE_R_LENGTH);
    }
    int rc = decode(job, it->p, n, it->from, h, payload, 1);
    if (rc) {
        it->p = it->end; /* a bad inner frame ends the iteration */
        return rc;
    }
    *frame = it->p;
    *frame_len = n;
    it->p += n;
    return 1;
trunc:
    it->p = it->end;
    return reject(job, h, left, it->from, SFB_WIRE_R_TRUNC);
}

void sfb__wire_trusted(const void *buf, struct sfb__wire_hdr *h, const uint8_t **payload)
{
    sfb__wire_parse_header(buf, h);
    *payload = (const uint8_t *)buf + SFB_WIRE_HDR_SIZE;
}

int sfb__wire_bundle_next_trusted(struct sfb__wire_iter *it, const uint8_t **frame,
                                  size_t *frame_len, struct sfb__wire_hdr *h,
                                  const uint8_t **payload)
{
    size_t left = (size_t)(it->end - it->p);
    if (left == 0) return 0;
    if (left < SFB_WIRE_HDR_SIZE ||
        sfb__get_u64(it->p + OFF_PAYLOAD_LEN) > left - SFB_WIRE_HDR_SIZE) {
        it->p = it->end;
        return -EINVAL;
    }
    sfb__wire_trusted(it->p, h, payload);
    *frame = it->p;
    *frame_len = SFB_WIRE_HDR_SIZE + (size_t)h->payload_len;
    it->p += *frame_len;
    return 1;
}
