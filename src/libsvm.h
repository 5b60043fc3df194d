/* libsvm/svmlight text reader: internals shared with src/data.c. */
#ifndef SFB_SRC_LIBSVM_H
#define SFB_SRC_LIBSVM_H

#include "sfb/data.h"

/* sfb_libsvm_read that also reports the index base it used (0 or 1, after
 * auto-detection and the meta file), so a test file can be read with the
 * train file's base. `base_used` may be NULL. */
int sfb__libsvm_read(const char *path, const struct sfb_libsvm_settings *s,
                     struct sfb_dataset *out, int *base_used);

#endif
