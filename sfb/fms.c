/* The FMS engine: full matrices through sharded servers, the centralized
 * baseline the paper compares SFB with (docs/design.md §FMS baseline).
 *
 * The K rows of the matrix are split into P contiguous blocks; worker b owns
 * block b (rows [b·K/P, (b+1)·K/P)) and acts as its server. Each block is
 * cut into chunks of up to 4 MiB (whole rows, sfb__fms_chunk_rows; the same
 * grid on every rank), the unit of every message, so that the two phases run as
 * a pipeline: an owner sums and sends chunk j while chunk j + 1's pushes
 * still arrive, and a worker applies a summed chunk while the next ones are
 * on the wire (a direct reduce-scatter + all-gather; each worker sends
 * 2·(P−1)/P of the matrix, the all-reduce bound). Per clock:
 *   publish(t): ΔA_own = reconstruction of the own SF, or scale · delta
 *     checked first; every chunk is pushed to its block's owner as a
 *     DENSE_ROWS frame (origin = pusher), chunk 0 of every owner first; then
 *     ΔA_own is added to the own replica (read-my-writes). An SF with dense
 *     c whose factors the job checked is streamed: the own block's rows by
 *     one sgemm, then each push's rows by one of their own, the push
 *     leaving (and the sums its arrivals complete formed) before the next
 *     is computed; otherwise the product is formed whole into zeros and
 *     checked before the first push leaves.
 *   An ordered job's SF (no read-my-writes: only the own block's rows are
 *     ever needed) pushes its factors instead of an owner's rows where they
 *     are fewer bytes: one DENSE_ROWS frame flagged FACTORS per owner, the
 *     scale, n, B's columns of the block and the whole c (S·(K/P + D)
 *     numbers against K·D/P); these leave first, then the own block's rows
 *     are formed. The owner's sgemm forms that rank's part: the same flops,
 *     moved, and a 4096 × 4097 layer at S = 128 among 4 pushes 2.6 MB to
 *     an owner instead of 16.8 MB (SFB_FMS_FACTORS=0: rows always).
 *   owner of block b: once it holds all P pushes of chunk j of clock t (its
 *     own included) it sums them, the factors' products first, then the
 *     rows, each in rank order (only the owner sums: every replica receives
 *     the same bytes), and sends the sum to every worker (DENSE_ROWS with
 *     origin = owner): in its waits, at its own publish, and under the
 *     per-matrix engine after each publish of another matrix (waiter.serve),
 *     so that a sum every peer waits for does not wait for this rank's next
 *     wait (its backward's last layer).
 *   every worker applies a summed chunk as sum − own push, since the own
 *     part is already in its replica.
 * bfloat16 rows (env.dense_prec, dense_dtype "bf16"; Horovod's
 * Compression.fp16): ΔA_own is rounded to bfloat16 in place before anything
 * else (the pushes carry it exactly, in half the bytes), the owner sums the
 * widened pushes in float32 and sends the sum rounded to bfloat16, and every
 * worker, the owner too, applies that rounded sum widened: the replicas
 * stay identical.
 * SSP holds per block: the SSP table's "origin" b is the owner of block b,
 * marked when the last summed chunk of block b of a clock is applied.
 * Computing clock t needs every block summed and applied through t − s − 1.
 *
 * Everything runs in the compute thread; received frames are never copied
 * (pending pushes and sums hold references to the receive buffers). */
#include "config.h"
#include "sfb/codec.h"
#include "sfb/sync.h"
#include "sfb/vec.h"
#include "src/comm/comm.h"
#include "src/base/trace.h"
#include "src/base/util.h"
#include "src/factor/blas.h"
#include "src/ssp/ssp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A received frame kept for later: a push of a chunk of the own block, or
 * a summed chunk of some owner's block; or a push of the factors of the
 * whole own block (n > 0), held until every chunk of it is summed. */
struct held {
    struct sfb__buf *buf; /* reference held */
    const uint8_t *rows;  /* k × D float32, little-endian, maybe unaligned;
                           * factors: B (n × block rows), then c (n × D) */
    uint32_t origin;      /* pusher (push) or owner (sum) */
    uint32_t s;           /* the chunk's first row (factors: the block's) */
    int64_t clock;
    uint32_t n;           /* factors: samples; 0: rows */
    uint32_t left;        /* factors: chunks of the block not summed yet */
    float scale;          /* factors: the product's */
};

/* A rank's part of the chunk being summed: its rows, or the factors of
 * the block the chunk is in (n > 0). */
struct part {
    const uint8_t *p;
    uint32_t n;
    float scale;
};

/* The own ΔA of one clock, kept until every chunk of that clock is summed
 * and applied (sum − own needs it). */
struct own {
    struct sfb__buf *buf;  /* K × D float32; also referenced by pending sends */
    struct sfb__buf *sums; /* the own block's sums where factors were pushed to it:
                            * formed in place, chunk by chunk (block_products) */
    int64_t clock;
    uint32_t left;     /* summed chunks of this clock not applied yet */
    uint32_t formed;   /* chunks of the own block summed */
    uint32_t *applied; /* per block: its summed chunks applied (one allocation: */
    uint8_t *done;     /* per chunk of the matrix (chunk_base): applied */
    uint8_t *summed;   /* per chunk of the own block: its sum formed, */
    uint8_t *pushed;   /* per chunk of the matrix: the own push left) */
};

/* Pushes of one chunk of the own block held so far (the sum waits for
 * P − 1 of them and the own ΔA). */
struct tally {
    int64_t clock;
    uint32_t chunk;
    uint32_t have;
};

/* A chunk's bytes at most (whole rows, at least one): big enough that a
 * message's fixed cost is small against its bytes, small enough that a
 * block is several chunks and the phases overlap. Unit tests make it small. */
size_t sfb__fms_chunk_bytes = (size_t)4 << 20;

/* The chunk grid (sfb/sync.h): about sfb__fms_chunk_bytes, smaller where the
 * largest block would be fewer than 4 chunks, down to a quarter of it, and
 * the largest block split evenly (no last chunk of a few rows). Up to 4 MiB
 * rather than 1: each message over tcp is an announce, a read and an ACK
 * besides its bytes, and an 80 MB MLP on 4 emulated hosts on 2 cores ran
 * 3-6 % faster at every link rate (docs/performance.md); the pipeline's first
 * and last chunks cost a lone 64 MiB sum at 1 Gbit/s 5 %. */
uint32_t sfb__fms_chunk_rows(uint32_t K, uint32_t D, uint32_t P)
{
    size_t row = (size_t)(D ? D : 1) * sizeof(float);
    size_t most = SFB_MAX((size_t)1, sfb__fms_chunk_bytes / row);
    size_t least = SFB_MAX((size_t)1, most / 4);
    size_t p = P ? P : 1, block = ((size_t)K + p - 1) / p; /* the largest */
    size_t rows = SFB_MAX(SFB_MIN(most, (block + 3) / 4), least);
    size_t n = SFB_MAX((size_t)1, (block + rows - 1) / rows);
    rows = SFB_MAX((size_t)1, (block + n - 1) / n);
    return (uint32_t)SFB_MIN(rows, (size_t)UINT32_MAX);
}

/* A push of the own update: chunk j of owner b's block, its frame header. */
struct push {
    uint32_t b, j;
    uint8_t hdr[SFB_WIRE_HDR_SIZE];
};

