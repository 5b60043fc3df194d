/* sfb_data_load: name resolution (synth, libsvm with a test file, IDX files
 * and directories, the installed Fashion-MNIST package) and the test set
 * inheriting the train set's d, k and index base. */
#include "config.h"
#include <sfb/data.h>
#include "src/base/util.h"
#include "src/data/data_internal.h"
#include "src/data/synth.h"
#include "test.h"
#include "data_util.h"

#include <stdint.h>
#include <sys/stat.h>

static int zeroed(const struct sfb_dataset *ds)
{
    static const struct sfb_dataset z;
    return memcmp(ds, &z, sizeof z) == 0;
}

static int bad_names(void)
{
    struct sfb_dataset tr, te;
    ASSERT_EQ(sfb_data_load("", NULL, NULL, &tr, &te), -SFB_EUSAGE);
    ASSERT_EQ(sfb_data_load("/nonexistent/sfb/train.svm", NULL, NULL, &tr, &te), -ENOENT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "/nonexistent/sfb/train.svm");
    ASSERT_EQ(sfb_data_load("synth:k=2,bogus=1", NULL, NULL, &tr, &te), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "'bogus'");
    ASSERT(zeroed(&tr) && zeroed(&te));
    return 0;
}

static int synth(void)
{
    struct sfb_dataset tr, te;
    ASSERT_OK(sfb_data_load("synth:k=4,d=20,n=500,seed=7", NULL, NULL, &tr, &te));
    ASSERT_EQ(tr.n, 500);
    ASSERT_EQ(te.n, 100);
    ASSERT_EQ(te.d, 20);
    ASSERT_EQ(te.k, 4);
    ASSERT(memcmp(tr.x, te.x, 20 * sizeof(float)) != 0); /* other samples */
    /* Same hidden model: it labels the test set as well as the train set. */
    struct sfb_synth_settings s;
    ASSERT_OK(sfb_synth_parse("synth:k=4,d=20,n=500,seed=7", &s));
    float w[4 * 20];
    sfb__synth_model(&s, w);
    uint64_t right = 0;
    for (uint64_t i = 0; i < te.n; i++) {
        int best = 0;
        double bz = -INFINITY;
        for (int c = 0; c < 4; c++) {
            double z = 0;
            for (int j = 0; j < 20; j++) z += (double)w[c * 20 + j] * te.x[i * 20 + j];
            if (z > bz) bz = z, best = c;
        }
        right += best == te.labels[i];
    }
    ASSERT_GE(right, 90);
    sfb_dataset_free(&tr);
    sfb_dataset_free(&te);

    /* n/5 is at least 1; test may be NULL. */
    ASSERT_OK(sfb_data_load("synth:n=3", NULL, NULL, &tr, &te));
    ASSERT_EQ(te.n, 1);
    sfb_dataset_free(&tr);
    sfb_dataset_free(&te);
    ASSERT_OK(sfb_data_load("synth", NULL, NULL, &tr, NULL));
    ASSERT_EQ(tr.n, 1000);
    sfb_dataset_free(&tr);
    return 0;
}

static int libsvm_with_test(void)
{
    const char *train = tu_write_str("tr.svm", "1 1:1 2:1\n0 3:1\n2 1:0.5\n");
    const char *test = tu_write_str("te.svm", "1 1:1\n# c\n0 2:1\n");
    struct sfb_dataset tr, te;
    ASSERT_OK(sfb_data_load(train, test, NULL, &tr, &te));
    ASSERT_EQ(tr.n, 3);
    ASSERT_EQ(tr.d, 3);
    ASSERT_EQ(tr.k, 3);
    ASSERT_EQ(te.n, 2);
    ASSERT_EQ(te.d, 3);
    ASSERT_EQ(te.k, 3);
    ASSERT_EQ(te.col[0], 0);
    ASSERT_EQ(te.col[1], 1);
    sfb_dataset_free(&tr);
    sfb_dataset_free(&te);

    /* No test source: test stays empty. */
    ASSERT_OK(sfb_data_load(train, NULL, NULL, &tr, &te));
    ASSERT(zeroed(&te));
    sfb_dataset_free(&tr);

    /* A larger index in the test file is an error naming it. */
    const char *wide = tu_write_str("te_wide.svm", "1 1:1\n0 4:1\n");
    ASSERT_EQ(sfb_data_load(train, wide, NULL, &tr, &te), -SFB_EFORMAT);
    char want[700];
    snprintf(want, sizeof want, "%s:2:3: index 4 beyond feature dimension 3", wide);
    ASSERT_STR_CONTAINS(sfb_last_error(), want);
    ASSERT(zeroed(&tr) && zeroed(&te));

    /* So is a label beyond the train set's classes. */
    const char *lab = tu_write_str("te_lab.svm", "1 1:1\n3 2:1\n");
    ASSERT_EQ(sfb_data_load(train, lab, NULL, &tr, &te), -SFB_EFORMAT);
    snprintf(want, sizeof want, "%s:2:1: label 3 out of range [0, 3)", lab);
    ASSERT_STR_CONTAINS(sfb_last_error(), want);
    ASSERT(zeroed(&tr) && zeroed(&te));
    return 0;
}

