/* Dataset name resolution ("fashion-mnist", "synth:...", IDX files and
 * directories, libsvm files): the front end over the readers (idx.c,
 * libsvm.c, synth.c), which free through dataset.c, never through here. */
#include "config.h"
#include "src/data/data_internal.h"

#include "src/base/util.h"
#include "src/data/idx.h"
#include "src/data/libsvm.h"
#include "src/data/synth.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir/stem.gz if present, else dir/stem; 0 if one exists, -ENOENT if not
 * (buf then holds the .gz name, for messages). */
static int find_idx(const char *dir, const char *stem, char *buf, size_t cap)
{
    if (snprintf(buf, cap, "%s/%s", dir, stem) >= (int)cap) return -ENAMETOOLONG;
    if (exists(buf)) return 0;
    snprintf(buf, cap, "%s/%s.gz", dir, stem);
    return exists(buf) ? 0 : -ENOENT;
}

/* Reads {prefix}-images-idx3-ubyte[.gz] and {prefix}-labels-idx1-ubyte[.gz]
 * from dir. Returns -ENOENT without a message when the images are absent
 * (callers decide whether that is an error). */
static int load_idx_pair(const char *dir, const char *prefix, uint32_t classes,
                         const struct sfb_shard *shard, struct sfb_dataset *out,
                         uint64_t *rows, char *missing, size_t mcap)
{
    char im[4096], lb[4096], stem[64];
    snprintf(stem, sizeof stem, "%s-images-idx3-ubyte", prefix);
    int r = find_idx(dir, stem, im, sizeof im);
    if (r) {
        snprintf(missing, mcap, "%s", im);
        return r;
    }
    snprintf(stem, sizeof stem, "%s-labels-idx1-ubyte", prefix);
    if ((r = find_idx(dir, stem, lb, sizeof lb))) {
        snprintf(missing, mcap, "%s", lb);
        return sfb__error(r, "%s: labels file %s not found", im, lb);
    }
    return sfb__idx_read_shard(im, lb, classes, shard, out, rows);
}

static int check_test_shape(const struct sfb_dataset *train, const struct sfb_dataset *test,
                            const char *what)
{
    if (test->d != train->d) {
        return sfb__error(-SFB_ESHAPE, "%s: test set has %" PRIu32 " features, train set %" PRIu32,
                          what, test->d, train->d);
    }
    return 0;
}

int sfb__data_load_fashion(const char *dir, const struct sfb_shard *shard,
                           struct sfb_dataset *train, struct sfb_dataset *test, uint64_t *rows)
{
    char missing[4096] = "";
    memset(train, 0, sizeof *train);
    if (test) memset(test, 0, sizeof *test);
    int r = load_idx_pair(dir, "train", 0, shard, train, rows, missing, sizeof missing);
    if (r == -ENOENT) {
        return sfb__error(-ENOENT, "fashion-mnist: %s not found; install the Debian package "
                          "dataset-fashion-mnist (apt-get install dataset-fashion-mnist)",
                          missing);
    }
    if (r || !test) return r;
    r = load_idx_pair(dir, "t10k", train->k, NULL, test, NULL, missing, sizeof missing);
    if (r == -ENOENT) {
        r = sfb__error(-ENOENT, "fashion-mnist: %s not found; install the Debian package "
                       "dataset-fashion-mnist (apt-get install dataset-fashion-mnist)", missing);
    }
    if (!r) r = check_test_shape(train, test, dir);
    if (r) {
        sfb_dataset_free(train);
        sfb_dataset_free(test);
    }
    return r;
}

/* "...images-idx3..." → "...labels-idx1..." (or "images" → "labels"). */
static int labels_path_for(const char *images, char *buf, size_t cap)
{
    static const char *const pairs[2][2] = {{"images-idx3", "labels-idx1"},
                                            {"images", "labels"}};
    const char *base = strrchr(images, '/');
    base = base ? base + 1 : images;
    for (int i = 0; i < 2; i++) {
        const char *hit = NULL, *q = base;
        while ((q = strstr(q, pairs[i][0]))) hit = q++;
        if (!hit) continue;
        size_t pre = (size_t)(hit - images), from = strlen(pairs[i][0]);
        if (snprintf(buf, cap, "%.*s%s%s", (int)pre, images, pairs[i][1], hit + from) >= (int)cap)
            return sfb__error(-ENAMETOOLONG, "%s: path too long", images);
        return 0;
    }
    return sfb__error(-SFB_EUSAGE, "%s: cannot find the labels of this IDX images file: name it "
                      "*images-idx3* and put the labels beside it as *labels-idx1*", images);
}

/* A single train or test file: IDX images (labels found beside it) or
 * libsvm. For a test file, `ref` is the train set whose d and k it must use,
 * and `ref_base` the train file's libsvm index base (-1: not libsvm). */
