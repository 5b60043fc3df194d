#include "config.h"
#include "src/boot/agree.h"
#include "src/boot/bootstrap.h"
#include "src/base/bytes.h"
#include "src/base/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* The line of text[0..len) starting at *pos: its key and value; advances
 * *pos past the newline. Returns 0 at the end. */
static int next_line(const char *text, size_t len, size_t *pos, const char **key, size_t *klen,
                     const char **val, size_t *vlen)
{
    if (*pos >= len) return 0;
    const char *s = text + *pos, *nl = memchr(s, '\n', len - *pos);
    size_t l = nl ? (size_t)(nl - s) : len - *pos;
    *pos += l + (nl != NULL);
    const char *eq = memchr(s, '=', l);
    *key = s;
    *klen = eq ? (size_t)(eq - s) : l;
    *val = eq ? eq + 1 : s + l;
    *vlen = eq ? l - *klen - 1 : 0;
    return 1;
}

#define MAX_KEYS 128

static void append(char *out, size_t cap, size_t *off, const char *fmt, ...) SFB_PRINTF(4, 5);
static void append(char *out, size_t cap, size_t *off, const char *fmt, ...)
{
    if (*off >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + *off, cap - *off, fmt, ap);
    va_end(ap);
    if (n > 0) *off = SFB_MIN(*off + (size_t)n, cap - 1);
}

int sfb__agree_verdict(const char *const *texts, const size_t *lens, uint32_t world, char *out,
                       size_t cap)
{
    /* per line of rank 0: the first rank that differs there, and how many */
    uint32_t first[MAX_KEYS] = {0}, count[MAX_KEYS] = {0};
    uint32_t layout_rank = 0; /* a rank whose keys are not rank 0's */
    int differ = 0;
    if (cap) out[0] = '\0';
    for (uint32_t r = 1; r < world; r++) {
        if (lens[r] == lens[0] && !memcmp(texts[r], texts[0], lens[0])) continue;
        differ = 1;
        size_t p0 = 0, pr = 0;
        /* set by next_line whenever it returns 1 (the zeros for gcc -O3) */
        const char *k0 = NULL, *v0 = NULL, *kr = NULL, *vr = NULL;
        size_t kl0 = 0, vl0 = 0, klr = 0, vlr = 0;
        for (uint32_t i = 0;; i++) {
            int h0 = next_line(texts[0], lens[0], &p0, &k0, &kl0, &v0, &vl0);
            int hr = next_line(texts[r], lens[r], &pr, &kr, &klr, &vr, &vlr);
            if (!h0 && !hr) break;
            if (h0 != hr || kl0 != klr || memcmp(k0, kr, kl0) || i >= MAX_KEYS) {
                if (!layout_rank) layout_rank = r;
                break;
            }
            if (vl0 != vlr || memcmp(v0, vr, vl0)) {
                if (!count[i]++) first[i] = r;
            }
        }
    }
    if (!differ) return 0;
    size_t off = 0, p0 = 0;
    const char *k0 = NULL, *v0 = NULL;
    size_t kl0 = 0, vl0 = 0;
    for (uint32_t i = 0; i < MAX_KEYS && next_line(texts[0], lens[0], &p0, &k0, &kl0, &v0, &vl0);
         i++) {
        if (!count[i]) continue;
        /* rank first[i]'s value of line i */
        size_t pr = 0;
        const char *kr = NULL, *vr = NULL;
        size_t klr = 0, vlr = 0;
        for (uint32_t j = 0; j <= i; j++)
            next_line(texts[first[i]], lens[first[i]], &pr, &kr, &klr, &vr, &vlr);
        append(out, cap, &off, "%s%.*s: rank 0 has \"%.*s\", rank %u has \"%.*s\"",
               off ? "; " : "", (int)kl0, k0, (int)SFB_MIN(vl0, 100), v0, first[i],
               (int)SFB_MIN(vlr, 100), vr);
        if (count[i] > 1) append(out, cap, &off, " (%u ranks differ)", count[i]);
    }
    if (layout_rank)
        append(out, cap, &off, "%srank %u sends other settings than rank 0 (another sfb version?)",
               off ? "; " : "", layout_rank);
    return -SFB_ECONFIG;
}

int sfb__agree(struct sfb__bootstrap *bs, uint32_t world, const char *text)
{
    if (world <= 1) return 0;
    size_t len = strlen(text);
    uint8_t mine[8];
    sfb__put_u64(mine, XXH3_64bits(text, len));
    uint8_t *hashes = malloc((size_t)world * 8);
    if (!hashes) return sfb__error(-ENOMEM, "out of memory");
    int ret = sfb__bootstrap_allgather(bs, mine, 8, hashes);
    int same = 1;
    for (uint32_t r = 0; !ret && r < world; r++)
        if (memcmp(hashes + (size_t)r * 8, mine, 8)) same = 0;
    free(hashes);
    if (ret || same) return ret;
    /* Every rank saw a difference in the same table, so all come here. */
    void *all = NULL;
    size_t *lens = calloc(world, sizeof *lens);
    const char **texts = calloc(world, sizeof *texts);
    if (!lens || !texts) {
        ret = sfb__error(-ENOMEM, "out of memory");
        goto out;
    }
    if ((ret = sfb__bootstrap_allgatherv(bs, text, len, &all, lens))) goto out;
    const char *p = all;
    for (uint32_t r = 0; r < world; p += lens[r], r++) texts[r] = p;
    char why[1200];
    if (sfb__agree_verdict(texts, lens, world, why, sizeof why))
        ret = sfb__error(-SFB_ECONFIG,
                         "settings differ between ranks: %s (every worker of a job needs the "
                         "same settings)",
                         why);
    else /* equal hashes of different texts cannot be; different hashes of equal ones neither */
        ret = sfb__error(-SFB_ECONFIG, "settings differ between ranks (hashes differ)");
out:
    free(all);
    free(lens);
    free(texts);
    return ret;
}
