/* IDX reader internals shared with src/data.c. */
#ifndef SFB_SRC_IDX_H
#define SFB_SRC_IDX_H

/* 1 if `path` (plain or gzip) starts like an IDX file (two zero bytes, a
 * known IDX type code, 1..4 dimensions), 0 if not, -ENOENT/-EIO if it cannot
 * be opened or read (message recorded). */
int sfb__idx_sniff(const char *path);

#endif