struct fms {
    struct sfb__sync_env env;
    struct sfb__comm *c;
    struct sfb_reconstruct *recon;
    struct sfb_matrix *a;
    uint32_t nmat, rank, world, K, D;
    uint32_t id;       /* the matrix's wire id */
    uint32_t r0, r1;   /* own block */
    unsigned prec;        /* the rows' precision on the wire (enum sfb__wire_prec) */
    size_t e;             /* bytes a number there: 4 or 2 */
    float *wide, *acc;    /* bf16: a chunk widened (a push, a sum), the sum formed */
    uint32_t chunk_rows;  /* rows of a chunk (the last of a block may be short) */
    uint32_t *chunk_base; /* per block: the matrix's chunks before it; [world]: all */
    struct push *outgoing; /* the own update's pushes in the order they leave (push_order),
                            * their headers filled by each publish */
    struct held *push;   /* pushes received for the own block */
    size_t npush, push_cap;
    struct tally *tally; /* per (clock, chunk) of the own block: pushes held */
    size_t ntally, tally_cap;
    struct held *sum; /* summed blocks waiting to be applied */
    size_t nsum, sum_cap;
    struct own *own;
    size_t nown, own_cap;
    struct sfb__ssp formed; /* clocks whose own-block sum was formed */
    struct part *parts;     /* per rank: its push of the chunk being summed */
    int factor_push;        /* ordered SF updates push factors where they are smaller */
    uint64_t hist[SFB_STALENESS_BINS];
    uint64_t rejected;
    uint64_t data_msgs, data_bytes; /* pushes and sums sent (report) */
    int64_t own_clock; /* a job of one worker: the clock being published, */
    uint32_t own_left; /* its matrices not published yet, */
    float *alone;      /* and a bf16 matrix's update, rounded before it is added */
    size_t alone_cap;
};

static uint32_t block_start(const struct fms *f, uint32_t b)
{
    return (uint32_t)((uint64_t)f->K * b / f->world);
}

static uint32_t chunks_of(const struct fms *f, uint32_t b)
{
    uint32_t n = block_start(f, b + 1) - block_start(f, b);
    return (uint32_t)(((uint64_t)n + f->chunk_rows - 1) / f->chunk_rows);
}

/* Rows [*r0, *r1) of chunk j of block b. */
static void chunk_rows_of(const struct fms *f, uint32_t b, uint32_t j, uint32_t *r0,
                          uint32_t *r1)
{
    uint32_t s = block_start(f, b), e = block_start(f, b + 1);
    *r0 = s + j * f->chunk_rows;
    *r1 = SFB_MIN(e, *r0 + f->chunk_rows);
}

/* The block holding rows [s, s + k) as one of its chunks (*chunk set), or
 * world if they are no chunk. */
static uint32_t block_of(const struct fms *f, uint32_t s, uint32_t k, uint32_t *chunk)
{
    for (uint32_t b = 0; b < f->world; b++) {
        uint32_t b0 = block_start(f, b), b1 = block_start(f, b + 1);
        if (s < b0 || s >= b1 || k == 0) continue;
        uint32_t j = (s - b0) / f->chunk_rows, r0, r1;
        chunk_rows_of(f, b, j, &r0, &r1);
        if (r0 != s || r1 - r0 != k) return f->world;
        *chunk = j;
        return b;
    }
    return f->world;
}

/* The chunks this rank pushes (as many as the chunk grid has outside its own
 * block), in the order they leave: chunk 0 to owners rank + 1, rank + 2,
 * ..., then chunk 1, so that every owner can sum its first chunk early,
 * and at each step every owner receives from one pusher first (the order a
 * ring reduce-scatter has). */
static void push_order(struct fms *f)
{
    uint32_t most = 0, n = 0;
    for (uint32_t b = 0; b < f->world; b++) most = SFB_MAX(most, chunks_of(f, b));
    for (uint32_t j = 0; j < most; j++)
        for (uint32_t i = 1; i < f->world; i++) {
            uint32_t b = (f->rank + i) % f->world;
            if (j < chunks_of(f, b)) f->outgoing[n++] = (struct push){.b = b, .j = j};
        }
}

/* Whether FMS may push an ordered SF's factors instead of its rows where
 * they are the fewer bytes: 1 unless SFB_FMS_FACTORS=0 (comparisons; a
 * receiver takes either). */
static int factor_push_allowed(void)
{
    const char *fp = getenv("SFB_FMS_FACTORS");
    return !(fp && strcmp(fp, "0") == 0);
}

static int fms_open(void *priv, const struct sfb__sync_env *env)
{
    struct fms *f = priv;
    f->env = *env;
    f->c = env->comm;
    f->rank = sfb__comm_rank(f->c);
    f->world = sfb__comm_world(f->c);
    f->nmat = env->nmat;
    f->own_clock = INT64_MIN;
    /* a job of several matrices runs one FMS engine per matrix
     * (sfb__permatrix_ops) */
    if (f->world > 1 && f->nmat != 1)
        return sfb__error(-SFB_ENOTIMPL, "fms: %u matrices in one engine", f->nmat);
    f->a = &env->mats[0];
    f->id = env->ids ? env->ids[0] : 0;
    f->K = f->a->rows;
    f->D = f->a->cols;
    f->r0 = block_start(f, f->rank);
    f->r1 = block_start(f, f->rank + 1);
    f->chunk_rows = sfb__fms_chunk_rows(f->K, f->D, f->world);
    f->prec = env->dense_prec ? env->dense_prec[0] : SFB_WIRE_F32;
    if (f->prec != SFB_WIRE_F32 && f->prec != SFB_WIRE_BF16)
        return sfb__error(-SFB_EUSAGE, "fms: row precision %u (float32 or bfloat16 only)",
                          f->prec);
    f->e = f->prec == SFB_WIRE_BF16 ? 2 : 4;
    f->chunk_base = calloc(f->world + 1, sizeof *f->chunk_base);
    if (!f->chunk_base) return sfb__error(-ENOMEM, "fms: out of memory");
    size_t chunk_el = (size_t)SFB_MIN(f->chunk_rows, f->K) * f->D;
    if (f->prec == SFB_WIRE_BF16 && (!(f->wide = malloc(chunk_el * sizeof(float))) ||
                                     !(f->acc = malloc(chunk_el * sizeof(float)))))
        return sfb__error(-ENOMEM, "fms: out of memory");
    for (uint32_t b = 0; b < f->world; b++)
        f->chunk_base[b + 1] = f->chunk_base[b] + chunks_of(f, b);
    uint32_t npush = f->chunk_base[f->world] - chunks_of(f, f->rank);
    if (!(f->outgoing = malloc((npush ? npush : 1) * sizeof *f->outgoing)))
        return sfb__error(-ENOMEM, "fms: out of memory");
    push_order(f);
    /* A resumed run starts with every earlier sum formed and applied: after
     * the checkpoint's drain no push, sum or own ΔA is outstanding (each is
     * released once applied), so the owner's shard state is only this table
     * and the replica rows, which the checkpoint holds. */
    int ret = sfb__ssp_init(&f->formed, 1, 0, env->start_clock);
    if (ret) return ret;
    f->parts = calloc(f->world, sizeof *f->parts);
    if (!f->parts) return sfb__error(-ENOMEM, "fms: out of memory");
    f->factor_push = factor_push_allowed();
    return sfb_reconstruct_open(&f->recon);
}

static void fms_close(void *priv)
{
    struct fms *f = priv;
    for (size_t i = 0; i < f->npush; i++)
        sfb__buf_put(f->push[i].buf);
    for (size_t i = 0; i < f->nsum; i++)
        sfb__buf_put(f->sum[i].buf);
    for (size_t i = 0; i < f->nown; i++) {
        sfb__buf_put(f->own[i].buf);
        if (f->own[i].sums) sfb__buf_put(f->own[i].sums);
        free(f->own[i].applied);
    }
    free(f->outgoing);
    free(f->push);
    free(f->tally);
    free(f->chunk_base);
    free(f->wide);
    free(f->acc);
    free(f->alone);
    free(f->sum);
    free(f->own);
    free(f->parts);
    sfb__ssp_fini(&f->formed);
    sfb_reconstruct_close(&f->recon);
}

static struct own *find_own(struct fms *f, int64_t clock)
{
    for (size_t i = 0; i < f->nown; i++)
        if (f->own[i].clock == clock) return &f->own[i];
    return NULL;
}

static int holds(const struct held *h, size_t n, uint32_t origin, int64_t clock, uint32_t s)
{
    for (size_t i = 0; i < n; i++)
        if (h[i].origin == origin && h[i].clock == clock && h[i].s == s) return 1;
    return 0;
}

