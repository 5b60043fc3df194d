/* Whole-file reads and atomic writes (temp file + fsync + rename), shared by
 * model files, checkpoints and anything else that must never be half-written. */
#ifndef SFB_SRC_FILEIO_H
#define SFB_SRC_FILEIO_H

#include <stddef.h>
#include <stdint.h>

/* Reads `path` into a malloc'd buffer (caller frees). Returns 0, -ENOENT,
 * -EIO, -ENOMEM, -EFBIG (over max_size) with the detail recorded. */
int sfb__read_file(const char *path, size_t max_size, uint8_t **buf, size_t *len);

/* Writes the concatenation of `n` pieces to `path` atomically: a temp file in
 * the same directory, fsync, rename over `path`, fsync of the directory. On
 * failure `path` is untouched and the temp file removed. */
struct sfb__piece {
    const void *data;
    size_t len;
};
int sfb__write_file_atomic(const char *path, const struct sfb__piece *pieces, size_t n);

#endif
