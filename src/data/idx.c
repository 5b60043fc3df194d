/* IDX reader (MNIST family). zlib's gzread reads gzip and plain files alike.
 *
 * Headers come from untrusted files: sizes are checked for overflow, and the
 * pixel array is allocated whole up front only where the file's size can
 * hold what the header announces (gzip inflates at most 1032-fold); else it
 * grows as data actually arrives, so a corrupt header announcing billions of
 * images yields "truncated at byte offset X", not a huge allocation. (Up
 * front, a file's load never copies its pixels to a larger buffer: where
 * realloc cannot remap, as under ASan, that doubled the load's memory
 * traffic.) Errors name the file and the byte offset (of the uncompressed
 * stream) or the header field. */
#include "config.h"
#include "src/data/idx.h"

#include <sfb/data.h>
#include "src/base/util.h"
#include "src/base/fileio.h"

#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_UBYTE 0x08
#define CHUNK (1u << 20)

struct idx_file {
    gzFile gz;
    const char *path;
    uint64_t off; /* bytes consumed so far */
    uint64_t file_bytes; /* the file's size on disk (compressed or not) */
    uint32_t ndims;
    uint32_t dims[3];
};

static int open_idx(struct idx_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->path = path;
    int fd;
    struct stat st;
    int r = sfb__open_regular(path, "a data file", &fd, &st);
    if (r) return r;
    f->file_bytes = (uint64_t)st.st_size;
    f->gz = gzdopen(fd, "rb");
    if (!f->gz) {
        close(fd);
        return sfb__error(-ENOMEM, "%s: cannot open: out of memory", path);
    }
    gzbuffer(f->gz, 1u << 18);
    return 0;
}

static void close_idx(struct idx_file *f)
{
    if (f->gz) gzclose(f->gz);
    f->gz = NULL;
}

/* Reads exactly `len` bytes of `what`, or fails naming where the data ended.
 * `what` ends at byte offset `what_end` (0: at the end of this read), so a
 * truncation reports how much of it is missing in all. */
static int read_part(struct idx_file *f, void *buf, size_t len, const char *what,
                     uint64_t what_end)
{
    unsigned char *b = buf;
    size_t done = 0;
    while (done < len) {
        unsigned want = (unsigned)SFB_MIN(len - done, (size_t)CHUNK);
        int got = gzread(f->gz, b + done, want);
        if (got < 0) {
            int zerr = 0;
            const char *msg = gzerror(f->gz, &zerr);
            if (zerr == Z_ERRNO) {
                return sfb__error(-EIO, "%s: read error at byte offset %" PRIu64 ": %s", f->path,
                                  f->off + done, sfb_strerror(errno));
            }
            return sfb__error(-SFB_EFORMAT, "%s: %s at byte offset %" PRIu64 " while reading %s: %s",
                              f->path, zerr == Z_BUF_ERROR ? "truncated gzip stream" : "corrupt gzip data",
                              f->off + done, what, msg ? msg : "");
        }
        if (got == 0) {
            uint64_t at = f->off + done;
            uint64_t end = what_end ? what_end : f->off + len;
            return sfb__error(-SFB_EFORMAT, "%s: truncated at byte offset %" PRIu64
                              ": expected %" PRIu64 " more bytes of %s", f->path, at, end - at,
                              what);
        }
        done += (size_t)got;
    }
    f->off += len;
    return 0;
}

