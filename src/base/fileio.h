/* Whole-file reads and atomic writes (temp file + fsync + rename), shared by
 * model files, checkpoints and anything else that must never be half-written. */
#ifndef SFB_SRC_FILEIO_H
#define SFB_SRC_FILEIO_H

#include <stddef.h>
#include <stdint.h>

struct stat;

/* Opens `path` for reading without blocking on a FIFO, and refuses anything
 * but a regular file (a FIFO, a directory, a device) with a message naming
 * the path and `what` it was meant to be ("the model file"). On success
 * *fd is a blocking descriptor the caller closes and *st (may be NULL) its
 * stat. Returns 0, -ENOENT, -EISDIR or -EIO with the detail recorded. */
int sfb__open_regular(const char *path, const char *what, int *fd, struct stat *st);

/* Reads `path` into a malloc'd buffer (caller frees). Returns 0, -ENOENT,
 * -EISDIR, -EIO (not a regular file), -ENOMEM, -EFBIG (over max_size) with
 * the detail recorded. */
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
