/* The libsvm reader's side file "<path>.meta" (Bösen's format): dimension,
 * classes, index base and sample count for a libsvm file, read before it. */
#include "src/data/libsvm.h"

#include "src/base/util.h"
#include "src/base/fileio.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Parses "<path>.meta" (Bösen): "key: value" lines; unknown keys are ignored
 * (Bösen writes several we do not need). Missing file: 0. */
int sfb__libsvm_read_meta(const char *path, struct sfb_libsvm_settings *s, uint64_t *num_train)
{
    char mpath[4096];
    if (snprintf(mpath, sizeof mpath, "%s.meta", path) >= (int)sizeof mpath)
        return sfb__error(-ENAMETOOLONG, "%s: path too long to look for its .meta file", path);
    struct stat st;
    if (stat(mpath, &st) != 0) return 0; /* no meta file */
    int fd;
    int r0 = sfb__open_regular(mpath, "a libsvm .meta file", &fd, NULL);
    if (r0) return r0;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return sfb__error(-ENOMEM, "%s: out of memory", mpath);
    }
    char line[1024];
    uint64_t ln = 0;
    int r = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        char *c = line;
        while (*c == ' ' || *c == '\t') c++;
        if (*c == '#' || *c == '\n' || *c == '\r' || *c == '\0') continue;
        char *colon = strchr(c, ':');
        if (!colon) {
            r = sfb__error(-SFB_EFORMAT, "%s:%" PRIu64 ":%zu: expected 'key: value'", mpath, ln,
                           (size_t)(c - line) + 1);
            break;
        }
        size_t klen = (size_t)(colon - c);
        while (klen && (c[klen - 1] == ' ' || c[klen - 1] == '\t')) klen--;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        size_t vcol = (size_t)(v - line) + 1;
        char *vend = v;
        while (*vend && *vend != '\n' && *vend != '\r' && *vend != ' ' && *vend != '\t') vend++;
        int known = 0;
        uint64_t max = 0;
#define KEY(name) (klen == strlen(name) && memcmp(c, name, klen) == 0)
        if (KEY("num_train_total")) known = 1, max = UINT64_MAX;
        else if (KEY("feature_dim")) known = 2, max = UINT32_MAX;
        else if (KEY("num_labels")) known = 3, max = UINT32_MAX;
        else if (KEY("feature_one_based")) known = 4, max = 1;
#undef KEY
        if (!known) continue;
        uint64_t x = 0;
        int ok = v < vend;
        for (char *q = v; q < vend && ok; q++) {
            if (!(*q >= '0' && *q <= '9') || x > (UINT64_MAX - 9) / 10) ok = 0;
            else x = x * 10 + (uint64_t)(*q - '0');
        }
        if (!ok || x > max) {
            r = sfb__error(-SFB_EFORMAT, "%s:%" PRIu64 ":%zu: bad value for %.*s (expected an "
                           "integer in [0, %" PRIu64 "])", mpath, ln, vcol, (int)klen, c, max);
            break;
        }
        switch (known) {
        case 1: *num_train = x; break;
        case 2: if (!s->dim) s->dim = (uint32_t)x; break;
        case 3: if (!s->classes) s->classes = (uint32_t)x; break;
        case 4: if (s->index_base == SFB_INDEX_AUTO) s->index_base = x ? SFB_INDEX_1 : SFB_INDEX_0;
                break;
        }
    }
    if (!r && ferror(f)) r = sfb__error(-EIO, "%s: read error", mpath);
    fclose(f);
    return r;
}
