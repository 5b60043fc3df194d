/* sfb — datasets: libsvm/svmlight text, IDX (MNIST family, plain or gzip),
 * synthetic MLR data, and deterministic sharding.
 *
 * A dataset is a plain struct the caller reads directly. Features are float32,
 * either dense (n × d, row-major) or CSR. Labels are class indices in [0, k).
 */
#ifndef SFB_DATA_H
#define SFB_DATA_H

#include <sfb/common.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sfb_dataset {
    uint64_t n;        /* samples */
    uint32_t d;        /* feature dimension */
    uint32_t k;        /* number of classes (max label + 1 unless given) */
    int32_t *labels;   /* n labels in [0, k) */
    int sparse;        /* 1: CSR below; 0: dense `x` */
    float *x;          /* dense: n × d row-major */
    uint64_t *row_ptr; /* CSR: n + 1 offsets into col/val */
    uint32_t *col;     /* CSR: column indices, strictly increasing per row */
    float *val;        /* CSR: values */
};

/* Frees every array and zeroes the struct. Safe on a zeroed struct. */
SFB_API void sfb_dataset_free(struct sfb_dataset *ds);

/* Number of stored values: nnz for CSR, n·d for dense. */
SFB_API uint64_t sfb_dataset_nnz(const struct sfb_dataset *ds);

/* Index base of libsvm feature indices. */
enum sfb_index_base {
    SFB_INDEX_AUTO = -1, /* 0-based if any index 0 occurs, else 1-based */
    SFB_INDEX_0 = 0,
    SFB_INDEX_1 = 1,
};

/* The versions of the settings structures below (docs/api.md, "Versions of
 * the structures"), each on its own: a later release that adds a field to
 * one (in its reserved bytes, zero meaning its default) raises that one's.
 * Fill each with its *_default_settings function, then set what you need;
 * an unknown version or a reserved byte set is -SFB_EVERSION. */
#define SFB_LIBSVM_SETTINGS_VERSION 1
#define SFB_SYNTH_SETTINGS_VERSION 1
#define SFB_PATCH_SETTINGS_VERSION 1

struct sfb_libsvm_settings {
    uint32_t version; /* SFB_LIBSVM_SETTINGS_VERSION */
    enum sfb_index_base index_base; /* default SFB_INDEX_AUTO */
    uint32_t dim;     /* feature dimension; 0 = infer (max index + 1) */
    uint32_t classes; /* class count; 0 = infer (max label + 1) */
    int use_meta;     /* read "<path>.meta" when present (default 1) */
    uint8_t reserved[32]; /* for fields of later versions: zero */
};

/* Fills defaults (version included). NULL is a no-op. */
SFB_API void sfb_libsvm_default_settings(struct sfb_libsvm_settings *s);

/* Reads a libsvm/svmlight text file into CSR. Labels must be integers
 * (class indices, 0-based; "+1"/"-1" binary labels map to 1/0). Lines starting
 * with '#' and blank lines are skipped; a '#' after the features ends the
 * line. A Bösen-style meta file ("<path>.meta" with lines "num_train_total: N",
 * "feature_dim: D", "num_labels: K", "feature_one_based: 0|1") fills settings
 * left at their defaults.
 * `s` may be NULL (the defaults). Returns 0, -ENOENT/-EIO, -SFB_EFORMAT
 * (detail "file:line:column: reason" in sfb_last_error()), -SFB_EVERSION
 * (s of an unknown version), -ENOMEM. On failure *out is left zeroed:
 * nothing is half-loaded. The caller owns *out on success. Any thread. */
SFB_API int sfb_libsvm_read(const char *path, const struct sfb_libsvm_settings *s,
                            struct sfb_dataset *out);

/* Reads an IDX image file (ubyte, 2-D or 3-D) and its IDX label file (ubyte,
 * 1-D), gzip-compressed or not, into a dense dataset with pixels scaled to
 * [0, 1]; d = product of the image dimensions, k = max label + 1 (or
 * `classes` if non-zero; a label >= classes is an error). Errors as
 * sfb_libsvm_read, the detail naming the file and the byte offset (in the
 * uncompressed stream) or header field. */
SFB_API int sfb_idx_read(const char *images_path, const char *labels_path, uint32_t classes,
                         struct sfb_dataset *out);

