/* IDX reader internals shared with src/data/data.c. */
#ifndef SFB_SRC_IDX_H
#define SFB_SRC_IDX_H

#include <stdint.h>

/* 1 if `path` (plain or gzip) starts like an IDX file (two zero bytes, a
 * known IDX type code, 1..4 dimensions), 0 if not, -ENOENT/-EIO if it cannot
 * be opened or read (message recorded). */
int sfb__idx_sniff(const char *path);

/* sfb_idx_read keeping only the rows of `shard` (NULL: all). Every image
 * and label is still read and checked; k is inferred from every label.
 * *rows (may be NULL) gets the number of images in the file. */
struct sfb_shard;
struct sfb_dataset;
int sfb__idx_read_shard(const char *images_path, const char *labels_path, uint32_t classes,
                        const struct sfb_shard *shard, struct sfb_dataset *out, uint64_t *rows);

#endif
