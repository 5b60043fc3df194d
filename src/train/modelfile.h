/* Model files in memory (format in docs/formats.md): the encoder and decoder
 * behind sfb_model_save / sfb_model_load, shared with checkpoints
 * (src/train/checkpoint.c), which embed a complete model file. */
#ifndef SFB_SRC_MODELFILE_H
#define SFB_SRC_MODELFILE_H

#include <sfb/model.h>

#include <stddef.h>
#include <stdint.h>

/* The whole model file of m (header, matrices, XXH3-64) in a malloc'd
 * buffer (caller frees). Returns 0 or -ENOMEM. */
int sfb__model_encode(const struct sfb_model *m, int64_t clock, uint8_t **out, size_t *out_len);

/* Checks and decodes a model file held in buf[0..len) into a new model;
 * `path` names it in errors. Errors as sfb_model_load. */
int sfb__model_decode(const uint8_t *buf, size_t len, const char *path, struct sfb_model **out,
                      int64_t *clock);

#endif