/* Frees an own ΔA's entry (its buffer reference and counters). */
static void drop_own(struct fms *f, struct own *o)
{
    sfb__buf_put(o->buf);
    if (o->sums) sfb__buf_put(o->sums);
    free(o->applied);
    *o = f->own[--f->nown];
}

/* Chunk j of the own block of clock t was summed already. */
static int summed_already(struct fms *f, int64_t t, uint32_t j)
{
    if (sfb__ssp_is_applied(&f->formed, 0, t)) return 1;
    struct own *o = find_own(f, t);
    return o && o->summed[j];
}

/* One more push of chunk j of clock t held. */
static int count_push(struct fms *f, int64_t t, uint32_t j)
{
    for (size_t i = 0; i < f->ntally; i++)
        if (f->tally[i].clock == t && f->tally[i].chunk == j) {
            f->tally[i].have++;
            return 0;
        }
    if (sfb__reserve((void **)&f->tally, &f->tally_cap, (f->ntally + 1) * sizeof *f->tally))
        return -ENOMEM;
    f->tally[f->ntally++] = (struct tally){t, j, 1};
    return 0;
}

static int hold(struct held **v, size_t *n, size_t *cap, struct sfb__buf *buf,
                const struct sfb__wire_hdr *h, const uint8_t *payload)
{
    if (sfb__reserve((void **)v, cap, (*n + 1) * sizeof **v)) return -ENOMEM;
    sfb__buf_ref(buf);
    (*v)[(*n)++] = (struct held){buf, payload, h->origin, h->s, h->clock, 0, 1, 0.0f};
    return 0;
}

/* The first NaN or infinity among n numbers of a payload in the rows'
 * precision, or n. */
static size_t first_nonfinite(const struct fms *f, const uint8_t *payload, size_t n)
{
    return f->prec == SFB_WIRE_BF16 ? sfb__bf16_first_nonfinite(payload, n)
                                    : sfb__first_nonfinite(payload, n);
}

/* Rows holding a NaN or an infinity (checksummed: as their origin built
 * them) would poison every replica: the job fails naming the origin, its
 * number `at` (of the held rows h) named by row and column. A summed
 * chunk is checked block by block as it is applied (add_sum: nothing of
 * a block that holds one is added); a push in its sum, which is
 * non-finite when any part is (form_sums): one pass over the sum instead
 * of one over each push. */
static void reject_rows(struct fms *f, const struct held *h, size_t at)
{
    char why[96];
    snprintf(why, sizeof why, "row %llu, column %llu of its rows is not a finite number",
             (unsigned long long)(h->s + at / f->D), (unsigned long long)(at % f->D));
    f->rejected++;
    /* (a sum comes from its owner: origin and sender) */
    sfb__comm_reject_update(f->c, h->origin, h->origin, h->clock, f->id, why);
}

/* The factors of a part (pt->n > 0) for rows [r0, r0 + k) of the own block:
 * 1 and why set when the scale, B's columns of those rows or c hold a
 * number that is not finite. */
static int factors_nonfinite(const struct fms *f, const struct part *pt, uint32_t r0, uint32_t k,
                             char *why, size_t cap)
{
    uint32_t kb = f->r1 - f->r0;
    const float *b = (const float *)(const void *)pt->p, *c = b + (size_t)pt->n * kb;
    if (!isfinite(pt->scale)) {
        snprintf(why, cap, "its factors' scale is not a finite number");
        return 1;
    }
    for (uint32_t i = 0; i < pt->n; i++) {
        size_t at = sfb__first_nonfinite(b + (size_t)i * kb + (r0 - f->r0), k);
        if (at < k) {
            snprintf(why, cap, "its factors' B: sample %u, row %zu is not a finite number", i,
                     r0 + at);
            return 1;
        }
        if ((at = sfb__first_nonfinite(c + (size_t)i * f->D, f->D)) < f->D) {
            snprintf(why, cap, "its factors' c: sample %u, column %zu is not a finite number", i,
                     at);
            return 1;
        }
    }
    return 0;
}

/* A chunk's sum (rows r0.., n numbers) holds a NaN or an infinity: the
 * first part, in rank order, that holds one is rejected, naming its
 * origin (the own part: the engine's caller published it past the job's
 * check); parts all finite: the sum overflowed, which is this rank's to
 * report. Returns the job's failure. */
static int reject_sum(struct fms *f, int64_t t, uint32_t r0, size_t n)
{
    char why[128];
    for (uint32_t r = 0; r < f->world; r++) {
        const struct part *pt = &f->parts[r];
        if (pt->n) {
            if (!factors_nonfinite(f, pt, r0, (uint32_t)(n / f->D), why, sizeof why)) continue;
            f->rejected++;
            sfb__comm_reject_update(f->c, r, r, t, f->id, why);
            return sfb__comm_check(f->c);
        }
        size_t at = r == f->rank ? sfb__first_nonfinite(pt->p, n) : first_nonfinite(f, pt->p, n);
        if (at == n) continue;
        snprintf(why, sizeof why, "row %llu, column %llu of its rows is not a finite number",
                 (unsigned long long)(r0 + at / f->D), (unsigned long long)(at % f->D));
        f->rejected++;
        sfb__comm_reject_update(f->c, r, r, t, f->id, why);
        return sfb__comm_check(f->c);
    }
    snprintf(why, sizeof why, "the sum of every rank's rows %u.. overflows float32", r0);
    sfb__comm_reject_update(f->c, f->rank, f->rank, t, f->id, why);
    return sfb__comm_check(f->c);
}

/* A replay: origin's push of clock t of the chunk starting at row s (or,
 * whole, of every chunk: its factors) meets one held already (rows of that
 * chunk, or factors) or a chunk summed already. */
static int pushed_before(struct fms *f, uint32_t origin, int64_t t, uint32_t s, int whole)
{
    for (uint32_t j = 0, nj = chunks_of(f, f->rank); j < nj; j++) {
        uint32_t r0, r1;
        chunk_rows_of(f, f->rank, j, &r0, &r1);
        if ((whole || r0 == s) && summed_already(f, t, j)) return 1;
    }
    for (size_t i = 0; i < f->npush; i++) {
        const struct held *p = &f->push[i];
        if (p->origin == origin && p->clock == t && (whole || p->n || p->s == s)) return 1;
    }
    return 0;
}

/* A push of the factors of the own block (DENSE_ROWS flagged FACTORS, its
 * length checked by the decoder): held, counting for every chunk. */
static const char *take_factors(struct fms *f, struct sfb__buf *buf,
                                const struct sfb__wire_hdr *h, const uint8_t *payload)
{
    uint32_t n = sfb__wire_factor_samples(h), said;
    float scale;
    memcpy(&scale, payload, 4);
    memcpy(&said, payload + 4, 4);
    if (h->s != f->r0 || h->k != f->r1 - f->r0)
        return "factors of rows that are not this rank's block";
    if (said != n) return "factors whose sample count disagrees with their length";
    if (pushed_before(f, h->origin, h->clock, h->s, 1)) return "replays a push already received";
    if (hold(&f->push, &f->npush, &f->push_cap, buf, h, payload + SFB_WIRE_FACTORS_PREFIX))
        return "out of memory";
    struct held *p = &f->push[f->npush - 1];
    p->n = n;
    p->scale = scale;
    p->left = chunks_of(f, f->rank);
    for (uint32_t j = 0; j < p->left; j++)
        if (count_push(f, h->clock, j)) return "out of memory";
    return NULL;
}

