/* Dataset helpers and name resolution internals (src/data/data.c). */
#ifndef SFB_SRC_DATA_INTERNAL_H
#define SFB_SRC_DATA_INTERNAL_H

#include <sfb/data.h>

/* Loads Fashion-MNIST from `dir` (the package directory in production;
 * tests pass another one). A missing directory or file fails with -ENOENT
 * and a message telling to install the dataset-fashion-mnist package.
 * `test` may be NULL. Only `shard`'s training rows are kept (NULL: all);
 * *rows (may be NULL) gets the number of training images. */
int sfb__data_load_fashion(const char *dir, const struct sfb_shard *shard,
                           struct sfb_dataset *train, struct sfb_dataset *test, uint64_t *rows);

/* The sampler of sfb_sampler_open for a shard of n_local rows when every
 * rank holds at least n_common (the caller guarantees that every rank
 * passes the same n_common: it sets clocks_per_epoch). Internal, for data
 * transformed after loading (patches). Returns as sfb_sampler_open. */
struct sfb_sampler;
int sfb__sampler_open_rows(struct sfb_sampler **out, uint64_t n_local, uint64_t n_common,
                           uint32_t rank, uint32_t world, uint32_t batch, uint64_t seed);

/* A sampler for one worker holding the whole set of n rows that reads, at
 * each clock, exactly what `world` workers of batch batch/world read from
 * their shards, rank 0's rows first (as rows of the whole set). For tests
 * of BSP equivalence (SFB_DEBUG_SAMPLE_AS, src/train/train.c). Returns as
 * sfb_sampler_open; -SFB_EUSAGE if world does not divide batch. */
int sfb__sampler_open_union(struct sfb_sampler **out, uint64_t n, uint32_t world, uint32_t batch,
                            uint64_t seed);

#endif
