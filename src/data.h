/* Dataset helpers and name resolution internals (src/data.c). */
#ifndef SFB_SRC_DATA_H
#define SFB_SRC_DATA_H

#include "sfb/data.h"

/* Loads Fashion-MNIST from `dir` (the package directory in production;
 * tests pass another one). A missing directory or file fails with -ENOENT
 * and a message telling to install the dataset-fashion-mnist package.
 * `test` may be NULL. */
int sfb__data_load_fashion(const char *dir, struct sfb_dataset *train, struct sfb_dataset *test);

#endif