/* Synthetic MLR data: a hidden true model W (k × d, Gaussian) and features
 * with the given density (1.0 = dense storage, else CSR with ~density·d
 * non-zeros per row); labels are argmax(W·x + noise). The same seed gives
 * the same data everywhere. */
struct sfb_synth_settings {
    uint32_t version; /* SFB_SYNTH_SETTINGS_VERSION */
    uint32_t k, d;
    uint64_t n;
    double density; /* (0, 1] */
    double noise;   /* std of label noise added to the logits (which have std
                       4 by construction); default 0.1 (~2-3% of labels
                       differ from argmax W·x) */
    uint64_t seed;
    uint8_t reserved[32]; /* for fields of later versions: zero */
};

/* Fills defaults (version included). NULL is a no-op. */
SFB_API void sfb_synth_default_settings(struct sfb_synth_settings *s);
/* Parses "synth:k=10,d=100,n=1000,density=0.1,seed=1,noise=0.1" (keys
 * optional, any order) into *s starting from the defaults. -SFB_EFORMAT
 * names the bad key. */
SFB_API int sfb_synth_parse(const char *spec, struct sfb_synth_settings *s);
/* Returns 0, -EINVAL (settings out of range), -SFB_EVERSION (s of an
 * unknown version), -ENOMEM. */
SFB_API int sfb_synth_generate(const struct sfb_synth_settings *s, struct sfb_dataset *out);

/* Resolves a data name to a train and (optionally) a test set:
 *   "fashion-mnist"       the Debian package dataset-fashion-mnist
 *   "synth:..."           sfb_synth_parse; the test set uses seed+1 with the
 *                         same hidden model (n/5 samples, at least 1)
 *   "path.idx" or a directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
 *   anything else         a libsvm file
 * `test` may be NULL; `ls` may be NULL (the defaults). `test_path` (may be
 * NULL) overrides where the test set comes from (a libsvm file, or an IDX
 * images file whose labels file is found by replacing "images-idx3" with
 * "labels-idx1"). The test set gets the train set's d and k (and a libsvm
 * test file the train file's index base);
 * a test index or label beyond them is an error naming the test file. With
 * no test source (a libsvm train file and no test_path, an IDX directory
 * without t10k files) *test is left zeroed (n = 0).
 * Returns 0, -ENOENT (for "fashion-mnist" the message says to install the
 * package), -SFB_EFORMAT, -SFB_ESHAPE, -SFB_EUSAGE, -SFB_EVERSION (ls of an
 * unknown version), -ENOMEM; on failure both
 * sets are zeroed. The caller owns both on success. Any thread. */
SFB_API int sfb_data_load(const char *name, const char *test_path,
                          const struct sfb_libsvm_settings *ls, struct sfb_dataset *train,
                          struct sfb_dataset *test);

/* Sharding (docs/design.md, "Data"): in a run of `world` workers each keeps
 * only its shard of the training rows. The rows, in file order, are cut
 * into blocks of `world` consecutive rows; block b is rotated by an offset
 * drawn from (seed, b), and the row at position q of the block belongs to
 * rank (q + offset) mod world. So the shards partition the rows, every
 * shard holds one row of every full block (sizes differ by at most 1), and
 * everything below is a pure O(1) function of (seed, world, rank, row):
 * independent of how or in which order a loader reads. world 1 (or 0) is
 * the whole set. */
struct sfb_shard {
    uint32_t rank, world;
    uint64_t seed;
};

/* The rank that holds row i (0-based, file order). 0 if s is NULL. */
SFB_API uint32_t sfb_shard_owner(const struct sfb_shard *s, uint64_t i);
/* How many of n rows shard s holds: n / world or one more. */
SFB_API uint64_t sfb_shard_rows(const struct sfb_shard *s, uint64_t n);
/* The row (file order) that is shard s's j-th row; shard rows keep file
 * order, so this is increasing in j. */
SFB_API uint64_t sfb_shard_global(const struct sfb_shard *s, uint64_t j);

/* sfb_data_load that keeps only shard `shard`'s rows of the training set
 * (NULL: all of them). Every loader still reads and checks every row: a bad
 * row is reported, with its file and line or byte offset, by every rank
 * whoever owns it, and shapes inferred from the data (libsvm d and k, IDX
 * k) are those of the whole file, the same on every rank. Memory holds only
 * the kept rows. *train_rows (may be NULL) receives the number of rows of
 * the whole training set. The test set (if `test` is not NULL) is loaded
 * whole. Errors as sfb_data_load. */
