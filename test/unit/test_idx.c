/* IDX reader: plain and gzip files written here, 2-D and 3-D images, and
 * each malformed case (bad magic, wrong type, count mismatch, truncation,
 * label range, trailing data) naming the file and byte offset. */
#include <sfb/data.h>
#include "src/base/util.h"
#include "src/data/idx.h"
#include "test.h"
#include "data_util.h"

#include <stdint.h>

/* Builds an IDX file: 0 0 type ndims, big-endian dims, then `data`. */
static size_t build_idx(unsigned char *buf, unsigned char type, unsigned ndims,
                        const uint32_t *dims, const unsigned char *data, size_t len)
{
    size_t m = 0;
    buf[m++] = 0;
    buf[m++] = 0;
    buf[m++] = type;
    buf[m++] = (unsigned char)ndims;
    for (unsigned i = 0; i < ndims; i++) {
        buf[m++] = (unsigned char)(dims[i] >> 24);
        buf[m++] = (unsigned char)(dims[i] >> 16);
        buf[m++] = (unsigned char)(dims[i] >> 8);
        buf[m++] = (unsigned char)dims[i];
    }
    memcpy(buf + m, data, len);
    return m + len;
}

static const unsigned char pixels[12] = {0, 255, 51, 102, 1, 2, 3, 4, 200, 100, 50, 0};
static const unsigned char label_bytes[3] = {1, 0, 2};

/* Writes a 3 × 2 × 2 image file and its 3 labels under `tag`. */
static int write_pair(const char *tag, int gz, const char **im, const char **lb)
{
    unsigned char buf[64];
    char name[64];
    uint32_t idims[3] = {3, 2, 2}, ldims[1] = {3};
    size_t len = build_idx(buf, 0x08, 3, idims, pixels, sizeof pixels);
    snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", tag, gz ? ".gz" : "");
    *im = tu_write(name, buf, len, gz);
    len = build_idx(buf, 0x08, 1, ldims, label_bytes, sizeof label_bytes);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", tag, gz ? ".gz" : "");
    *lb = tu_write(name, buf, len, gz);
    return *im && *lb ? 0 : -1;
}

static int check_pair(const struct sfb_dataset *ds)
{
    ASSERT_EQ(ds->n, 3);
    ASSERT_EQ(ds->d, 4);
    ASSERT_EQ(ds->k, 3);
    ASSERT_EQ(ds->sparse, 0);
    ASSERT_EQ(sfb_dataset_nnz(ds), 12);
    for (int i = 0; i < 12; i++) ASSERT(ds->x[i] == (float)pixels[i] / 255.0f);
    ASSERT(ds->x[1] == 1.0f && ds->x[0] == 0.0f);
    ASSERT_EQ(ds->labels[0], 1);
    ASSERT_EQ(ds->labels[1], 0);
    ASSERT_EQ(ds->labels[2], 2);
    return 0;
}

static int plain(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("plain", 0, &im, &lb));
    struct sfb_dataset ds;
    ASSERT_OK(sfb_idx_read(im, lb, 0, &ds));
    if (check_pair(&ds)) return 1;
    sfb_dataset_free(&ds);
    ASSERT_EQ(sfb__idx_sniff(im), 1);
    ASSERT_EQ(sfb__idx_sniff(lb), 1);
    return 0;
}

static int gzip(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("gz", 1, &im, &lb));
    struct sfb_dataset ds;
    ASSERT_OK(sfb_idx_read(im, lb, 0, &ds));
    if (check_pair(&ds)) return 1;
    sfb_dataset_free(&ds);
    ASSERT_OK(sfb_idx_read(im, lb, 10, &ds)); /* classes given */
    ASSERT_EQ(ds.k, 10);
    sfb_dataset_free(&ds);
    ASSERT_EQ(sfb__idx_sniff(im), 1);
    const char *txt = tu_write_str("not_idx.txt", "1 1:1\n");
    ASSERT_EQ(sfb__idx_sniff(txt), 0);
    return 0;
}

static int two_d_images(void)
{
    unsigned char buf[64];
    uint32_t idims[2] = {3, 4}, ldims[1] = {3};
    const char *im = tu_write("flat-images", buf, build_idx(buf, 8, 2, idims, pixels, 12), 0);
    const char *lb = tu_write("flat-labels", buf, build_idx(buf, 8, 1, ldims, label_bytes, 3), 1);
    struct sfb_dataset ds;
    ASSERT_OK(sfb_idx_read(im, lb, 0, &ds));
    if (check_pair(&ds)) return 1;
    sfb_dataset_free(&ds);
    return 0;
}

/* Reads and expects -SFB_EFORMAT with `path` and every `want` in the
 * message, and a zeroed result. */