/* One decoded frame: a push for the own block or a summed block. */
static void take(struct fms *f, struct sfb__buf *buf, int from, const struct sfb__wire_hdr *h,
                 const uint8_t *payload)
{
    const char *why = NULL;
    uint32_t j = 0;
    int factors = h->type == SFB_WIRE_DENSE_ROWS && (h->flags & SFB_WIRE_F_FACTORS);
    uint32_t b = h->type != SFB_WIRE_DENSE_ROWS ? f->world
                 : factors                      ? f->rank
                                                : block_of(f, h->s, h->k, &j);
    if (h->type != SFB_WIRE_DENSE_ROWS)
        why = "not a DENSE_ROWS frame (is every worker running the same --sync?)";
    else if (h->matrix != f->id)
        why = "rows of a matrix not synchronized by FMS here (is every worker running the "
              "same --sync?)";
    else if (b == f->world)
        why = "rows are not one chunk of an owner's block";
    else if (h->clock < 0)
        why = "negative clock";
    else if (h->origin == f->rank)
        why = "claims to carry this rank's own update";
    else if ((h->flags & SFB_WIRE_F_PREC_MASK) >> SFB_WIRE_F_PREC_SHIFT != f->prec)
        why = f->prec == SFB_WIRE_BF16 ? "rows in float32 where this rank's dense_dtype is "
                                         "bf16 (is every worker running the same --dense-dtype?)"
                                       : "rows in bfloat16 where this rank's dense_dtype is "
                                         "f32 (is every worker running the same --dense-dtype?)";
    else if (factors)
        why = take_factors(f, buf, h, payload);
    else if (b == f->rank) {
        /* a push of origin's ΔA rows of a chunk of the own block */
        if (pushed_before(f, h->origin, h->clock, h->s, 0))
            why = "replays a push already received";
        else if (hold(&f->push, &f->npush, &f->push_cap, buf, h, payload) ||
                 count_push(f, h->clock, j))
            why = "out of memory";
    } else if (b == h->origin) {
        /* a chunk of the owner's summed block; it includes the own push,
         * so the own ΔA of that clock is still held unless this is a
         * replay (of a chunk applied, or held) */
        struct own *o = find_own(f, h->clock);
        if (sfb__ssp_is_applied(f->env.ssp, b, h->clock) ||
            holds(f->sum, f->nsum, b, h->clock, h->s))
            why = "replays a summed block already received";
        else if (!o)
            why = "a sum of a clock this rank has not pushed yet";
        else if (!o->pushed[f->chunk_base[b] + j])
            why = "a sum of rows this rank has not pushed yet";
        else if (o->done[f->chunk_base[b] + j])
            why = "replays a summed block already received";
        else if (hold(&f->sum, &f->nsum, &f->sum_cap, buf, h, payload))
            why = "out of memory";
    } else {
        why = "a push for a block this rank does not own";
    }
    if (!why) return;
    f->rejected++;
    SFB_LOG_W("fms: rejected a frame from rank %d (origin %u, clock %lld, rows %u+%u): %s", from,
              h->origin, (long long)h->clock, h->s, h->k, why);
}

static void take_frame(struct fms *f, struct sfb__frame *fr)
{
    struct sfb__wire_hdr h;
    const uint8_t *payload;
    /* validated in full by comm's on_frame */
    sfb__wire_trusted(fr->data, &h, &payload);
    take(f, fr->buf, (int)fr->src, &h, payload);
    sfb__buf_put(fr->buf);
}

/* take_frame as the waiter's take (sfb__sync_waiter) */
static void waiter_take(void *priv, struct sfb__frame *fr)
{
    take_frame(priv, fr);
}

/* While a send waits for queue space: takes what arrived (the receivers of
 * this rank's sends may be waiting on the same). */
static void absorb(struct fms *f)
{
    if (f->env.absorb) sfb__sync_take_arrived(f->c, f->env.absorb, f->env.absorb_user);
    else sfb__sync_take_arrived(f->c, waiter_take, f);
}

/* Sends hdr + buf[off, off + len) to dst, waiting for queue space while the
 * job is healthy (and taking what arrives meanwhile). */
static int send_to(struct fms *f, uint32_t dst, const uint8_t *hdr, struct sfb__buf *buf,
                   size_t off, size_t len)
{
    for (;;) {
        /* the bandwidth budget: sleep (in steps, watching the peers) until
         * it has room */
        double w;
        while ((w = sfb__comm_budget_wait(f->c, 0)) > 0) {
            int ret = sfb__comm_check(f->c);
            if (ret) return ret;
            sfb__sleep(SFB_MIN(w, 0.05));
        }
        int ret = sfb__comm_send(f->c, dst, hdr, SFB_WIRE_HDR_SIZE, buf, off, len, 0.01);
        if (ret == 0) {
            /* counted as the relay counts SFB's: one data message, its
             * bytes on the wire (frame header and payload) */
            f->data_msgs++;
            f->data_bytes += SFB_WIRE_HDR_SIZE + len;
        }
        if (ret != -ETIMEDOUT) return ret;
        if ((ret = sfb__comm_check(f->c))) return ret;
        absorb(f);
    }
}

/* The payload bytes of k rows: k·D numbers of f->e bytes, padded to a
 * whole number of 4-byte words (bfloat16). */
static size_t rows_len(const struct fms *f, uint32_t k)
{
    size_t n = (size_t)k * f->D * f->e;
    return n + (4 - n % 4) % 4;
}

/* Rows [r0, r1) of own (float32) as a payload: a view of own (float32),
 * or a new buffer holding them in bfloat16 (already rounded: exact). */
static int rows_payload(struct fms *f, struct sfb__buf *own, uint32_t r0, uint32_t r1,
                        struct sfb__buf **out, size_t *off)
{
    size_t row_bytes = (size_t)f->D * sizeof(float), len = rows_len(f, r1 - r0);
    if (f->prec == SFB_WIRE_F32) {
        sfb__buf_ref(own);
        *out = own;
        *off = (size_t)r0 * row_bytes;
        return 0;
    }
    int ret = sfb__comm_buf_get(f->c, len, out);
    if (ret) return ret;
    size_t n = (size_t)(r1 - r0) * f->D;
    sfb__bf16_encode((*out)->data, (const float *)(const void *)(own->data + r0 * row_bytes), n);
    memset((*out)->data + 2 * n, 0, len - 2 * n);
    *off = 0;
    return 0;
}

/* The header of this rank's rows [r0, r1) of `clock`: a push or a sum. */
static struct sfb__wire_hdr rows_hdr(const struct fms *f, int64_t clock, uint32_t r0,
                                     uint32_t r1)
{
    return (struct sfb__wire_hdr){.type = SFB_WIRE_DENSE_ROWS,
                                  .flags = (uint8_t)(f->prec << SFB_WIRE_F_PREC_SHIFT),
                                  .origin = f->rank,
                                  .sender = f->rank,
                                  .clock = clock,
                                  .matrix = f->id,
                                  .k = r1 - r0,
                                  .d = f->D,
                                  .s = r0,
                                  .payload_len = rows_len(f, r1 - r0)};
}

static int dense_hdr(struct fms *f, int64_t clock, uint32_t r0, uint32_t r1, const void *rows,
                     uint8_t hdr[SFB_WIRE_HDR_SIZE])
{
    struct sfb__wire_hdr h = rows_hdr(f, clock, r0, r1);
    struct sfb__wire_piece piece = {rows, h.payload_len};
    return sfb__comm_header(f->c, &h, &piece, 1, hdr);
}

/* Numbers the fused loops below take at a time: a block stays in the L1
 * cache from the pass that brings it in (a copy, the first part of a sum)
 * to the passes that read it again (the finiteness check, the checksum,
 * the rounding), so each pass over a chunk costs one trip to memory
 * instead of one each (the dense path is memory-bound: docs/performance.md). */
#define FUSED_BLOCK 4096u

/* o[0..m) ← scale · delta[0..m) (m at most a fused block); the index of
 * the first number that is not finite, or m. */
static size_t scale_checked(float *o, float scale, const float *delta, size_t m)
{
    sfb__vec_scale(o, scale, delta, m);
    return sfb__first_nonfinite(o, m);
}

/* The products of a clock's pushed factors over the whole own block, in
 * rank order (one sgemm each, the first overwriting), into one buffer that
 * the block's sums are then formed in, chunk by chunk, and leave from as
 * slices: an sgemm packs its c (n × D) once, not once a chunk (at 512
 * samples and 4097 columns a chunk's sgemms took 15 % longer). The parts
 * are those of the block's first chunk summed: pushes of factors are
 * whole-block, so every one is among them. */