SFB_API int sfb_data_load_shard(const char *name, const char *test_path,
                                const struct sfb_libsvm_settings *ls,
                                const struct sfb_shard *shard, struct sfb_dataset *train,
                                struct sfb_dataset *test, uint64_t *train_rows);

/* Storage layout of a dataset's features. */
enum sfb_layout {
    SFB_LAYOUT_AUTO = 0, /* as loaded: libsvm → CSR, IDX → dense, synth by density */
    SFB_LAYOUT_DENSE = 1,
    SFB_LAYOUT_SPARSE = 2,
};

/* Converts ds in place to `layout` (values and order unchanged). Returns 0,
 * -ENOMEM or -EOVERFLOW; on failure ds is unchanged. */
SFB_API int sfb_dataset_set_layout(struct sfb_dataset *ds, enum sfb_layout layout);

/* Deterministic sampling over sharded data: rank r of `world` holds shard
 * {r, world, seed} of the n training rows (sfb_shard_*), and in epoch e it
 * reads its own rows in an order permuted by a PRNG seeded with (seed, e)
 * (and r, when world > 1): clock t of epoch e reads positions
 * [t·batch, +batch) of that permutation. The indices returned are positions
 * in the shard (rows of the dataset sfb_data_load_shard kept), which with
 * world 1 are the rows of the whole set. Every rank runs the same
 * clocks_per_epoch = ⌊n / world⌋ / batch (the smallest shard's; the rows
 * left over are skipped that epoch, different ones each epoch); within an
 * epoch no row is read twice. */
struct sfb_sampler;

/* n: rows of the whole set. Returns 0, -SFB_EUSAGE (rank >= world, batch 0,
 * or ⌊n / world⌋ < batch) or -ENOMEM (it holds one permutation of its
 * shard's rows); *s is NULL on failure. */
SFB_API int sfb_sampler_open(struct sfb_sampler **s, uint64_t n, uint32_t rank, uint32_t world,
                             uint32_t batch, uint64_t seed);
SFB_API void sfb_sampler_close(struct sfb_sampler **s);
SFB_API uint64_t sfb_sampler_clocks_per_epoch(const struct sfb_sampler *s);
/* The shard positions rank reads at global clock `clock` (epoch =
 * clock / clocks_per_epoch); `out` has room for `batch` indices. Returns 0
 * or -ENOMEM. Not thread-safe per sampler. */
SFB_API int sfb_sampler_batch(struct sfb_sampler *s, uint64_t clock, uint64_t *out);

/* Image patches (for sparse coding): every p × p window (stride 1) of each
 * image of a dense or CSR image dataset whose rows are h × w images stored
 * row by row (IDX order), as a new dense dataset of d = p·p; each patch keeps
 * its image's label. Patches are numbered image by image, then by top-left
 * corner in row-major order; with max_patches a seed-determined subset of
 * that many patches (selection sampling, so the order is kept) is taken. */
struct sfb_patch_settings {
    uint32_t version;     /* SFB_PATCH_SETTINGS_VERSION */
    uint32_t h, w;        /* image height and width; both 0: square, √d (default) */
    uint32_t p;           /* patch side (default 8) */
    uint64_t max_patches; /* 0 (default): every patch */
    uint64_t seed;        /* subset choice (default 1) */
    int remove_mean;      /* 1: subtract each patch's mean (default 0) */
    uint8_t reserved[32]; /* for fields of later versions: zero */
};

/* Fills defaults (version included). NULL is a no-op. */
SFB_API void sfb_patch_default_settings(struct sfb_patch_settings *s);
/* Returns 0, -EINVAL (p = 0, p larger than the image, only one of h and w
 * given), -SFB_EVERSION (s of an unknown version), -SFB_ESHAPE (h·w ≠ d, or d not a square when h = w = 0; a CSR
 * column ≥ d), -ENOMEM, -EOVERFLOW; the detail is in sfb_last_error(). On
 * failure *out is zeroed; on success the caller owns it (sfb_dataset_free).
 * Any thread. */
SFB_API int sfb_data_patches(const struct sfb_dataset *images,
                             const struct sfb_patch_settings *s, struct sfb_dataset *out);

#ifdef __cplusplus
}
#endif
#endif