static int expect_fail(const char *im, const char *lb, uint32_t classes, const char *path,
                       const char *want1, const char *want2)
{
    struct sfb_dataset ds;
    memset(&ds, 0x5a, sizeof ds);
    int r = sfb_idx_read(im, lb, classes, &ds);
    ASSERT_EQ(r, -SFB_EFORMAT);
    const char *msg = sfb_last_error();
    char prefix[700];
    snprintf(prefix, sizeof prefix, "%s: ", path);
    if (strncmp(msg, prefix, strlen(prefix)) != 0)
        TEST_FAIL_AT("message \"%s\" does not start with \"%s\"", msg, prefix);
    ASSERT_STR_CONTAINS(msg, want1);
    ASSERT_STR_CONTAINS(msg, want2);
    fprintf(stderr, "  (%s)\n", msg);
    static const struct sfb_dataset z;
    ASSERT(memcmp(&ds, &z, sizeof z) == 0);
    return 0;
}

static int bad_magic(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("magic", 0, &im, &lb));
    unsigned char buf[64] = {0x12, 0x34, 0x08, 0x03};
    im = tu_write("magic-bad", buf, 28, 0);
    return expect_fail(im, lb, 0, im, "bad magic 0x12340803", "byte offset 0");
}

static int wrong_dtype(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("dtype", 0, &im, &lb));
    unsigned char buf[64];
    uint32_t idims[3] = {3, 2, 2};
    im = tu_write("dtype-float", buf, build_idx(buf, 0x0d, 3, idims, pixels, 12), 1);
    ASSERT_EQ(sfb__idx_sniff(im), 1); /* recognised as IDX, then rejected */
    return expect_fail(im, lb, 0, im, "byte offset 2", "data type 0x0d");
}

static int wrong_ndims(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("ndims", 0, &im, &lb));
    unsigned char buf[64];
    uint32_t ldims[2] = {3, 1};
    lb = tu_write("ndims-labels", buf, build_idx(buf, 8, 2, ldims, label_bytes, 3), 0);
    return expect_fail(im, lb, 0, lb, "byte offset 3", "2 dimensions");
}

static int count_mismatch(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("count", 1, &im, &lb));
    unsigned char buf[64];
    uint32_t ldims[1] = {4};
    static const unsigned char l4[4] = {0, 1, 2, 3};
    lb = tu_write("count-labels4.gz", buf, build_idx(buf, 8, 1, ldims, l4, 4), 1);
    if (expect_fail(im, lb, 0, lb, "byte offset 4", "4 labels")) return 1;
    ASSERT_STR_CONTAINS(sfb_last_error(), "3 images");
    ASSERT_STR_CONTAINS(sfb_last_error(), im);
    return 0;
}

static int truncated_plain(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("trunc", 0, &im, &lb));
    unsigned char buf[64];
    uint32_t idims[3] = {3, 2, 2};
    size_t len = build_idx(buf, 8, 3, idims, pixels, 12);
    im = tu_write("trunc-cut", buf, len - 2, 0); /* 26 of 28 bytes */
    if (expect_fail(im, lb, 0, im, "truncated at byte offset 26", "2 more bytes of pixel data"))
        return 1;
    /* Cut inside the header. */
    im = tu_write("trunc-header", buf, 9, 0);
    return expect_fail(im, lb, 0, im, "truncated at byte offset 9", "7 more bytes of the IDX dimensions");
}

static int truncated_gzip(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("gztrunc", 1, &im, &lb));
    unsigned char buf[64];
    uint32_t idims[3] = {3, 2, 2};
    size_t len = build_idx(buf, 8, 3, idims, pixels, 12);
    /* A complete gzip stream of an incomplete IDX file. */
    const char *cut = tu_write("gztrunc-data.gz", buf, len - 5, 1);
    if (expect_fail(cut, lb, 0, cut, "truncated", "byte offset 23")) return 1;
    /* A gzip stream cut short: a large image file, compressed, minus its
     * tail. The message names the file and where the data ended. */
    enum { N = 2000, D = 784 };
    unsigned char *big = malloc(16 + (size_t)N * D);
    unsigned char *px = malloc((size_t)N * D);
    ASSERT(big && px);
    uint64_t x = 7;
    for (size_t i = 0; i < (size_t)N * D; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        px[i] = (unsigned char)(x >> 56);
    }
    uint32_t bdims[3] = {N, 28, 28};
    size_t blen = build_idx(big, 8, 3, bdims, px, (size_t)N * D);
    const char *full = tu_write("gzcut-full.gz", big, blen, 1);
    free(px);
    free(big);
    ASSERT(full);
    FILE *f = fopen(full, "rb");
    ASSERT(f);
    fseek(f, 0, SEEK_END);
    long zlen = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *z = malloc((size_t)zlen);
    ASSERT(z && fread(z, 1, (size_t)zlen, f) == (size_t)zlen);
    fclose(f);
    const char *zcut = tu_write("gzcut.gz", z, (size_t)zlen / 2, 0);
    free(z);
    uint32_t ldims[1] = {N};
    unsigned char lbuf[16 + N], ones[N];
    memset(ones, 1, N);
    lb = tu_write("gzcut-labels", lbuf, build_idx(lbuf, 8, 1, ldims, ones, N), 0);
    return expect_fail(zcut, lb, 0, zcut, "truncated", "byte offset");
}