static int load_file(const char *path, const struct sfb_libsvm_settings *ls,
                     const struct sfb_dataset *ref, int ref_base, const struct sfb_shard *shard,
                     struct sfb_dataset *out, int *base_used, uint64_t *rows)
{
    int r = sfb__idx_sniff(path);
    if (r == -ENOENT && !ref) {
        return sfb__error(-ENOENT, "%s: no such data set or file (expected fashion-mnist, "
                          "synth:k=..,d=..,n=.., an IDX directory or images file, or a libsvm "
                          "file)", path);
    }
    if (r < 0) return r;
    if (r == 1) {
        char lb[4096];
        if ((r = labels_path_for(path, lb, sizeof lb))) return r;
        uint32_t classes = ref ? ref->k : ls ? ls->classes : 0;
        if ((r = sfb__idx_read_shard(path, lb, classes, shard, out, rows))) return r;
        if (ref && (r = check_test_shape(ref, out, path))) sfb_dataset_free(out);
        return r;
    }
    struct sfb_libsvm_settings s;
    if (ls) s = *ls;
    else sfb_libsvm_default_settings(&s);
    if (ref) {
        s.dim = ref->d;
        s.classes = ref->k;
        if (ref_base >= 0) s.index_base = ref_base ? SFB_INDEX_1 : SFB_INDEX_0;
    }
    return sfb__libsvm_read(path, &s, shard, out, base_used, rows);
}

static int load_synth(const char *name, const struct sfb_shard *shard, struct sfb_dataset *train,
                      struct sfb_dataset *test, uint64_t *rows)
{
    struct sfb_synth_settings s;
    int r = sfb_synth_parse(name, &s);
    if (r) return r;
    if ((r = sfb__synth_generate(&s, s.seed, shard, train))) return r;
    *rows = s.n;
    if (!test) return 0;
    s.n = s.n / 5 ? s.n / 5 : 1;
    return sfb__synth_generate(&s, s.seed + 1, NULL, test);
}

static int load(const char *fn, const char *name, const char *test_path,
                const struct sfb_libsvm_settings *ls, const struct sfb_shard *shard,
                struct sfb_dataset *train, struct sfb_dataset *test, uint64_t *train_rows)
{
    memset(train, 0, sizeof *train);
    if (test) memset(test, 0, sizeof *test);
    if (train_rows) *train_rows = 0;
    int r = ls ? sfb__check_version(fn, "sfb_libsvm_settings", "sfb_libsvm_default_settings",
                                    ls->version, SFB_LIBSVM_SETTINGS_VERSION, ls->reserved,
                                    sizeof ls->reserved)
               : 0;
    if (r) return r;
    if (!name || !*name) return sfb__error(-SFB_EUSAGE, "data: no data name given");
    if (shard && (shard->world == 0 || shard->rank >= shard->world))
        return sfb__error(-EINVAL, "data: invalid shard: rank %" PRIu32 " of %" PRIu32,
                          shard->rank, shard->world);
    if (shard && shard->world == 1) shard = NULL;

    int base = -1; /* the train file's libsvm index base, if it is one */
    uint64_t rows = 0;
    /* Whether the test set comes from the train name (it does unless
     * test_path overrides it). */
    struct sfb_dataset *implicit_test = test_path ? NULL : test;
    if (strcmp(name, "fashion-mnist") == 0) {
        r = sfb__data_load_fashion(SFB_FASHION_MNIST_DIR, shard, train, implicit_test, &rows);
    } else if (strncmp(name, "synth", 5) == 0 && (name[5] == ':' || name[5] == '\0')) {
        r = load_synth(name, shard, train, implicit_test, &rows);
    } else if (is_dir(name)) {
        char missing[4096];
        uint32_t classes = ls ? ls->classes : 0;
        r = load_idx_pair(name, "train", classes, shard, train, &rows, missing, sizeof missing);
        if (r == -ENOENT) {
            r = sfb__error(-ENOENT, "%s: directory without IDX files (%s not found)", name,
                           missing);
        }
        if (!r && implicit_test) {
            r = load_idx_pair(name, "t10k", train->k, NULL, implicit_test, NULL, missing,
                              sizeof missing);
            if (r == -ENOENT) r = 0; /* no test split in this directory */
            else if (!r) r = check_test_shape(train, implicit_test, name);
        }
    } else {
        r = load_file(name, ls, NULL, 0, shard, train, &base, &rows);
    }
    if (!r && shard && train->n == 0) {
        r = sfb__error(-SFB_EUSAGE, "%s: %" PRIu64 " samples cannot be shared by %" PRIu32
                       " workers: rank %" PRIu32 "'s shard is empty", name, rows, shard->world,
                       shard->rank);
    }
    if (!r && test && test_path)
        r = load_file(test_path, ls, train, base, NULL, test, NULL, NULL);
    if (r) {
        sfb_dataset_free(train);
        if (test) sfb_dataset_free(test);
        return r;
    }
    if (train_rows) *train_rows = rows;
    return 0;
}

int sfb_data_load_shard(const char *name, const char *test_path,
                        const struct sfb_libsvm_settings *ls, const struct sfb_shard *shard,
                        struct sfb_dataset *train, struct sfb_dataset *test, uint64_t *train_rows)
{
    SFB_ENTER();
    SFB_ARG(name);
    SFB_ARG(train);
    return load(__func__, name, test_path, ls, shard, train, test, train_rows);
}

int sfb_data_load(const char *name, const char *test_path, const struct sfb_libsvm_settings *ls,
                  struct sfb_dataset *train, struct sfb_dataset *test)
{
    SFB_ENTER();
    SFB_ARG(name);
    SFB_ARG(train);
    return load(__func__, name, test_path, ls, NULL, train, test, NULL);
}