static int block_products(struct fms *f, struct own *o)
{
    uint32_t kb = f->r1 - f->r0;
    int ret = sfb__comm_buf_get(f->c, (size_t)kb * f->D * sizeof(float), &o->sums);
    if (ret) return ret;
    float *acc = (float *)(void *)o->sums->data;
    int first = 1;
    for (uint32_t r = 0; r < f->world; r++) {
        const struct part *pt = &f->parts[r];
        if (!pt->n) continue;
        const float *b = (const float *)(const void *)pt->p;
        sfb__factors_product(kb, f->D, pt->n, pt->scale, b, kb, b + (size_t)pt->n * kb,
                             first ? 0.0f : 1.0f, acc);
        first = 0;
    }
    return 0;
}

/* The sum of the parts of chunk rows r0.. of the own block (n numbers)
 * into out (float32, or acc then rounded into out for bfloat16: the payload
 * of len bytes), its checksum fed to hs; 1 when every number is finite.
 * The factors' products first, in rank order (one sgemm each, into acc;
 * in_acc: block_products put them there already), then the rows, in rank
 * order, in blocks that stay in the cache for the check and the checksum:
 * the same order on every owner and clock, and only the owner sums. */
static int sum_chunk(struct fms *f, uint32_t r0, size_t n, size_t len, float *acc, uint8_t *out,
                     struct sfb__wire_hash *hs, int in_acc)
{
    int bf16 = f->prec == SFB_WIRE_BF16, products = in_acc;
    uint32_t bad = 0, k = (uint32_t)(n / f->D), kb = f->r1 - f->r0;
    for (uint32_t r = 0; r < f->world && !in_acc; r++) {
        const struct part *pt = &f->parts[r];
        if (!pt->n) continue;
        const float *b = (const float *)(const void *)pt->p;
        sfb__factors_product(k, f->D, pt->n, pt->scale, b + (r0 - f->r0), kb,
                             b + (size_t)pt->n * kb, products++ ? 1.0f : 0.0f, acc);
    }
    for (size_t i0 = 0; i0 < n; i0 += FUSED_BLOCK) {
        size_t m = SFB_MIN(n - i0, (size_t)FUSED_BLOCK);
        float *a = acc + i0;
        int first = !products;
        for (uint32_t r = 0; r < f->world; r++) {
            if (f->parts[r].n) continue;
            const uint8_t *p = f->parts[r].p;
            if (bf16 && r != f->rank) { /* (the own rows are float32, rounded) */
                sfb__bf16_decode(f->wide, p + 2 * i0, m);
                p = (const uint8_t *)f->wide;
            } else {
                p += 4 * i0;
            }
            if (first) memcpy(a, p, 4 * m);
            else sfb__vec_add(a, p, m);
            first = 0;
        }
        bad |= sfb__first_nonfinite(a, m) != m;
        if (bf16) { /* the sum as it travels, the own replica's too */
            sfb__bf16_encode(out + 2 * i0, a, m);
            sfb__wire_hash_update(hs, out + 2 * i0, 2 * m);
        } else {
            sfb__wire_hash_update(hs, a, 4 * m);
        }
    }
    if (bf16 && len > 2 * n) { /* whole 4-byte words */
        memset(out + 2 * n, 0, len - 2 * n);
        sfb__wire_hash_update(hs, out + 2 * n, len - 2 * n);
    }
    return !bad;
}

/* The owner's part: for every chunk of the own block whose P pushes of a
 * clock are all here (the own one is in f->own), sums them in rank order,
 * sends the sum to every peer and queues it for the own replica. */
static int form_sums(struct fms *f)
{
    size_t row_bytes = (size_t)f->D * sizeof(float);
    for (size_t ti = 0; ti < f->ntally;) {
        struct tally tl = f->tally[ti];
        struct own *o = tl.have == f->world - 1 ? find_own(f, tl.clock) : NULL;
        if (!o) {
            ti++;
            continue;
        }
        int64_t t = tl.clock;
        uint32_t r0, r1;
        chunk_rows_of(f, f->rank, tl.chunk, &r0, &r1);
        size_t n_el = (size_t)(r1 - r0) * f->D;
        for (size_t i = 0; i < f->npush; i++) {
            const struct held *p = &f->push[i];
            if (p->clock == t && (p->n || p->s == r0))
                f->parts[p->origin] = (struct part){p->rows, p->n, p->scale};
        }
        f->parts[f->rank] = (struct part){o->buf->data + (size_t)r0 * row_bytes, 0, 0.0f};
        int factors = 0;
        for (uint32_t r = 0; r < f->world; r++) factors |= f->parts[r].n != 0;
        factors &= f->prec == SFB_WIRE_F32; /* (the only precision factors travel in) */
        size_t len = rows_len(f, r1 - r0), off = 0;
        struct sfb__buf *out;
        int ret = 0;
        if (factors) { /* a slice of the block's sums */
            if (!o->sums) ret = block_products(f, o);
            if (ret) return ret;
            sfb__buf_ref(out = o->sums);
            off = (size_t)(r0 - f->r0) * row_bytes;
        } else if ((ret = sfb__comm_buf_get(f->c, len, &out))) {
            return ret;
        }
        struct sfb__wire_hdr wh = rows_hdr(f, t, r0, r1);
        struct sfb__wire_hash hs;
        uint8_t hdr[SFB_WIRE_HDR_SIZE];
        float *acc = f->prec == SFB_WIRE_BF16 ? f->acc : (float *)(void *)(out->data + off);
        if (!(ret = sfb__comm_header_begin(f->c, &wh, &hs)) &&
            !sum_chunk(f, r0, n_el, len, acc, out->data + off, &hs, factors)) {
            sfb__buf_put(out);
            return reject_sum(f, t, r0, n_el);
        }
        if (!ret) ret = sfb__wire_encode_hashed(&wh, &hs, hdr);
        if (ret) {
            sfb__buf_put(out);
            return ret;
        }
        /* this chunk's pushes are summed: release them (before the sends,
         * which may take frames and call back here) */
        f->tally[ti] = f->tally[--f->ntally];
        o->summed[tl.chunk] = 1;
        o->formed++;
        size_t k = 0;
        for (size_t i = 0; i < f->npush; i++) {
            struct held *p = &f->push[i];
            if (p->clock == t && (p->n ? --p->left == 0 : p->s == r0))
                sfb__buf_put(p->buf);
            else
                f->push[k++] = *p;
        }
        f->npush = k;
        struct sfb__wire_hdr me = {.origin = f->rank, .clock = t, .s = r0};
        if (hold(&f->sum, &f->nsum, &f->sum_cap, out, &me, out->data + off)) ret = -ENOMEM;
        /* to rank + 1, rank + 2, ...: owners summing the same chunk do not
         * all send to the same peer first (its ingress would be shared by
         * every owner while the others' idle) */
        for (uint32_t i = 1; i < f->world && !ret; i++)
            ret = send_to(f, (f->rank + i) % f->world, hdr, out, off, len);
        sfb__buf_put(out);
        if (ret) return ret;
        if (o->formed == chunks_of(f, f->rank) && (ret = sfb__ssp_mark(&f->formed, 0, t)))
            return ret;
        ti = 0; /* the sends may have taken frames: the list changed */
    }
    return 0;
}

/* A summed chunk's n numbers (rows, whole: contiguous in the replica too;
 * float32, or bfloat16 widened block by block) into the replica: dst +=
 * sum, or dst += sum − mine where the own push is in it already. In
 * blocks that stay in the L1 cache from the finiteness check (`checked`:
 * a peer's sum) to the add, so the sum costs one trip to memory; the
 * first number that is not finite, its block not added, or n. */
