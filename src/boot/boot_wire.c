/* The env rendezvous's messages (format: src/boot/bootstrap.h): the header
 * codec, the checks every received header passes, and the TABLE unpacking —
 * everything a peer's bytes reach before the socket code trusts them. Kept
 * apart from the sockets so the fuzz targets (boot_hello, boot_table) reach
 * it alone. */
#include "config.h"
#include "src/boot/bootstrap_impl.h"
#include "src/base/bytes.h"
#include "src/base/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- little-endian header ------------------------------------------------ */

void sfb__boot_hdr_encode(const struct sfb__boot_hdr *h, uint8_t out[SFB__BOOT_HDR_SIZE])
{
    sfb__put_u32(out, h->magic);
    sfb__put_u16(out + 4, h->version);
    sfb__put_u16(out + 6, h->type);
    sfb__put_u64(out + 8, h->key);
    sfb__put_u32(out + 16, h->rank);
    sfb__put_u32(out + 20, h->world);
    sfb__put_u32(out + 24, h->seq);
    sfb__put_u32(out + 28, h->len);
}

void sfb__boot_hdr_decode(const uint8_t in[SFB__BOOT_HDR_SIZE], struct sfb__boot_hdr *h)
{
    h->magic = sfb__get_u32(in);
    h->version = sfb__get_u16(in + 4);
    h->type = sfb__get_u16(in + 6);
    h->key = sfb__get_u64(in + 8);
    h->rank = sfb__get_u32(in + 16);
    h->world = sfb__get_u32(in + 20);
    h->seq = sfb__get_u32(in + 24);
    h->len = sfb__get_u32(in + 28);
}

/* Checks the fields every message shares. Returns 0 or -code with `why`. */
int sfb__boot_check_common(const struct sfb__boot_hdr *h, uint16_t type, uint32_t world, char *why,
                        size_t why_len)
{
    if (h->magic != SFB__BOOT_MAGIC) {
        snprintf(why, why_len, "bad magic 0x%08" PRIx32, h->magic);
        return -SFB_EFORMAT;
    }
    if (h->version != SFB__BOOT_VERSION) {
        snprintf(why, why_len, "version %u, expected %u", h->version, SFB__BOOT_VERSION);
        return -SFB_EVERSION;
    }
    if (h->type != type) {
        snprintf(why, why_len, "message type %u, expected %u", h->type, type);
        return -SFB_EFORMAT;
    }
    if (h->world != world) {
        snprintf(why, why_len, "world size %" PRIu32 ", expected %" PRIu32, h->world, world);
        return -SFB_ECONFIG;
    }
    return 0;
}

int sfb__boot_check_hello(const struct sfb__boot_hdr *h, uint64_t key, int key_given,
                          uint32_t world, const unsigned char *seen, char *why, size_t why_len)
{
    int r = sfb__boot_check_common(h, SFB__BOOT_HELLO, world, why, why_len);
    if (r) return r;
    if (h->key != (key_given ? key : 0)) {
        if (key_given)
            snprintf(why, why_len, "rank %" PRIu32 ": job key 0x%016" PRIx64 ", expected 0x%016" PRIx64,
                     h->rank, h->key, key);
        else
            snprintf(why, why_len, "rank %" PRIu32 ": carries job key 0x%016" PRIx64
                     " but rank 0 has no SFB_JOB_KEY", h->rank, h->key);
        return -SFB_EJOBKEY;
    }
    if (h->rank == 0 || h->rank >= world) {
        snprintf(why, why_len, "rank %" PRIu32 " out of range 1..%" PRIu32, h->rank, world - 1);
        return -SFB_EFORMAT;
    }
    if (seen[h->rank]) {
        snprintf(why, why_len, "duplicate rank %" PRIu32, h->rank);
        return -SFB_EFORMAT;
    }
    if (h->seq != 0 || h->len != 0) {
        snprintf(why, why_len, "rank %" PRIu32 ": hello with seq %" PRIu32 " len %" PRIu32
                 ", expected 0 and 0", h->rank, h->seq, h->len);
        return -SFB_EFORMAT;
    }
    return 0;
}


int sfb__boot_unpack_table(int world, int rank, uint8_t *t, size_t tlen, void **all, size_t *lens)
{
    size_t head = 4 * (size_t)world, sum = 0;
    if (tlen < head) { /* callers check this; kept so the function stands alone */
        free(t);
        return sfb__error(-SFB_EFORMAT, "bootstrap: rank %d: table of %zu bytes is shorter than "
                          "its %zu-byte length list", rank, tlen, head);
    }
    for (int i = 0; i < world; i++) {
        lens[i] = sfb__get_u32(t + 4 * (size_t)i);
        if (lens[i] > SFB__BOOTSTRAP_WIRE_BLOB || (sum += lens[i]) > tlen - head) {
            free(t);
            return sfb__error(-SFB_EFORMAT, "bootstrap: rank %d: table entry for rank %d has len %zu "
                              "beyond the table's %zu bytes", rank, i, lens[i], tlen);
        }
    }
    if (sum != tlen - head) {
        free(t);
        return sfb__error(-SFB_EFORMAT, "bootstrap: rank %d: table lengths add up to %zu, payload has %zu",
                          rank, sum, tlen - head);
    }
    memmove(t, t + head, sum);
    *all = t;
    return 0;
}
