/* Wire format of sfb frames (documented in docs/wire.md).
 *
 * A frame is a fixed 64-byte little-endian header followed by `payload_len`
 * payload bytes. The header carries an XXH3-64 checksum over the header (with
 * the checksum field zeroed) and the payload, computed with a streaming state
 * so the two pieces never need to be contiguous.
 *
 * The decoder treats its input as untrusted: every header field is checked
 * against the job (`struct sfb__wire_job`) before the payload is touched, and a
 * rejected frame is counted per reason and logged with the sender's rank.
 *
 * All functions are thread-safe (no hidden state; the statistics counters are
 * atomics) and never allocate.
 */
#ifndef SFB_SRC_WIRE_H
#define SFB_SRC_WIRE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SFB_WIRE_MAGIC 0x57424653u /* "SFBW" as little-endian bytes */
#define SFB_WIRE_VERSION 2 /* 2: a BUNDLE's checksum covers its header alone */
#define SFB_WIRE_HDR_SIZE 64
/* Control frames (HELLO, BYE, HEARTBEAT, ABORT, LOST) carry at most this much. */
#define SFB_WIRE_CONTROL_MAX 4096

enum sfb__wire_type {
    SFB_WIRE_SF = 1,         /* sufficient factors of one matrix, one clock */
    SFB_WIRE_BUNDLE = 2,     /* payload = sequence of complete inner frames */
    SFB_WIRE_DENSE_ROWS = 3, /* FMS: K rows starting at row S of matrix */
    SFB_WIRE_HELLO = 4,
    SFB_WIRE_BYE = 5,
    SFB_WIRE_HEARTBEAT = 6,
    SFB_WIRE_ABORT = 7, /* payload: UTF-8 reason, not NUL-terminated */
    SFB_WIRE_DATA = 8,  /* raw bytes (tests, benchmarks) */
    SFB_WIRE_LOST = 9,  /* elastic jobs: payload u32 LE, a rank the sender found dead */
};
#define SFB_WIRE_TYPE_MAX 9

/* flags: bit 0 = c is sparse; bit 1 = the origin's last clock (SF and
 * DENSE_ROWS: nothing of a later clock will come from it); bit 2 = SF only:
 * the frame is one part of its (origin, clock, matrix) update, its payload
 * starting with the part prefix (below); bit 3 = DENSE_ROWS only: the
 * rows' sufficient factors instead of the rows (below); bits 4..5 =
 * element precision. */
#define SFB_WIRE_F_SPARSE 0x01u
#define SFB_WIRE_F_LAST 0x02u
#define SFB_WIRE_F_PART 0x04u
#define SFB_WIRE_F_FACTORS 0x08u
#define SFB_WIRE_F_PREC_SHIFT 4
#define SFB_WIRE_F_PREC_MASK 0x30u
enum sfb__wire_prec {
    SFB_WIRE_F32 = 0,
    SFB_WIRE_F64 = 1,
    SFB_WIRE_BF16 = 2,
    SFB_WIRE_F16 = 3,
};
#define SFB_WIRE_F_KNOWN                                                            \
    (SFB_WIRE_F_SPARSE | SFB_WIRE_F_LAST | SFB_WIRE_F_PART | SFB_WIRE_F_FACTORS | \
     SFB_WIRE_F_PREC_MASK)

/* A DENSE_ROWS frame flagged SFB_WIRE_F_FACTORS (FMS's push of an SF to
 * the owner of its rows, docs/wire.md) carries rows [S, S + K) as scale ·
 * BᵀC of n samples, float32 only: a prefix of scale (f32) and n (u32),
 * then B (n × K) and c (n × D), row-major; payload_len is exactly
 * SFB_WIRE_FACTORS_PREFIX + n·(K + D)·4 with 1 ≤ n ≤ max_s. */
#define SFB_WIRE_FACTORS_PREFIX 8u
/* n of such a frame (its header checked: exact). */
struct sfb__wire_hdr;
uint32_t sfb__wire_factor_samples(const struct sfb__wire_hdr *h);

/* An update sent in parts (managed communication, docs/wire.md): each part
 * is an SF frame of some of the update's samples (factor pairs), flagged
 * SFB_WIRE_F_PART, whose payload starts with
 *   0  2  index (u16), 2  2  count (u16): index < count <= SFB_WIRE_MAX_PARTS
 *   4  4  priority (float32, finite, >= 0: the sender's score of the part)
 * followed by the SF payload of its S samples. The parts of one update
 * partition its samples; the update counts as applied once all arrived. */
