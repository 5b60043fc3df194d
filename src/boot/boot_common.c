/* What the bootstrap's back ends and front end share: job keys and the
 * allgather of a world of one. Below both (src/boot/bootstrap_impl.h). */
#include "src/boot/bootstrap_impl.h"
#include "src/base/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

int sfb__bootstrap_parse_key(const char *s, uint64_t *key)
{
    if (!s || !*s) return sfb__error(-SFB_EUSAGE, "SFB_JOB_KEY: empty");
    int base = 10;
    const char *p = s;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
    } else {
        for (const char *q = p; *q; q++)
            if (!isdigit((unsigned char)*q)) base = 16;
    }
    if (!*p || strlen(p) > (base == 16 ? 16u : 20u))
        return sfb__error(-SFB_EUSAGE, "SFB_JOB_KEY '%s': not a 64-bit number", s);
    for (const char *q = p; *q; q++)
        if (!isxdigit((unsigned char)*q) || (base == 10 && !isdigit((unsigned char)*q)))
            return sfb__error(-SFB_EUSAGE, "SFB_JOB_KEY '%s': bad character '%c'", s, *q);
    errno = 0;
    unsigned long long v = strtoull(p, NULL, base);
    if (errno) return sfb__error(-SFB_EUSAGE, "SFB_JOB_KEY '%s': out of range", s);
    if (v == 0) return sfb__error(-SFB_EUSAGE, "SFB_JOB_KEY '%s': 0 is not a valid key", s);
    *key = v;
    return 0;
}

uint64_t sfb__boot_random_key(void)
{
    uint64_t k = 0;
    while (k == 0) {
        if (getrandom(&k, sizeof k, 0) != (ssize_t)sizeof k)
            k = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(sfb__now() * 1e9);
    }
    return k;
}

int sfb__boot_gather_self(struct sfb__bootstrap *bs, const void *mine, uint32_t len, void **all,
                          size_t *lens)
{
    (void)bs;
    *all = malloc((size_t)len + 1);
    if (!*all) return -ENOMEM;
    if (len) memcpy(*all, mine, len);
    lens[0] = len;
    return 0;
}

int sfb__boot_parse_int_env(const char *name, const char *s, long lo, long hi, int *out)
{
    if (!s || !*s) return sfb__error(-SFB_EUSAGE, "%s is not set", name);
    uint64_t v;
    /* an empty range (a world of 0 leaves no rank): every value is outside it */
    if (hi < lo || lo < 0)
        return sfb__error(-SFB_EUSAGE, "%s='%s': expected an integer in %ld..%ld", name, s, lo, hi);
    int r = sfb__parse_env_u64(name, s, (uint64_t)lo, (uint64_t)hi, &v);
    if (!r) *out = (int)v;
    return r;
}