/* The test file is read with the train file's detected index base: a
 * 0-based train file and a test file without index 0. */
static int test_inherits_base(void)
{
    const char *train = tu_write_str("tr0.svm", "1 0:1 2:1\n0 1:1\n");
    const char *test = tu_write_str("te0.svm", "1 2:1\n");
    struct sfb_dataset tr, te;
    ASSERT_OK(sfb_data_load(train, test, NULL, &tr, &te));
    ASSERT_EQ(te.d, 3);
    ASSERT_EQ(te.col[0], 2); /* 0-based like the train file, not 1 */
    sfb_dataset_free(&tr);
    sfb_dataset_free(&te);
    return 0;
}

static size_t build_idx(unsigned char *buf, unsigned ndims, const uint32_t *dims,
                        const unsigned char *data, size_t len)
{
    size_t m = 0;
    buf[m++] = 0;
    buf[m++] = 0;
    buf[m++] = 8;
    buf[m++] = (unsigned char)ndims;
    for (unsigned i = 0; i < ndims; i++) {
        for (int s = 24; s >= 0; s -= 8) buf[m++] = (unsigned char)(dims[i] >> s);
    }
    memcpy(buf + m, data, len);
    return m + len;
}

/* Writes name-images-idx3-ubyte[.gz] (n images of 2×3) and the labels. */
static int write_idx(const char *prefix, uint32_t n, int gz, const unsigned char *labels)
{
    unsigned char buf[256], px[200];
    char name[256];
    for (uint32_t i = 0; i < n * 6; i++) px[i] = (unsigned char)(i * 37);
    uint32_t idims[3] = {n, 2, 3}, ldims[1] = {n};
    snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", prefix, gz ? ".gz" : "");
    ASSERT(tu_write(name, buf, build_idx(buf, 3, idims, px, n * 6), gz));
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", prefix, gz ? ".gz" : "");
    ASSERT(tu_write(name, buf, build_idx(buf, 1, ldims, labels, n), gz));
    return 0;
}

static int idx_directory(void)
{
    static const unsigned char tl[5] = {0, 1, 2, 1, 0}, el[2] = {2, 0};
    if (write_idx("train", 5, 1, tl) || write_idx("t10k", 2, 0, el)) return 1;
    const char *dir = tu_dir;
    struct sfb_dataset tr, te;
    ASSERT_OK(sfb_data_load(dir, NULL, NULL, &tr, &te));
    ASSERT_EQ(tr.n, 5);
    ASSERT_EQ(tr.d, 6);
    ASSERT_EQ(tr.k, 3);
    ASSERT_EQ(tr.sparse, 0);
    ASSERT_EQ(te.n, 2);
    ASSERT_EQ(te.d, 6);
    ASSERT_EQ(te.k, 3);
    ASSERT_EQ(te.labels[0], 2);
    ASSERT(tr.x[1] == 37.0f / 255.0f);
    sfb_dataset_free(&tr);
    sfb_dataset_free(&te);

    /* An IDX images file as the name, and as the test path. */
    const char *im = tu_path("train-images-idx3-ubyte.gz");
    const char *tim = tu_path("t10k-images-idx3-ubyte");
    ASSERT_OK(sfb_data_load(im, tim, NULL, &tr, &te));
    ASSERT_EQ(tr.n, 5);
    ASSERT_EQ(te.n, 2);
    ASSERT_EQ(te.k, 3);
    sfb_dataset_free(&tr);
    sfb_dataset_free(&te);

    /* Test labels beyond the train classes: error naming the labels file. */
    static const unsigned char bad[2] = {3, 0};
    if (write_idx("t10k", 2, 0, bad)) return 1;
    ASSERT_EQ(sfb_data_load(dir, NULL, NULL, &tr, &te), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "t10k-labels-idx1-ubyte: byte offset 8: label 3");
    ASSERT(zeroed(&tr) && zeroed(&te));
    return 0;
}