struct sfb__wire_hdr;
#define SFB_WIRE_PART_PREFIX 8u
#define SFB_WIRE_MAX_PARTS 64u
struct sfb__wire_part {
    uint32_t index, count; /* 0 of 1 for a frame that is not a part */
    float priority;        /* 0 for a frame that is not a part */
};
/* The part prefix of an SF frame (validated by the decoder), or 0 of 1. */
void sfb__wire_part(const struct sfb__wire_hdr *h, const uint8_t *payload,
                    struct sfb__wire_part *out);
/* The SF payload (codec) of an SF frame: after the part prefix, if any. */
const uint8_t *sfb__wire_sf_payload(const struct sfb__wire_hdr *h, const uint8_t *payload,
                                    uint64_t *len);
/* Writes a part prefix into out[0 .. SFB_WIRE_PART_PREFIX). */
void sfb__wire_put_part(uint8_t *out, const struct sfb__wire_part *part);

/* Decoded (host-order) header. */
struct sfb__wire_hdr {
    uint32_t magic;
    uint16_t version;
    uint8_t type;
    uint8_t flags;
    uint64_t job_key;
    uint32_t origin; /* rank whose update this is */
    uint32_t sender; /* rank that put this frame on the link (relays) */
    int64_t clock;
    uint32_t matrix;
    uint32_t k, d, s;
    uint64_t payload_len;
    uint64_t checksum;
};

/* Reasons a frame is rejected; each has its own error code and counter. */
enum sfb__wire_reason {
    SFB_WIRE_R_TRUNC = 0, /* buffer shorter than header + payload_len */
    SFB_WIRE_R_MAGIC,     /* wrong magic                -SFB_EFORMAT */
    SFB_WIRE_R_VERSION,   /* unsupported version        -SFB_EVERSION */
    SFB_WIRE_R_TYPE,      /* unknown type               -EPROTO */
    SFB_WIRE_R_JOBKEY,    /* other job                  -SFB_EJOBKEY */
    SFB_WIRE_R_RANK,      /* origin/sender >= world     -ERANGE */
    SFB_WIRE_R_FLAGS,     /* unknown flag bits          -EBADMSG */
    SFB_WIRE_R_SHAPE,     /* matrix/K/D/S not allowed   -SFB_ESHAPE */
    SFB_WIRE_R_LENGTH,    /* payload_len too big or inconsistent with shape,
                             or bytes after the frame   -EMSGSIZE */
    SFB_WIRE_R_CHECKSUM,  /* XXH3 mismatch              -SFB_ECHECKSUM */
    SFB_WIRE_R_NESTED,    /* BUNDLE inside BUNDLE       -ELOOP */
    SFB_WIRE_NREASONS
};
/* SFB_WIRE_R_TRUNC → -SFB_ETRUNC. */

/* Per-job counters, shared by every thread that decodes. */
struct sfb__wire_stats {
    _Atomic uint64_t accepted;
    _Atomic uint64_t rejected[SFB_WIRE_NREASONS];
};

/* Allowed shape of one matrix id (the index in `shapes`). */
struct sfb__wire_shape {
    uint32_t k, d;
};

/* What a frame must match to be accepted. */
struct sfb__wire_job {
    uint64_t job_key;
    uint32_t world_size;
    const struct sfb__wire_shape *shapes; /* indexed by matrix id */
    uint32_t nshapes;
    uint32_t max_s;        /* largest minibatch S in an SF frame */
    uint64_t max_payload;  /* largest payload of any frame (BUNDLE, DATA) */
    struct sfb__wire_stats *stats; /* may be NULL: nothing counted */
};

/* A contiguous piece of payload (for encoding payloads kept in parts). */
struct sfb__wire_piece {
    const void *p;
    size_t n;
};

/* Size of one element of the precision in `flags` (4, 8, 2 or 2). */
size_t sfb__wire_elem_size(uint8_t flags);

/* Encodes `h` into out[0..63] and computes the checksum over the header and
 * the payload given as `npieces` pieces whose lengths must add up to
 * h->payload_len. magic, version and checksum are filled in (the values in
 * `h` are ignored). Returns 0, or -EINVAL if the lengths disagree or the
 * type is unknown. Performs no job validation (the sender trusts itself). */