static size_t add_sum(struct fms *f, float *dst, const uint8_t *sum, const float *mine, size_t n,
                      int checked)
{
    for (size_t i0 = 0; i0 < n; i0 += FUSED_BLOCK) {
        size_t m = SFB_MIN(n - i0, (size_t)FUSED_BLOCK), at;
        const uint8_t *p = sum + 4 * i0;
        if (f->prec == SFB_WIRE_BF16) {
            sfb__bf16_decode(f->wide, sum + 2 * i0, m); /* (non-finite stays so) */
            p = (const uint8_t *)f->wide;
        }
        if (checked && (at = sfb__first_nonfinite(p, m)) < m)
            return i0 + at;
        if (mine) sfb__vec_add_diff(dst + i0, p, mine + i0, m);
        else sfb__vec_add(dst + i0, p, m);
    }
    return n;
}

static int cmp_held(const void *x, const void *y)
{
    const struct held *a = x, *b = y;
    if (a->clock != b->clock) return a->clock < b->clock ? -1 : 1;
    if (a->origin != b->origin) return a->origin < b->origin ? -1 : 1;
    return a->s < b->s ? -1 : a->s > b->s;
}

/* Applies every summed chunk with clock ≤ limit as sum − own push; a
 * block's last chunk marks it applied. */
static int apply_ready(struct fms *f, int64_t limit, int64_t now_clock, int64_t required,
                       struct sfb__sync_clock *acct)
{
    if (f->nsum == 0) return 0;
    qsort(f->sum, f->nsum, sizeof *f->sum, cmp_held);
    size_t n = 0;
    while (n < f->nsum && f->sum[n].clock <= limit)
        n++;
    if (n == 0) return 0;
    double t0 = sfb__now(), ta = sfb__trace_on() ? sfb__trace_us() : 0;
    int64_t first = f->sum[0].clock;
    size_t row_bytes = (size_t)f->D * sizeof(float);
    int ret = 0;
    size_t i = 0; /* sums applied (their references put) */
    for (; i < n && !ret; i++) {
        struct held *s = &f->sum[i];
        struct own *o = find_own(f, s->clock);
        if (!o) { /* a sum needs all P pushes, the own one among them */
            ret = sfb__error(-EPROTO, "fms: rank %u sent the sum of clock %lld before this "
                             "rank pushed it", s->origin, (long long)s->clock);
            break;
        }
        /* (a chunk of s->origin's block: checked when taken) */
        uint32_t j = (s->s - block_start(f, s->origin)) / f->chunk_rows, r0, r1;
        chunk_rows_of(f, s->origin, j, &r0, &r1);
        /* ordered: the own push is not in the replica yet; the own
         * block's sums were checked as they were formed */
        size_t n_el = (size_t)(r1 - r0) * f->D;
        size_t at = add_sum(f, f->a->data + (size_t)r0 * f->D, s->rows,
                            f->env.ordered ? NULL
                                           : (const float *)(void *)(o->buf->data + r0 * row_bytes),
                            n_el, s->origin != f->rank);
        if (at < n_el) {
            reject_rows(f, s, at);
            ret = sfb__comm_check(f->c);
            break;
        }
        o->done[f->chunk_base[s->origin] + j] = 1;
        if (++o->applied[s->origin] == chunks_of(f, s->origin)) {
            ret = sfb__ssp_mark(f->env.ssp, s->origin, s->clock);
            if (!ret && s->origin != f->rank)
                sfb__sync_count_applied(f->hist, acct, now_clock, s->clock, required);
        }
        if (--o->left == 0) drop_own(f, o);
        sfb__buf_put(s->buf);
    }
    memmove(f->sum, f->sum + i, (f->nsum - i) * sizeof *f->sum);
    f->nsum -= i;
    acct->apply_s += sfb__now() - t0;
    sfb__trace_span(SFB__TRACK_COMPUTE, "apply", ta, first, (int32_t)f->id, -1, 0);
    return ret;
}

/* Sums as owner (also the per-matrix engine's call between publishes). */
static int waiter_serve(void *priv)
{
    struct fms *f = priv;
    return sfb__comm_world(f->c) > 1 ? form_sums(f) : 0;
}

/* Sums as owner, then applies what is ready. */
static int waiter_progress(void *priv, int64_t limit, int64_t now_clock, int64_t required,
                           struct sfb__sync_clock *acct)
{
    int ret = waiter_serve(priv);
    return ret ? ret : apply_ready(priv, limit, now_clock, required, acct);
}

/* The waiter of this engine (sfb__sync_ops.waiter): its own wait's, and
 * the per-matrix engine's for it. */
static void fms_waiter(void *priv, struct sfb__sync_waiter *w)
{
    struct fms *f = priv;
    /* FMS marks no clock published (comm_stall.c): no stall check */
    *w = (struct sfb__sync_waiter){f, waiter_take, waiter_progress, 0, 0, waiter_serve};
}

/* Receives, sums (as owner) and applies until every block has applied
 * `required`. */
static int wait_until(struct fms *f, int64_t required, int64_t limit, int64_t now_clock,
                      struct sfb__sync_clock *acct)
{
    struct sfb__sync_waiter w;
    fms_waiter(f, &w);
    return sfb__sync_wait(f->c, f->env.ssp, &w, required, limit, now_clock, acct);
}

static int fms_wait(void *priv, int64_t clock, struct sfb__sync_clock *acct)
{
    struct fms *f = priv;
    int64_t required = sfb__ssp_required(f->env.ssp, clock);
    int64_t limit = (f->env.apply_early || required == INT64_MIN) ? INT64_MAX : required;
    return wait_until(f, required, limit, clock, acct);
}

static int fms_drain(void *priv, int64_t last, struct sfb__sync_clock *acct)
{
    struct fms *f = priv;
    /* sums of later clocks stay held (sfb_job_drain's promise) */
    return wait_until(f, last, last, last + 1, acct);
}

/* A job of one worker: the own update is the whole update, applied at
 * once; the clock is complete with its last matrix. sf, or scale · delta
 * (bad: as fill_own's). */
/* The first i whose scale · delta[i] is not finite, or n. Where |scale| ≤ 1
 * no finite number overflows, and delta's own check (vectorized, reading
 * delta alone) says it. */
static size_t first_bad(float scale, const float *delta, size_t n)
{
    if (fabsf(scale) <= 1.0f) return sfb__first_nonfinite(delta, n);
    float v[FUSED_BLOCK];
    for (size_t i0 = 0; i0 < n; i0 += FUSED_BLOCK) {
        size_t m = SFB_MIN(n - i0, (size_t)FUSED_BLOCK), at;
        if ((at = scale_checked(v, scale, delta + i0, m)) < m) return i0 + at;
    }
    return n; /* (a NaN scale fails the first block) */
}

static int publish_alone(struct fms *f, int64_t clock, uint32_t m, const struct sfb_sf *sf,
                         float scale, const float *delta, size_t *bad)
{
    if (delta && bad) { /* nothing applied unless every scale · delta[i] is finite */
        size_t n = (size_t)f->env.mats[m].rows * f->env.mats[m].cols;
        if ((*bad = first_bad(scale, delta, n)) < n) return -ERANGE;
    }
    if (f->own_clock != clock) {
        f->own_clock = clock;
        f->own_left = f->nmat;
    }
    struct sfb_matrix *a = &f->env.mats[m];
    if (f->env.dense_prec && f->env.dense_prec[m] == SFB_WIRE_BF16) {
        /* the sum of one rounded update, rounded: the update rounded */
        size_t n_el = (size_t)a->rows * a->cols;
        if (sfb__reserve((void **)&f->alone, &f->alone_cap, n_el * sizeof(float)))
            return sfb__error(-ENOMEM, "fms: out of memory");
        struct sfb_matrix d = {a->rows, a->cols, f->alone};
        if (sf) {
            memset(d.data, 0, n_el * sizeof(float));
            int ret = sfb_reconstruct_apply(f->recon, &d, &sf, 1);
            if (ret) return ret;
        } else {
            for (size_t i = 0; i < n_el; i++) d.data[i] = scale * delta[i];
        }
        sfb__bf16_round(d.data, n_el);
        for (size_t i = 0; i < n_el; i++) a->data[i] += d.data[i];
    } else if (sf) {
        int ret = sfb_reconstruct_apply(f->recon, a, &sf, 1);
        if (ret) return ret;
    } else {
        size_t n_el = (size_t)a->rows * a->cols;
        for (size_t i = 0; i < n_el; i++) a->data[i] += scale * delta[i];
    }
    return --f->own_left ? 0 : sfb__ssp_mark(f->env.ssp, sfb__comm_rank(f->c), clock);
}