static int fashion_missing(void)
{
    struct sfb_dataset tr, te;
    ASSERT_EQ(sfb__data_load_fashion("/nonexistent/fashion-mnist", NULL, &tr, &te, NULL), -ENOENT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "/nonexistent/fashion-mnist/train-images-idx3-ubyte");
    ASSERT_STR_CONTAINS(sfb_last_error(), "apt-get install dataset-fashion-mnist");
    ASSERT(zeroed(&tr) && zeroed(&te));
    return 0;
}

/* The real dataset from the dataset-fashion-mnist package (a build
 * dependency of the test suite). */
static int fashion_mnist(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", SFB_FASHION_MNIST_DIR);
    gzFile f = gzopen(path, "rb");
    if (!f) TEST_FAIL_AT("%s missing: apt-get install dataset-fashion-mnist", path);
    unsigned char head[9];
    int got = gzread(f, head, 9);
    gzclose(f);
    ASSERT_EQ(got, 9);

    struct sfb_dataset tr, te;
    double t0 = sfb__now();
    ASSERT_OK(sfb_data_load("fashion-mnist", NULL, NULL, &tr, &te));
    fprintf(stderr, "  fashion-mnist loaded in %.2f s\n", sfb__now() - t0);
    ASSERT_EQ(tr.n, 60000);
    ASSERT_EQ(tr.d, 784);
    ASSERT_EQ(tr.k, 10);
    ASSERT_EQ(tr.sparse, 0);
    ASSERT_EQ(te.n, 10000);
    ASSERT_EQ(te.d, 784);
    ASSERT_EQ(te.k, 10);
    ASSERT_EQ(tr.labels[0], head[8]);
    float lo = 1, hi = 0;
    for (size_t i = 0; i < (size_t)tr.n * tr.d; i++) {
        lo = tr.x[i] < lo ? tr.x[i] : lo;
        hi = tr.x[i] > hi ? tr.x[i] : hi;
    }
    ASSERT(lo == 0.0f && hi == 1.0f);
    for (size_t i = 0; i < (size_t)te.n * te.d; i++) ASSERT(te.x[i] >= 0.0f && te.x[i] <= 1.0f);
    uint64_t count[10] = {0};
    for (uint64_t i = 0; i < tr.n; i++) {
        ASSERT(tr.labels[i] >= 0 && tr.labels[i] < 10);
        count[tr.labels[i]]++;
    }
    for (int c = 0; c < 10; c++) ASSERT_EQ(count[c], 6000); /* balanced classes */
    sfb_dataset_free(&tr);
    sfb_dataset_free(&te);
    return 0;
}

/* A FIFO given as data (train file, test file, IDX images file) is refused
 * at once, naming the path; it used to block in open() for a writer that
 * never comes. alarm() turns a hang into a failure. */
static int fifo_refused(void)
{
    const char *svm = tu_path("fifo.svm"), *idx = tu_path("fifo-images-idx3-ubyte");
    const char *good = tu_write("good.svm", "0 1:1\n1 2:1\n0 1:0.5\n1 2:0.5\n", 28, 0);
    ASSERT(good);
    ASSERT_EQ(mkfifo(svm, 0600), 0);
    ASSERT_EQ(mkfifo(idx, 0600), 0);
    alarm(20);
    struct sfb_dataset tr, te;
    const char *names[] = {svm, idx};
    for (int i = 0; i < 2; i++) {
        int r = sfb_data_load(names[i], NULL, NULL, &tr, &te);
        ASSERT(r < 0);
        ASSERT_STR_CONTAINS(sfb_last_error(), names[i]);
        ASSERT_STR_CONTAINS(sfb_last_error(), "not a regular file but a FIFO");
        ASSERT(zeroed(&tr) && zeroed(&te));
    }
    ASSERT(sfb_data_load(good, svm, NULL, &tr, &te) < 0);
    ASSERT_STR_CONTAINS(sfb_last_error(), svm);
    ASSERT_STR_CONTAINS(sfb_last_error(), "FIFO");
    /* a directory given as a libsvm file: named too */
    ASSERT_EQ(sfb_data_load(good, "/", NULL, &tr, &te), -EISDIR);
    alarm(0);
    return 0;
}

static const struct test_case tests[] = {
    {"bad_names", bad_names},
    {"fifo_refused", fifo_refused},
    {"synth", synth},
    {"libsvm_with_test", libsvm_with_test},
    {"test_inherits_base", test_inherits_base},
    {"idx_directory", idx_directory},
    {"fashion_missing", fashion_missing},
    {"fashion_mnist", fashion_mnist},
};

TEST_MAIN(tests)