static int label_out_of_range(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("range", 0, &im, &lb));
    /* labels {1, 0, 2} with 2 classes: the third label, at byte 8 + 2. */
    return expect_fail(im, lb, 2, lb, "byte offset 10", "label 2 out of range [0, 2)");
}

static int trailing_data(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("trail", 0, &im, &lb));
    unsigned char buf[64];
    uint32_t idims[3] = {3, 2, 2};
    size_t len = build_idx(buf, 8, 3, idims, pixels, 12);
    buf[len++] = 7;
    im = tu_write("trail-extra", buf, len, 1);
    return expect_fail(im, lb, 0, im, "trailing data", "byte offset 28");
}

static int zero_dimension(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("zero", 0, &im, &lb));
    unsigned char buf[64];
    uint32_t idims[3] = {3, 0, 2};
    im = tu_write("zero-dim", buf, build_idx(buf, 8, 3, idims, pixels, 0), 0);
    return expect_fail(im, lb, 0, im, "byte offset 8", "dimension 1 is 0");
}

/* A header announcing 2^32-1 images of 65535² pixels must fail as truncated
 * (or too large), never by trying to allocate it all. */
static int huge_header(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("huge", 0, &im, &lb));
    unsigned char buf[64];
    uint32_t idims[3] = {0xffffffffu, 0xffff, 0xffff};
    im = tu_write("huge-images", buf, build_idx(buf, 8, 3, idims, pixels, 12), 0);
    uint32_t ldims[1] = {0xffffffffu};
    lb = tu_write("huge-labels", buf, build_idx(buf, 8, 1, ldims, label_bytes, 3), 0);
    struct sfb_dataset ds;
    ASSERT_EQ(sfb_idx_read(im, lb, 0, &ds), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(sfb_last_error(), im);
    return 0;
}

/* A header announcing far more pixels than its file can hold (784 M here,
 * 28 bytes on disk): read as the data arrives, not allocated up front, and
 * refused where the data ends; as is one announcing a few more than it has
 * (allocated up front: a 4-byte image more than the file's three). */
static int lying_count(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("lying", 0, &im, &lb));
    unsigned char buf[64];
    uint32_t idims[3] = {1000000, 28, 28};
    im = tu_write("lying-images", buf, build_idx(buf, 8, 3, idims, pixels, 12), 0);
    uint32_t ldims[1] = {1000000};
    lb = tu_write("lying-labels", buf, build_idx(buf, 8, 1, ldims, label_bytes, 3), 0);
    if (expect_fail(im, lb, 0, im, "truncated at byte offset 28", "more bytes of pixel data"))
        return 1;
    uint32_t few[3] = {4, 2, 2};
    im = tu_write("lying-few", buf, build_idx(buf, 8, 3, few, pixels, 12), 0);
    ldims[0] = 4;
    lb = tu_write("lying-few-labels", buf, build_idx(buf, 8, 1, ldims, label_bytes, 3), 0);
    return expect_fail(im, lb, 0, im, "truncated at byte offset 28", "4 more bytes of pixel data");
}

static int missing_file(void)
{
    const char *im, *lb;
    ASSERT_OK(write_pair("missing", 0, &im, &lb));
    struct sfb_dataset ds;
    ASSERT_EQ(sfb_idx_read(im, "/nonexistent/labels-idx1-ubyte", 0, &ds), -ENOENT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "/nonexistent/labels-idx1-ubyte");
    ASSERT_EQ(sfb__idx_sniff("/nonexistent/x"), -ENOENT);
    return 0;
}

static const struct test_case tests[] = {
    {"plain", plain},
    {"gzip", gzip},
    {"two_d_images", two_d_images},
    {"bad_magic", bad_magic},
    {"wrong_dtype", wrong_dtype},
    {"wrong_ndims", wrong_ndims},
    {"count_mismatch", count_mismatch},
    {"truncated_plain", truncated_plain},
    {"truncated_gzip", truncated_gzip},
    {"label_out_of_range", label_out_of_range},
    {"trailing_data", trailing_data},
    {"zero_dimension", zero_dimension},
    {"huge_header", huge_header},
    {"lying_count", lying_count},
    {"missing_file", missing_file},
};

TEST_MAIN(tests)