/* Chunk j of block b of own ← scale · delta (delta NULL: own as it is, an
 * SF's product), rounded for bfloat16, in blocks that stay in the cache
 * while they are checked (`checked`: 1 when a number is not finite, -ERANGE
 * returned) and a float32 push's are fed to its checksum: then hdr (NULL
 * for the own block) is the push's header when this returns 0. */
static int fill_chunk(struct fms *f, int64_t clock, float *own, float scale, const float *delta,
                      int checked, uint32_t b, uint32_t j, uint8_t *hdr)
{
    uint32_t r0, r1;
    chunk_rows_of(f, b, j, &r0, &r1);
    int hashed = hdr && f->prec == SFB_WIRE_F32, ret;
    struct sfb__wire_hdr wh = rows_hdr(f, clock, r0, r1);
    struct sfb__wire_hash hs;
    if (hashed && (ret = sfb__comm_header_begin(f->c, &wh, &hs))) return ret;
    size_t e0 = (size_t)r0 * f->D, e1 = (size_t)r1 * f->D;
    for (size_t i0 = e0; i0 < e1; i0 += FUSED_BLOCK) {
        size_t m = SFB_MIN(e1 - i0, (size_t)FUSED_BLOCK);
        float *o = own + i0;
        if (delta) sfb__vec_scale(o, scale, delta + i0, m);
        if (checked && sfb__first_nonfinite(o, m) < m) return -ERANGE;
        if (f->prec == SFB_WIRE_BF16) sfb__bf16_round(o, m);
        if (hashed) sfb__wire_hash_update(&hs, o, 4 * m);
    }
    return hashed ? sfb__wire_encode_hashed(&wh, &hs, hdr) : 0;
}

/* Rows [r0, r1) of the own ΔA from an SF streamed chunk by chunk (one
 * sgemm, overwriting them). */
static void sf_rows(const struct fms *f, const struct sfb_sf *sf, float *own, uint32_t r0,
                    uint32_t r1)
{
    sfb__reconstruct_rows(sf, r0, r1, own + (size_t)r0 * f->D);
}

int sfb__fms_factors_smaller(uint64_t rows, uint64_t D, uint64_t n)
{
    return rows && SFB_WIRE_FACTORS_PREFIX + n * (rows + D) * 4 < rows * D * 4;
}

/* Block b's pushes carry factors (n samples): fewer bytes than its rows. */
static int factors_smaller(const struct fms *f, uint32_t b, uint32_t n)
{
    return sfb__fms_factors_smaller(block_start(f, b + 1) - block_start(f, b), f->D, n);
}

/* Block b's rows of an SF (dense c, s ≥ 1) pushed to their owner as
 * factors (a DENSE_ROWS frame flagged FACTORS, wire.h): the scale, n, B's
 * columns of those rows and the whole c, each piece hashed right after it
 * is copied out (still in the cache);
 * the owner forms the sum of every rank's part of its block (sum_chunk),
 * the product's work moved to it: the same flops, fewer bytes. */
static int push_factors(struct fms *f, int64_t clock, const struct sfb_sf *sf, uint32_t b)
{
    uint32_t r0 = block_start(f, b), kb = block_start(f, b + 1) - r0, n = sf->s;
    size_t len = SFB_WIRE_FACTORS_PREFIX + (size_t)n * (kb + f->D) * sizeof(float);
    struct sfb__buf *buf;
    int ret = sfb__comm_buf_get(f->c, len, &buf);
    if (ret) return ret;
    struct sfb__wire_hdr h = rows_hdr(f, clock, r0, r0 + kb);
    h.flags |= SFB_WIRE_F_FACTORS;
    h.payload_len = len;
    struct sfb__wire_hash hs;
    uint8_t hdr[SFB_WIRE_HDR_SIZE];
    if (!(ret = sfb__comm_header_begin(f->c, &h, &hs))) {
        uint8_t *p = buf->data;
        memcpy(p, &sf->scale, 4);
        memcpy(p + 4, &n, 4);
        sfb__wire_hash_update(&hs, p, SFB_WIRE_FACTORS_PREFIX);
        float *bp = (float *)(void *)(p + SFB_WIRE_FACTORS_PREFIX), *cp = bp + (size_t)n * kb;
        for (uint32_t i = 0; i < n; i++) {
            memcpy(bp + (size_t)i * kb, sf->b + (size_t)i * sf->rows + r0, kb * sizeof(float));
            sfb__wire_hash_update(&hs, bp + (size_t)i * kb, kb * sizeof(float));
        }
        size_t nc = (size_t)n * f->D;
        for (size_t i0 = 0; i0 < nc; i0 += FUSED_BLOCK) {
            size_t m = SFB_MIN(nc - i0, (size_t)FUSED_BLOCK);
            memcpy(cp + i0, sf->c + i0, m * sizeof(float));
            sfb__wire_hash_update(&hs, cp + i0, m * sizeof(float));
        }
        if (!(ret = sfb__wire_encode_hashed(&h, &hs, hdr))) ret = send_to(f, b, hdr, buf, 0, len);
    }
    sfb__buf_put(buf);
    return ret;
}

/* The own ΔA of `clock`, from the SF or scale · delta (bad non-NULL: every
 * number of the update checked before anything leaves; the first one not
 * finite → *bad, -ERANGE, nothing sent). One pass over the matrix forms
 * it, checks it and hashes the float32 pushes, block by block in the cache
 * (the own block first, which the arriving pushes are summed with, then
 * the pushes in the order they leave); then it is added to the own
 * replica (read-my-writes). Where nothing needs checking first (an SF with
 * dense c whose factors the job checked: bad NULL) the update is streamed:
 * the own block's rows by one sgemm, then each push's rows by an sgemm of
 * their own, the push leaving before the next is computed, and the sums
 * that its arrivals complete formed between them: the reduction runs while
 * the product is still being computed, as DDP's buckets leave during
 * backward. Otherwise the product is formed whole (one sgemm into zeros)
 * and checked, then the pushes leave. */
