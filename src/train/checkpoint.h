/* Checkpoints: one file per rank per checkpoint clock, the format, the
 * atomic write with pruning, the scan for valid files and the load
 * (format in docs/formats.md, behaviour in docs/robustness.md).
 *
 * A checkpoint at clock c holds the state before computing clock c, taken
 * after every rank drained its sync engine to c − 1 and passed a barrier, so
 * every replica holds exactly the updates of clocks < c. Per rank:
 *   DIR/rank-<R>.clock-<C, 12 digits>.ckpt
 * with the replica (an embedded model file), the clock, the data cursor, the
 * RNG state, the model's private state blob and the configuration text (and
 * its hash) of every setting that changes the math. */
#ifndef SFB_SRC_CHECKPOINT_H
#define SFB_SRC_CHECKPOINT_H

#include <sfb/model.h>
#include <sfb/train.h>
#include "src/base/rng.h"

#include <stddef.h>
#include <stdint.h>

#define SFB__CKPT_MAGIC "SFBCKPT1"
#define SFB__CKPT_VERSION 1u
#define SFB__CKPT_HDR 112u
#define SFB__CKPT_CONFIG_MAX 16384u
#define SFB__CKPT_KEEP_SCAN 8 /* valid clocks one rank reports when resuming */

/* Everything of a rank besides the replica. */
struct sfb__ckpt_state {
    uint32_t rank, world;
    int64_t clock;   /* the next clock to compute */
    uint64_t cursor; /* samples this rank has read: clock × batch (the
                        sampler is a pure function of the clock; a check) */
    struct sfb__rng rng; /* the worker's debug-delay stream */
    uint8_t model_state[SFB_MODEL_STATE_MAX];
    uint32_t model_state_len;
};

/* A decoded checkpoint file. */
struct sfb__ckpt {
    struct sfb__ckpt_state st;
    uint64_t config_hash;
    char config[SFB__CKPT_CONFIG_MAX + 1]; /* NUL-terminated */
    /* --sync auto: the engines the run chose ("sfb,fms"), from the config's
     * last line "engines=…" (not compared: a resumed run keeps them); "" */
    char engines[64];
    struct sfb_model *model;               /* the replica, a new model */
};

/* The configuration text: "key=value\n" lines of every setting that
 * changes the math (not --clocks/--epochs, outputs or logging). Returns 0 or
 * -ENAMETOOLONG if it does not fit in cap bytes. */
int sfb__ckpt_config(const struct sfb_train_settings *s, uint32_t world, uint32_t batch,
                     uint64_t n, uint32_t d, uint32_t k, char *out, size_t cap);

/* The file of (rank, clock) in dir, malloc'd (NULL: out of memory). */
char *sfb__ckpt_path(const char *dir, uint32_t rank, int64_t clock);

/* The whole file in a malloc'd buffer. Returns 0, -EINVAL, -ENOMEM. */
int sfb__ckpt_encode(const struct sfb__ckpt_state *st, const char *config, struct sfb_model *m,
                     uint8_t **out, size_t *len);
/* Checks and decodes buf[0..len) (untrusted; `path` names it in errors).
 * On success out->model is a new model (sfb__ckpt_free releases it).
 * Returns 0, -SFB_ETRUNC, -SFB_EFORMAT, -SFB_ECHECKSUM, -SFB_EVERSION,
 * -SFB_ESHAPE, -ENOMEM with the reason recorded. */
int sfb__ckpt_decode(const uint8_t *buf, size_t len, const char *path, struct sfb__ckpt *out);
void sfb__ckpt_free(struct sfb__ckpt *c);

/* Writes rank st->rank's checkpoint of st->clock atomically into dir
 * (created if missing), then removes this rank's other checkpoints except
 * the newest older one. Returns 0 or a negative code. */
int sfb__ckpt_write(const char *dir, const struct sfb__ckpt_state *st, const char *config,
                    struct sfb_model *m);

/* Clocks of this rank's checkpoint files in dir whatever their contents,
 * newest first (at most max). Returns how many, or a negative code (-ENOENT
 * for a missing dir is reported as 0 files). */
int sfb__ckpt_list(const char *dir, uint32_t rank, int64_t *clocks, size_t max);

/* Reads, checks and decodes one file and compares it with this job: world,
 * rank and configuration (a difference: -SFB_ECONFIG naming the field). */
int sfb__ckpt_read(const char *dir, uint32_t rank, uint32_t world, int64_t clock,
                   const char *config, struct sfb__ckpt *out);

/* The newest valid checkpoints of this rank, newest first: an invalid file
 * is logged (warning: file and reason) and skipped; a valid file of another
 * configuration stops the scan with -SFB_ECONFIG, and when that file is of
 * another world size *ckpt_world is set to it (else 0). Returns how many. */
int sfb__ckpt_scan(const char *dir, uint32_t rank, uint32_t world, const char *config,
                   int64_t *clocks, size_t max, uint32_t *ckpt_world);

/* Removes this rank's checkpoint files with a clock above `clock` (an
 * abandoned future after a resume). */
void sfb__ckpt_remove_after(const char *dir, uint32_t rank, int64_t clock);

/* Copies a checkpoint's replica and private state into the worker's model:
 * 0, or -SFB_ESHAPE / -EINVAL with the reason. */
int sfb__ckpt_restore_model(const struct sfb__ckpt *c, struct sfb_model *m);

/* The state blob of the model (its state_save op), into st. */
void sfb__ckpt_save_model_state(struct sfb_model *m, struct sfb__ckpt_state *st);

/* Resuming: every rank passes its scan result (local_ret < 0: its error,
 * recorded, and ckpt_world as sfb__ckpt_scan set it; else clocks[0..n),
 * newest first) and all agree, through the job's allgather, on the
 * newest clock valid on every rank. Collective: every rank calls it,
 * whatever its own result. Returns 0 and *chosen, or an error; the outcome
 * and its message are the same on every rank (sfb__ckpt_decide). */
struct sfb_job;
int sfb__ckpt_agree(struct sfb_job *job, uint32_t rank, uint32_t world, int local_ret,
                    uint32_t ckpt_world, const int64_t *clocks, int n, const char *dir,
                    int64_t *chosen);

/* One rank's report for the agreement, and the decision from the reports of
 * ranks 0..world−1 (world × SFB__CKPT_REPORT bytes): a function of the
 * reports alone, whichever rank decides. */
#define SFB__CKPT_REPORT (16 + 8 * SFB__CKPT_KEEP_SCAN + 184)
void sfb__ckpt_report_pack(uint8_t out[SFB__CKPT_REPORT], uint32_t rank, int local_ret,
                           uint32_t ckpt_world, const int64_t *clocks, int n, const char *dir);
int sfb__ckpt_decide(const uint8_t *all, uint32_t world, const char *dir, int64_t *chosen);

/* --resume: scan, agree (collective), read the chosen file, restore the
 * replica and the model's private state into m, remove this rank's files
 * beyond the chosen clock. Sets *start, the worker's *rng and engines (the
 * checkpoint's choice of --sync auto, or ""). */
int sfb__ckpt_resume(struct sfb_job *job, const char *dir, uint32_t rank, uint32_t world,
                     uint32_t batch, const char *config, struct sfb_model *m, int64_t *start,
                     struct sfb__rng *rng, char engines[64]);

#endif
