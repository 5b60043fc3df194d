/* libsvm/svmlight text reader: internals shared with src/data/data.c. */
#ifndef SFB_SRC_LIBSVM_H
#define SFB_SRC_LIBSVM_H

#include <sfb/data.h>

/* sfb_libsvm_read that keeps only the rows of `shard` (NULL: all; every
 * line is still parsed and checked, and d, k, the index base and the
 * {-1,+1} mapping come from the whole file), and also reports the index
 * base it used (0 or 1, after auto-detection and the meta file), so a test
 * file can be read with the train file's base, and the number of samples in
 * the whole file. `base_used` and `rows` may be NULL. */
int sfb__libsvm_read(const char *path, const struct sfb_libsvm_settings *s,
                     const struct sfb_shard *shard, struct sfb_dataset *out, int *base_used,
                     uint64_t *rows);

/* Reads "<path>.meta" (Bösen): "key: value" lines (num_train_total,
 * feature_dim, num_labels, feature_one_based; others are ignored). Fills
 * what `s` leaves open (dim, classes, index base) and *num_train. No file:
 * 0 and nothing changed; a bad line: -SFB_EFORMAT naming file:line:column
 * (libsvm_meta.c). */
int sfb__libsvm_read_meta(const char *path, struct sfb_libsvm_settings *s, uint64_t *num_train);

#endif