static int read_exact(struct idx_file *f, void *buf, size_t len, const char *what)
{
    return read_part(f, buf, len, what, 0);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads and validates the header: magic, type 0x08, ndims in [min, max],
 * non-zero dimensions. */
static int read_header(struct idx_file *f, uint32_t min_dims, uint32_t max_dims, const char *kind)
{
    unsigned char h[4];
    int r = read_exact(f, h, 4, "the IDX magic number");
    if (r) return r;
    if (h[0] != 0 || h[1] != 0) {
        return sfb__error(-SFB_EFORMAT, "%s: bad magic 0x%02x%02x%02x%02x at byte offset 0: "
                          "not an IDX file", f->path, h[0], h[1], h[2], h[3]);
    }
    if (h[2] != IDX_UBYTE) {
        return sfb__error(-SFB_EFORMAT, "%s: byte offset 2: unsupported IDX data type 0x%02x "
                          "(only unsigned byte 0x08 is supported)", f->path, h[2]);
    }
    if (h[3] < min_dims || h[3] > max_dims) {
        return sfb__error(-SFB_EFORMAT, "%s: byte offset 3: %u dimensions, but an IDX %s file "
                          "has %s", f->path, h[3], kind, min_dims == max_dims ? "1" : "2 or 3");
    }
    f->ndims = h[3];
    unsigned char d[12];
    if ((r = read_exact(f, d, 4u * f->ndims, "the IDX dimensions"))) return r;
    for (uint32_t i = 0; i < f->ndims; i++) {
        f->dims[i] = be32(d + 4 * i);
        if (f->dims[i] == 0) {
            return sfb__error(-SFB_EFORMAT, "%s: byte offset %" PRIu32 ": dimension %" PRIu32
                              " is 0", f->path, 4 + 4 * i, i);
        }
    }
    return 0;
}

static int expect_end(struct idx_file *f)
{
    unsigned char c;
    int got = gzread(f->gz, &c, 1);
    if (got > 0) {
        return sfb__error(-SFB_EFORMAT, "%s: unexpected trailing data at byte offset %" PRIu64,
                          f->path, f->off);
    }
    int zerr = 0;
    const char *msg = gzerror(f->gz, &zerr);
    if (got < 0) {
        return sfb__error(-SFB_EFORMAT, "%s: bad gzip data at byte offset %" PRIu64 ": %s",
                          f->path, f->off, msg ? msg : "");
    }
    /* zlib reports a gzip stream cut short only as a soft Z_BUF_ERROR after
     * EOF: without this check a file missing its trailer (CRC and length)
     * loads as if intact (fuzz seed idx/bad-gzip-truncated). */
    if (zerr == Z_BUF_ERROR) {
        return sfb__error(-SFB_EFORMAT, "%s: truncated gzip stream after byte offset %" PRIu64
                          " (the gzip trailer with its CRC is missing)", f->path, f->off);
    }
    return 0;
}

int sfb__idx_sniff(const char *path)
{
    struct idx_file f;
    int r = open_idx(&f, path);
    if (r) return r;
    unsigned char h[4];
    int got = gzread(f.gz, h, 4);
    close_idx(&f);
    if (got < 4) return 0;
    int type_ok = h[2] == 0x08 || h[2] == 0x09 || (h[2] >= 0x0b && h[2] <= 0x0e);
    return h[0] == 0 && h[1] == 0 && type_ok && h[3] >= 1 && h[3] <= 4;
}

int sfb__idx_read_shard(const char *images_path, const char *labels_path, uint32_t classes,
                        const struct sfb_shard *shard, struct sfb_dataset *out, uint64_t *rows)
{
    memset(out, 0, sizeof *out);
    struct idx_file im = {0}, lb = {0};
    unsigned char *chunk = NULL;
    float *x = NULL;
    int32_t *labels = NULL;
    size_t xcap = 0;
    int r;

    if ((r = open_idx(&im, images_path))) goto fail;
    if ((r = open_idx(&lb, labels_path))) goto fail;
    if ((r = read_header(&im, 2, 3, "images"))) goto fail;
    if ((r = read_header(&lb, 1, 1, "labels"))) goto fail;
    uint64_t n = im.dims[0];
    uint64_t d64 = im.ndims == 3 ? (uint64_t)im.dims[1] * im.dims[2] : im.dims[1];
    if (d64 > UINT32_MAX) {
        r = sfb__error(-SFB_EFORMAT, "%s: byte offset 8: image size %" PRIu32 "x%" PRIu32
                       " exceeds 2^32 features", images_path, im.dims[1], im.dims[2]);
        goto fail;
    }
    if (lb.dims[0] != n) {
        r = sfb__error(-SFB_EFORMAT, "%s: byte offset 4: %" PRIu32 " labels, but %s has %" PRIu64
                       " images", labels_path, lb.dims[0], images_path, n);
        goto fail;
    }
    size_t total;
    if (n > SIZE_MAX || sfb__mul_size((size_t)n, (size_t)d64, &total) ||
        total > SIZE_MAX / sizeof(float)) {
        r = sfb__error(-SFB_EFORMAT, "%s: byte offset 4: %" PRIu64 " images of %" PRIu64
                       " pixels overflow this machine's address space", images_path, n, d64);
        goto fail;
    }
    const size_t d = (size_t)d64;
    const uint64_t kept = shard ? sfb_shard_rows(shard, n) : n;
    const size_t kept_px = (size_t)kept * d; /* ≤ total: no overflow */

    /* Every image is decoded (gzip cannot skip), only the shard's kept. */
    const uint64_t pixel_end = im.off + total;
    float scale[256];
    for (int i = 0; i < 256; i++) scale[i] = (float)i / 255.0f;
    if (!(chunk = malloc(CHUNK))) {
        r = -ENOMEM;
        goto fail;
    }
    /* gzip's deflate inflates at most 1032-fold: a header announcing more
     * pixels than the file can hold gets the growing buffer, not this */
    if (kept_px && kept_px / 1032 <= im.file_bytes && (x = malloc(kept_px * sizeof(float))))
        xcap = kept_px * sizeof(float); /* (if malloc fails, the growing path says where) */
    size_t at = 0; /* floats kept so far */
    for (uint64_t i = 0; i < n; i++) {
        int keep = !shard || sfb_shard_owner(shard, i) == shard->rank;
        for (size_t done = 0; done < d;) {
            size_t len = SFB_MIN(d - done, (size_t)CHUNK);
            if ((r = read_part(&im, chunk, len, "pixel data", pixel_end))) goto fail;
            done += len;
            if (!keep) continue;
            /* Grow with the data actually read (see the top comment). */
            if ((r = sfb__reserve((void **)&x, &xcap, (at + len) * sizeof(float)))) goto fail;
            for (size_t j = 0; j < len; j++) x[at + j] = scale[chunk[j]];
            at += len;
        }
    }
    if ((r = expect_end(&im))) goto fail;
    if (xcap > kept_px * sizeof(float)) { /* give back the doubling slack */
        float *nx = realloc(x, kept_px ? kept_px * sizeof(float) : 1);
        if (nx) x = nx;
    }

    if (!(labels = malloc(kept ? (size_t)kept * sizeof *labels : 1))) {
        r = -ENOMEM;
        goto fail;
    }
    uint32_t max_label = 0;
    uint64_t label_off = lb.off, nl = 0;
    for (size_t done = 0; done < n;) {
        size_t len = SFB_MIN((size_t)n - done, (size_t)CHUNK);
        if ((r = read_part(&lb, chunk, len, "labels", label_off + n))) goto fail;
        for (size_t i = 0; i < len; i++) {
            uint32_t v = chunk[i];
            if (classes && v >= classes) {
                r = sfb__error(-SFB_EFORMAT, "%s: byte offset %" PRIu64 ": label %" PRIu32
                               " out of range [0, %" PRIu32 ")", labels_path,
                               label_off + done + i, v, classes);
                goto fail;
            }
            if (v > max_label) max_label = v;
            if (!shard || sfb_shard_owner(shard, done + i) == shard->rank)
                labels[nl++] = (int32_t)v;
        }
        done += len;
    }
    if ((r = expect_end(&lb))) goto fail;
    close_idx(&im);
    close_idx(&lb);
    free(chunk);

    out->n = kept;
    out->d = (uint32_t)d64;
    out->k = classes ? classes : max_label + 1;
    out->labels = labels;
    out->sparse = 0;
    out->x = x ? x : malloc(1);
    if (!out->x) {
        sfb_dataset_free(out);
        return sfb__error(-ENOMEM, "%s: out of memory", images_path);
    }
    if (rows) *rows = n;
    return 0;

fail:
    if (r == -ENOMEM) r = sfb__error(-ENOMEM, "%s: out of memory", images_path);
    close_idx(&im);
    close_idx(&lb);
    free(chunk);
    free(x);
    free(labels);
    return r;
}

int sfb_idx_read(const char *images_path, const char *labels_path, uint32_t classes,
                 struct sfb_dataset *out)
{
    SFB_ENTER();
    SFB_ARG(out);
    memset(out, 0, sizeof *out);
    SFB_ARG(images_path);
    SFB_ARG(labels_path);
    return sfb__idx_read_shard(images_path, labels_path, classes, NULL, out, NULL);
}