int sfb__wire_encode(const struct sfb__wire_hdr *h, const struct sfb__wire_piece *pieces,
                     size_t npieces, uint8_t out[SFB_WIRE_HDR_SIZE]);

/* A frame's checksum computed while its payload is produced, each piece
 * hashed while it is in cache instead of in a pass of its own over bytes
 * already written (the dense path's pushes and sums, sfb/fms.c). Begin
 * with the header (every field final; BUNDLE frames cannot be hashed
 * this way), feed the payload's bytes in order, then encode: out is what
 * sfb__wire_encode would write. Opaque: XXH3's streaming state. */
struct sfb__wire_hash {
    _Alignas(64) unsigned char state[640];
    uint64_t fed;
};
int sfb__wire_hash_begin(struct sfb__wire_hash *s, const struct sfb__wire_hdr *h);
void sfb__wire_hash_update(struct sfb__wire_hash *s, const void *p, size_t n);
/* -EINVAL if s was fed other than h->payload_len bytes. */
int sfb__wire_encode_hashed(const struct sfb__wire_hdr *h, struct sfb__wire_hash *s,
                            uint8_t out[SFB_WIRE_HDR_SIZE]);

/* Parses the 64 header bytes without any validation (for tools and tests). */
void sfb__wire_parse_header(const uint8_t in[SFB_WIRE_HDR_SIZE], struct sfb__wire_hdr *h);

/* Validates the header in buf[0..len) against `job` without reading the
 * payload: magic, version, type, job key, ranks, flags, shape, and that
 * exactly header + payload_len bytes are present. Returns 0 or the reason's
 * code (see enum sfb__wire_reason); *h is filled as far as parsed. */
int sfb__wire_check_header(const struct sfb__wire_job *job, const void *buf, size_t len,
                           struct sfb__wire_hdr *h, enum sfb__wire_reason *reason);

/* Full decode of one frame occupying exactly buf[0..len): header checks, then
 * the checksum. On success fills *h and *payload (points into buf; borrowed)
 * and counts the frame as accepted. On failure returns the reason's code,
 * counts it, records a detailed sfb__error and logs a warning naming `from`
 * (the rank the transport received it from, or -1) and the header's sender.
 * BUNDLE frames are checked as a whole here; use the bundle iterator to
 * validate and reach the inner frames. */
int sfb__wire_decode(const struct sfb__wire_job *job, const void *buf, size_t len, int from,
                     struct sfb__wire_hdr *h, const uint8_t **payload);

/* Iterator over the inner frames of a decoded BUNDLE payload. */
struct sfb__wire_iter {
    const uint8_t *p, *end;
    int from;
};
void sfb__wire_bundle_begin(struct sfb__wire_iter *it, const uint8_t *payload,
                            uint64_t payload_len, int from);

/* Next inner frame: returns 1 and sets (*frame, *frame_len) to the inner
 * frame's exact bytes (header + payload, a slice of the bundle, suitable for
 * byte-for-byte forwarding), *h and *payload decoded; 0 at the end; or a
 * negative code for a malformed inner frame (truncated, nested BUNDLE, any
 * decode failure) after which iteration must stop. Inner frames are fully
 * validated (including their own checksum) and counted. */
int sfb__wire_bundle_next(const struct sfb__wire_job *job, struct sfb__wire_iter *it,
                          const uint8_t **frame, size_t *frame_len, struct sfb__wire_hdr *h,
                          const uint8_t **payload);

/* For frames comm's on_frame already validated in full (checksum and, for a
 * BUNDLE, every inner frame): header and payload without checking or
 * counting them again. The engines read their inbox this way. */
void sfb__wire_trusted(const void *buf, struct sfb__wire_hdr *h, const uint8_t **payload);

/* sfb__wire_bundle_next over an already validated BUNDLE: 1 and the next
 * inner frame, 0 at the end, -EINVAL if the bytes do not hold a whole frame
 * (cannot happen after validation; checked because it costs nothing). */
int sfb__wire_bundle_next_trusted(struct sfb__wire_iter *it, const uint8_t **frame,
                                  size_t *frame_len, struct sfb__wire_hdr *h,
                                  const uint8_t **payload);

/* Name of a reason ("checksum", ...) and its error code. */
const char *sfb__wire_reason_name(enum sfb__wire_reason r);
int sfb__wire_reason_code(enum sfb__wire_reason r);
const char *sfb__wire_type_name(unsigned type);

#endif
