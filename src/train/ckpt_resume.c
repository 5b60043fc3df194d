/* Resuming from checkpoints (src/train/checkpoint.h): every rank scans its
 * files, the ranks agree through the job's allgather on the newest clock
 * valid on every rank, and each restores its replica from that clock. */
#include "config.h"
#include "src/train/checkpoint.h"

#include <sfb/job.h>
#include "src/base/bytes.h"
#include "src/base/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one rank tells the others when resuming: u32 scan result, u32
 * world of its checkpoints when they are of another world size (else 0),
 * u32 count, u32 reserved, the clocks, the message of its failure. */
#define AGREE_MSG 184
#define AGREE_CLOCKS 16
#define AGREE_TEXT (AGREE_CLOCKS + 8 * SFB__CKPT_KEEP_SCAN)
_Static_assert(SFB__CKPT_REPORT == AGREE_TEXT + AGREE_MSG, "report layout");

void sfb__ckpt_report_pack(uint8_t out[SFB__CKPT_REPORT], uint32_t rank, int local_ret,
                           uint32_t ckpt_world, const int64_t *clocks, int n, const char *dir)
{
    memset(out, 0, SFB__CKPT_REPORT);
    if (local_ret)
        snprintf((char *)out + AGREE_TEXT, AGREE_MSG, "%s", sfb_error_message(local_ret));
    else if (n == 0)
        snprintf((char *)out + AGREE_TEXT, AGREE_MSG, "no valid checkpoint of rank %u in %s",
                 rank, dir);
    n = local_ret ? 0 : SFB_MIN(n, SFB__CKPT_KEEP_SCAN);
    sfb__put_u32(out, (uint32_t)local_ret);
    sfb__put_u32(out + 4, ckpt_world);
    sfb__put_u32(out + 8, (uint32_t)n);
    for (int i = 0; i < n; i++) sfb__put_u64(out + AGREE_CLOCKS + 8 * i, (uint64_t)clocks[i]);
}

static uint32_t report_n(const uint8_t *b)
{
    return SFB_MIN(sfb__get_u32(b + 8), (uint32_t)SFB__CKPT_KEEP_SCAN);
}

/* The decision is a function of the gathered reports only, never of the
 * deciding rank, so every rank fails (or resumes) with the same message
 * whichever rank's output a user or a test happens to see first. In order:
 * checkpoints of another world size (a rank beyond the old world has no
 * file at all, so "no checkpoint of rank R" would hide the real cause); the
 * lowest rank whose scan failed; the lowest rank without a valid file; no
 * clock common to every rank. */
int sfb__ckpt_decide(const uint8_t *all, uint32_t world, const char *dir, int64_t *chosen)
{
    for (uint32_t r = 0; r < world; r++) {
        uint32_t was = sfb__get_u32(all + (size_t)r * SFB__CKPT_REPORT + 4);
        if (was)
            return sfb__error(-SFB_ECONFIG,
                              "%s: configuration differs: world is %u in the checkpoint, %u now "
                              "(resume with -n %u)",
                              dir, was, world, was);
    }
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t r = 0; r < world; r++) {
            const uint8_t *b = all + (size_t)r * SFB__CKPT_REPORT;
            int rr = (int)sfb__get_u32(b);
            if (pass == 0 ? rr != 0 : report_n(b) == 0)
                return sfb__error(rr ? rr : -ENOENT, "rank %u cannot resume: %.*s", r,
                                  AGREE_MSG - 1, (const char *)b + AGREE_TEXT);
        }
    /* The newest clock every rank holds a valid checkpoint of. */
    int64_t best = -1;
    for (uint32_t i = 0; i < report_n(all); i++) {
        int64_t c = (int64_t)sfb__get_u64(all + AGREE_CLOCKS + 8 * i);
        int everywhere = 1;
        for (uint32_t r = 1; r < world && everywhere; r++) {
            const uint8_t *b = all + (size_t)r * SFB__CKPT_REPORT;
            int found = 0;
            for (uint32_t j = 0; j < report_n(b); j++)
                found |= (int64_t)sfb__get_u64(b + AGREE_CLOCKS + 8 * j) == c;
            everywhere = found;
        }
        if (everywhere && c > best) best = c;
    }
    if (best < 0) {
        char list[400] = "";
        size_t off = 0;
        for (uint32_t r = 0; r < world && off < sizeof list - 40; r++) {
            const uint8_t *b = all + (size_t)r * SFB__CKPT_REPORT;
            off += (size_t)snprintf(list + off, sizeof list - off, "%srank %u:", r ? "; " : "", r);
            for (uint32_t j = 0; j < report_n(b) && j < 3 && off < sizeof list - 24; j++)
                off += (size_t)snprintf(list + off, sizeof list - off, " %lld",
                                        (long long)sfb__get_u64(b + AGREE_CLOCKS + 8 * j));
        }
        return sfb__error(-ENOENT, "%s: no checkpoint clock is valid on every rank (%s)", dir,
                          list);
    }
    *chosen = best;
    return 0;
}