static int push_update(struct fms *f, int64_t clock, const struct sfb_sf *sf, float scale,
                       const float *delta, struct sfb__buf *staged, size_t *bad)
{
    struct sfb__comm *c = f->c;
    if (sf && (sf->rows != f->K || sf->cols != f->D))
        return sfb__error(-SFB_ESHAPE, "fms: publish needs a %u x %u update, got %u x %u", f->K,
                          f->D, sf->rows, sf->cols);
    if (find_own(f, clock) || sfb__ssp_is_applied(f->env.ssp, f->rank, clock))
        return sfb__error(-EALREADY, "fms: clock %lld published twice", (long long)clock);
    size_t n_el = (size_t)f->K * f->D;
    uint32_t nchunks = f->chunk_base[f->world], mine = chunks_of(f, f->rank);
    uint32_t npush = nchunks - mine;
    struct sfb__buf *buf = NULL;
    struct push *push = f->outgoing;
    uint32_t *counts = calloc(1, f->world * sizeof(uint32_t) + 2 * (size_t)nchunks + mine);
    /* a float32 update in sfb_job_dense_buffer's buffer, scale 1: sent from
     * where the caller wrote it (the fills below check and hash it) */
    int in_place = staged && !sf && scale == 1.0f && f->prec == SFB_WIRE_F32;
    int ret = !counts ||
                      sfb__reserve((void **)&f->own, &f->own_cap, (f->nown + 1) * sizeof *f->own)
                  ? -ENOMEM
              : in_place ? 0
                         : sfb__comm_buf_get(c, n_el * sizeof(float), &buf);
    if (ret) goto fail;
    if (in_place) sfb__buf_ref(buf = staged);
    struct sfb_matrix own = {f->K, f->D, (float *)(void *)buf->data};
    int stream = sf && !sf->sparse_c && sf->s > 0 && sf->b && sf->c && !bad;
    /* ordered (no read-my-writes: the own rows of other blocks are never
     * needed), float32: owners whose rows' factors are the fewer bytes get
     * those, their sums formed by their owner (push_factors) */
    int factors = stream && f->env.ordered && f->prec == SFB_WIRE_F32 && f->factor_push &&
                  sf->s <= sfb__comm_max_s(c);
    if (stream && !factors) {
        sf_rows(f, sf, own.data, block_start(f, f->rank), block_start(f, f->rank + 1));
    } else if (sf && !stream) {
        memset(buf->data, 0, n_el * sizeof(float));
        if ((ret = sfb_reconstruct_apply(f->recon, &own, &sf, 1))) goto fail;
    }
    const float *src = sf || in_place ? NULL : delta;
    for (uint32_t j = 0; j < mine && !ret; j++)
        ret = fill_chunk(f, clock, own.data, scale, src, bad != NULL, f->rank, j, NULL);
    for (uint32_t i = 0; i < npush && !ret && !stream; i++)
        ret = fill_chunk(f, clock, own.data, scale, src, bad != NULL, push[i].b, push[i].j,
                         push[i].hdr);
    if (ret == -ERANGE) /* the first number not finite, in the matrix's order */
        *bad = sf ? sfb__first_nonfinite(own.data, n_el) : first_bad(scale, delta, n_el);
    if (ret) goto fail;
    /* held from now on (buf's reference with it): while the pushes leave,
     * send_to takes frames, among them maybe a sum of this clock already */
    uint8_t *done = (uint8_t *)(counts + f->world), *pushed = done + nchunks;
    f->own[f->nown++] =
        (struct own){buf, NULL, clock, nchunks, 0, counts, done, pushed + nchunks, pushed};
    for (uint32_t b = 0; b < f->world && !ret; b++)
        if (chunks_of(f, b) == 0) /* an empty block is trivially summed */
            ret = sfb__ssp_mark(f->env.ssp, b, clock);
    /* the factors leave first (the owners' sgemms run while this rank
     * forms its own block's rows), each owner's chunks marked pushed
     * before (its sums may come back during the sends) */
    for (uint32_t i = 0; i < npush && !ret && factors; i++) {
        uint32_t b = push[i].b;
        if (push[i].j != 0 || !factors_smaller(f, b, sf->s)) continue;
        for (uint32_t j = 0; j < chunks_of(f, b); j++) pushed[f->chunk_base[b] + j] = 1;
        ret = push_factors(f, clock, sf, b);
    }
    if (factors && !ret)
        sf_rows(f, sf, own.data, block_start(f, f->rank), block_start(f, f->rank + 1));
    for (uint32_t i = 0; i < npush && !ret; i++) {
        uint32_t b = push[i].b, r0, r1;
        if (pushed[f->chunk_base[b] + push[i].j]) continue; /* (its factors) */
        chunk_rows_of(f, b, push[i].j, &r0, &r1);
        struct sfb__buf *pay;
        size_t off, len = rows_len(f, r1 - r0);
        if (stream) {
            sf_rows(f, sf, own.data, r0, r1);
            if ((ret = fill_chunk(f, clock, own.data, scale, NULL, 0, b, push[i].j,
                                  push[i].hdr)))
                break;
        }
        if ((ret = rows_payload(f, buf, r0, r1, &pay, &off))) break;
        if (f->prec != SFB_WIRE_F32) /* (float32: hashed by fill_chunk) */
            ret = dense_hdr(f, clock, r0, r1, pay->data + off, push[i].hdr);
        pushed[f->chunk_base[b] + push[i].j] = 1;
        if (!ret) ret = send_to(f, b, push[i].hdr, pay, off, len);
        sfb__buf_put(pay);
        if (stream && !ret) { /* the pushes that arrived meanwhile: their sums leave */
            absorb(f);
            ret = form_sums(f);
        }
    }
    if (ret) return ret;
    /* read-my-writes (ordered: the sums alone, the same bytes on every
     * rank); no sum of this clock is applied before the next wait */
    if (!f->env.ordered) sfb__vec_add(f->a->data, own.data, n_el);
    /* the own chunks may be complete already */
    return form_sums(f);
fail:
    if (buf) sfb__buf_put(buf);
    free(counts);
    return ret;
}

static int fms_publish_one(void *priv, int64_t clock, uint32_t m, const struct sfb_sf *sf,
                           size_t *bad)
{
    struct fms *f = priv;
    if (sfb__comm_world(f->c) == 1) {
        /* the product goes straight into the replica: the factors checked
         * instead (a product that overflows a lone replica harms no peer) */
        char what[96];
        if (bad && sfb__sf_nonfinite(sf, what, sizeof what)) {
            *bad = 0;
            return -ERANGE;
        }
        return publish_alone(f, clock, m, sf, 0, NULL, NULL);
    }
    return push_update(f, clock, sf, 0, NULL, NULL, bad);
}

static int fms_publish_dense(void *priv, int64_t clock, uint32_t m, float scale,
                             const float *delta, struct sfb__buf *staged, size_t *bad)
{
    struct fms *f = priv;
    if (sfb__comm_world(f->c) == 1) return publish_alone(f, clock, m, NULL, scale, delta, bad);
    return push_update(f, clock, NULL, scale, delta, staged, bad);
}

static int fms_publish(void *priv, int64_t clock, const struct sfb_sf *sf, uint32_t n)
{
    struct fms *f = priv;
    if (sfb__comm_world(f->c) > 1 && n != 1)
        return sfb__error(-SFB_ESHAPE, "fms: publish needs one %u x %u update, got %u", f->K,
                          f->D, n);
    int ret = 0;
    for (uint32_t m = 0; m < n && !ret; m++) ret = fms_publish_one(priv, clock, m, &sf[m], NULL);
    return ret;
}

static const uint64_t *fms_hist(void *priv)
{
    return ((struct fms *)priv)->hist;
}

/* Every message FMS sends is data (pushes and sums); control frames are
 * the comm layer's, as for SFB. Compute thread, like every send. */
static void fms_report(void *priv, struct sfb__sync_report *rep)
{
    const struct fms *f = priv;
    memset(rep, 0, sizeof *rep);
    rep->data_msgs = f->data_msgs;
    rep->data_bytes = f->data_bytes;
}

/* Sums leave once formed, in this rank's calls only (sfb__sync_ops.served):
 * through the newest clock whose own-block sums were all formed. */
static int64_t fms_served(void *priv)
{
    const struct fms *f = priv;
    return f->world > 1 && chunks_of(f, f->rank) ? sfb__ssp_applied(&f->formed, 0) : INT64_MAX;
}

/* Each row block pushed to its owner and the sums of the own block sent
 * back: 2·K·D·(P−1)/P values. */
static double fms_formula(uint64_t rows, uint64_t cols, uint32_t world, uint32_t batch)
{
    (void)batch;
    return 2.0 * (double)rows * (double)cols * (world - 1) / world * 4.0;
}

const struct sfb__sync_ops sfb__fms_ops = {
    .priv_size = sizeof(struct fms),
    .open = fms_open,
    .close = fms_close,
    .wait = fms_wait,
    .publish = fms_publish,
    .publish_one = fms_publish_one,
    .publish_dense = fms_publish_dense,
    .drain = fms_drain,
    .staleness_hist = fms_hist,
    .report = fms_report,
    .waiter = fms_waiter,
    .served = fms_served,
};

const struct sfb__sync_desc sfb__fms_desc = {
    .name = "fms",
    .summary = "full matrices through sharded parameter servers",
    .overlays = 0,
    .formula_bytes = fms_formula,
    .ops = &sfb__fms_ops,
};