int sfb__ckpt_agree(struct sfb_job *job, uint32_t rank, uint32_t world, int local_ret,
                    uint32_t ckpt_world, const int64_t *clocks, int n, const char *dir,
                    int64_t *chosen)
{
    uint8_t mine[SFB__CKPT_REPORT];
    sfb__ckpt_report_pack(mine, rank, local_ret, ckpt_world, clocks, n, dir);
    uint8_t *all = malloc((size_t)world * SFB__CKPT_REPORT);
    if (!all) return sfb__error(-ENOMEM, "checkpoint: out of memory");
    int ret = 0;
    if (world > 1)
        ret = sfb_job_allgather(job, mine, SFB__CKPT_REPORT, all);
    else
        memcpy(all, mine, SFB__CKPT_REPORT);
    if (!ret) ret = sfb__ckpt_decide(all, world, dir, chosen);
    free(all);
    return ret;
}

int sfb__ckpt_resume(struct sfb_job *job, const char *dir, uint32_t rank, uint32_t world,
                     uint32_t batch, const char *config, struct sfb_model *m, int64_t *start,
                     struct sfb__rng *rng, char engines[64])
{
    int64_t clocks[SFB__CKPT_KEEP_SCAN], chosen = 0;
    uint32_t ckpt_world = 0;
    int n = sfb__ckpt_scan(dir, rank, world, config, clocks, SFB_ARRAY_LEN(clocks), &ckpt_world);
    int ret = sfb__ckpt_agree(job, rank, world, n < 0 ? n : 0, ckpt_world, clocks, n < 0 ? 0 : n,
                              dir, &chosen);
    if (ret) return ret;
    if (clocks[0] != chosen)
        SFB_LOG_W("rank %u: resuming from clock %lld, not from this rank's newest valid "
                  "checkpoint %lld (not valid on every rank)",
                  rank, (long long)chosen, (long long)clocks[0]);
    struct sfb__ckpt *c = malloc(sizeof *c);
    if (!c) return sfb__error(-ENOMEM, "out of memory");
    ret = sfb__ckpt_read(dir, rank, world, chosen, config, c);
    if (!ret && c->st.cursor != (uint64_t)chosen * batch)
        ret = sfb__error(-SFB_EFORMAT, "%s: rank %u: data cursor %llu does not match clock %lld",
                         dir, rank, (unsigned long long)c->st.cursor, (long long)chosen);
    if (!ret) ret = sfb__ckpt_restore_model(c, m);
    if (!ret) {
        *start = chosen;
        *rng = c->st.rng;
        memcpy(engines, c->engines, 64);
        /* checkpoints beyond the resumed clock belong to the abandoned run */
        sfb__ckpt_remove_after(dir, rank, chosen);
        SFB_LOG_I("rank %u: resumed from checkpoint of clock %lld in %s", rank,
                  (long long)chosen, dir);
    }
    sfb__ckpt_free(c);
    free(c);
    return ret;
}
