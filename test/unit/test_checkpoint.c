/* Checkpoint files (src/train/checkpoint.c): bit-identical round trip, every
 * corruption and truncation detected, the configuration check naming the
 * field, pruning to two files, the scan skipping bad files.
 * With CKPT_SEED_DIR set it also writes valid files there (fuzz seeds). */
#include <sfb/sfb.h>
#include "models/model_internal.h"
#include "src/train/checkpoint.h"
#include "src/base/util.h"
#include "test.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[] = "/tmp/sfb_ckpt_XXXXXX";

static int make_model(struct sfb_model **m, const char *kind)
{
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    s.kind = kind;
    s.d = 7;
    s.k = 3;
    s.proj_dim = 4;
    s.lambda = 0.25;
    s.seed = 42;
    int r = sfb_model_open(m, &s);
    if (r) return r;
    struct sfb_matrix *a = sfb_model_matrix(*m, 0);
    for (size_t i = 0; i < (size_t)a->rows * a->cols; i++) a->data[i] = (float)i * 0.37f - 3.0f;
    return 0;
}

static void make_state(struct sfb__ckpt_state *st, int64_t clock)
{
    memset(st, 0, sizeof *st);
    st->rank = 1;
    st->world = 3;
    st->clock = clock;
    st->cursor = (uint64_t)clock * 5;
    sfb__rng_seed2(&st->rng, 7, 9);
    sfb__rng_gauss(&st->rng); /* leaves a spare */
}

static const char *config_text(double lr, uint64_t clocks)
{
    static char buf[SFB__CKPT_CONFIG_MAX];
    struct sfb_train_settings s;
    sfb_train_default_settings(&s);
    s.lr = lr;
    s.clocks = clocks;
    if (sfb__ckpt_config(&s, 3, 5, 1000, 7, 3, buf, sizeof buf)) return NULL;
    return buf;
}

static int test_config_text(void)
{
    char a[SFB__CKPT_CONFIG_MAX];
    snprintf(a, sizeof a, "%s", config_text(0.5, 100));
    /* --clocks may change on resume; lr may not */
    ASSERT_STR_CONTAINS(a, "lr=0.5\n");
    ASSERT_STR_CONTAINS(a, "world=3\nbatch=5\n");
    ASSERT_EQ(strcmp(a, config_text(0.5, 5000)), 0);
    ASSERT_NE(strcmp(a, config_text(0.25, 100)), 0);
    return 0;
}

static int test_round_trip(void)
{
    struct sfb_model *m;
    ASSERT_OK(make_model(&m, "dml"));
    /* one factors call would advance dml's step; set it through the hook */
    const struct sfb_model_ops *ops = sfb_model_get_ops(m);
    ASSERT(ops->state_save && ops->state_load);
    struct sfb__ckpt_state st;
    make_state(&st, 1234);
    uint8_t step[8] = {0x2a, 0, 0, 0, 0, 0, 0, 0};
    ASSERT_OK(ops->state_load(sfb__model_priv(m), step, 8));
    sfb__ckpt_save_model_state(m, &st);
    ASSERT_EQ(st.model_state_len, 8);
    ASSERT_EQ(st.model_state[0], 0x2a);
    const char *cfg = config_text(0.5, 100);
    ASSERT_OK(sfb__ckpt_write(dir, &st, cfg, m));

    struct sfb__ckpt *c = malloc(sizeof *c);
    ASSERT(c != NULL);
    ASSERT_OK(sfb__ckpt_read(dir, 1, 3, 1234, cfg, c));
    ASSERT_EQ(c->st.rank, 1);
    ASSERT_EQ(c->st.world, 3);
    ASSERT_EQ(c->st.clock, 1234);
    ASSERT_EQ(c->st.cursor, 1234 * 5);
    ASSERT_EQ(memcmp(&c->st.rng.s, &st.rng.s, sizeof st.rng.s), 0);
    ASSERT_EQ(c->st.rng.has_spare, 1);
    ASSERT_EQ(memcmp(&c->st.rng.spare, &st.rng.spare, sizeof(double)), 0);
    ASSERT_EQ(c->st.model_state_len, 8);
    ASSERT_EQ(memcmp(c->st.model_state, st.model_state, 8), 0);
    ASSERT_EQ(strcmp(c->config, cfg), 0);
    const struct sfb_matrix *a = sfb_model_matrix(m, 0), *b = sfb_model_matrix(c->model, 0);
    ASSERT_EQ(a->rows, b->rows);
    ASSERT_EQ(a->cols, b->cols);
    ASSERT_EQ(memcmp(a->data, b->data, (size_t)a->rows * a->cols * sizeof(float)), 0);

    /* restore into a fresh replica: bit-identical matrix and state */
    struct sfb_model *fresh;
    ASSERT_OK(make_model(&fresh, "dml"));
    memset(sfb_model_matrix(fresh, 0)->data, 0, (size_t)a->rows * a->cols * sizeof(float));
    ASSERT_OK(sfb__ckpt_restore_model(c, fresh));
    ASSERT_EQ(memcmp(a->data, sfb_model_matrix(fresh, 0)->data,
                     (size_t)a->rows * a->cols * sizeof(float)), 0);
    struct sfb__ckpt_state st2;
    make_state(&st2, 1234);
    sfb__ckpt_save_model_state(fresh, &st2);
    ASSERT_EQ(st2.model_state_len, 8);
    ASSERT_EQ(st2.model_state[0], 0x2a);
    /* encoding the restored replica again gives the same bytes */
    uint8_t *e1, *e2;
    size_t l1, l2;
    ASSERT_OK(sfb__ckpt_encode(&st, cfg, m, &e1, &l1));
    ASSERT_OK(sfb__ckpt_encode(&st2, cfg, fresh, &e2, &l2));
    ASSERT_EQ(l1, l2);
    ASSERT_EQ(memcmp(e1, e2, l1), 0);
    free(e1);
    free(e2);

    /* an mlr replica refuses a dml checkpoint */
    struct sfb_model *other;
    ASSERT_OK(make_model(&other, "mlr"));
    ASSERT_EQ(sfb__ckpt_restore_model(c, other), -SFB_ESHAPE);
    ASSERT_STR_CONTAINS(sfb_last_error(), "dml");
    sfb_model_close(&other);
    sfb_model_close(&fresh);
    sfb__ckpt_free(c);
    free(c);
    sfb_model_close(&m);
    return 0;
}

static int test_every_corruption(void)
{
    struct sfb_model *m;
    ASSERT_OK(make_model(&m, "mlr"));
    struct sfb__ckpt_state st;
    make_state(&st, 40);
    uint8_t *buf;
    size_t len;
    ASSERT_OK(sfb__ckpt_encode(&st, config_text(1, 0), m, &buf, &len));
    struct sfb__ckpt *c = malloc(sizeof *c);
    ASSERT(c != NULL);
    ASSERT_OK(sfb__ckpt_decode(buf, len, "x", c));
    sfb__ckpt_free(c);
    const char *seeds = getenv("CKPT_SEED_DIR");
    if (seeds) {
        char p[512];
        snprintf(p, sizeof p, "%s/valid-mlr", seeds);
        FILE *f = fopen(p, "wb");
        if (f) {
            fwrite(buf, 1, len, f);
            fclose(f);
        }
    }
    /* every single bit flip, anywhere */
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (uint8_t)(1u << bit);
            int r = sfb__ckpt_decode(buf, len, "x", c);
            buf[i] ^= (uint8_t)(1u << bit);
            if (r == 0) {
                sfb__ckpt_free(c);
                TEST_FAIL_AT("flip of bit %d of byte %zu not detected", bit, i);
            }
        }
    /* every truncation, and a trailing byte */
    for (size_t n = 0; n < len; n++) {
        int r = sfb__ckpt_decode(buf, n, "x", c);
        if (r == 0) TEST_FAIL_AT("truncation to %zu bytes not detected", n);
        if (n >= SFB__CKPT_HDR + 8 && r != -SFB_ETRUNC)
            TEST_FAIL_AT("truncation to %zu bytes: %d, not -SFB_ETRUNC", n, r);
    }
    uint8_t *longer = malloc(len + 1);
    ASSERT(longer != NULL);
    memcpy(longer, buf, len);
    longer[len] = 0;
    ASSERT_EQ(sfb__ckpt_decode(longer, len + 1, "x", c), -SFB_EFORMAT);
    free(longer);
    free(c);
    free(buf);
    sfb_model_close(&m);
    return 0;
}

static int test_config_mismatch(void)
{
    struct sfb_model *m;
    ASSERT_OK(make_model(&m, "mlr"));
    struct sfb__ckpt_state st;
    make_state(&st, 7);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/cfg", dir);
    ASSERT_OK(sfb__ckpt_write(sub, &st, config_text(0.5, 10), m));
    struct sfb__ckpt *c = malloc(sizeof *c);
    ASSERT(c != NULL);
    ASSERT_EQ(sfb__ckpt_read(sub, 1, 3, 7, config_text(0.25, 10), c), -SFB_ECONFIG);
    ASSERT_STR_CONTAINS(sfb_last_error(), "lr is \"0.5\" in the checkpoint, \"0.25\" now");
    ASSERT_EQ(sfb__ckpt_read(sub, 1, 4, 7, config_text(0.5, 10), c), -SFB_ECONFIG);
    ASSERT_STR_CONTAINS(sfb_last_error(), "world is 3 in the checkpoint, 4 now");
    /* the scan stops at a configuration mismatch instead of falling back */
    int64_t clocks[4];
    uint32_t cw = 99;
    ASSERT_EQ(sfb__ckpt_scan(sub, 1, 3, config_text(0.25, 10), clocks, 4, &cw), -SFB_ECONFIG);
    ASSERT_EQ(cw, 0u);
    ASSERT_EQ(sfb__ckpt_scan(sub, 1, 3, config_text(0.5, 99), clocks, 4, &cw), 1);
    ASSERT_EQ(cw, 0u);
    /* the set is of 3 workers: scanned by a job of 4, the scan names it */
    ASSERT_EQ(sfb__ckpt_scan(sub, 1, 4, config_text(0.5, 10), clocks, 4, &cw), -SFB_ECONFIG);
    ASSERT_EQ(cw, 3u);
    free(c);
    sfb_model_close(&m);
    return 0;
}

static int test_prune_and_scan(void)
{
    struct sfb_model *m;
    ASSERT_OK(make_model(&m, "mlr"));
    char sub[300];
    snprintf(sub, sizeof sub, "%s/prune/deeper", dir);
    const char *cfg = config_text(1, 0);
    struct sfb__ckpt_state st;
    for (int64_t c = 100; c <= 400; c += 100) {
        make_state(&st, c);
        ASSERT_OK(sfb__ckpt_write(sub, &st, cfg, m));
    }
    make_state(&st, 300);
    st.rank = 0; /* another rank's file is not touched */
    ASSERT_OK(sfb__ckpt_write(sub, &st, cfg, m));
    int64_t clocks[8];
    ASSERT_EQ(sfb__ckpt_list(sub, 1, clocks, 8), 2);
    ASSERT_EQ(clocks[0], 400);
    ASSERT_EQ(clocks[1], 300);
    ASSERT_EQ(sfb__ckpt_list(sub, 0, clocks, 8), 1);
    /* a stray temp file and other names are ignored */
    char p[400];
    snprintf(p, sizeof p, "%s/rank-1.clock-000000000500.ckpt.tmp.1", sub);
    FILE *f = fopen(p, "wb");
    ASSERT(f != NULL);
    fclose(f);
    ASSERT_EQ(sfb__ckpt_list(sub, 1, clocks, 8), 2);
    /* the newest corrupted: the scan skips it */
    char *newest = sfb__ckpt_path(sub, 1, 400);
    f = fopen(newest, "r+b");
    ASSERT(f != NULL);
    fseek(f, 200, SEEK_SET);
    fputc('X', f);
    fclose(f);
    uint32_t cw;
    ASSERT_EQ(sfb__ckpt_scan(sub, 1, 3, cfg, clocks, 8, &cw), 1);
    ASSERT_EQ(clocks[0], 300);
    free(newest);
    /* resume at 300 removes what lies beyond */
    sfb__ckpt_remove_after(sub, 1, 300);
    ASSERT_EQ(sfb__ckpt_list(sub, 1, clocks, 8), 1);
    ASSERT_EQ(clocks[0], 300);
    /* agreement of a job of one */
    int64_t chosen = -1;
    ASSERT_OK(sfb__ckpt_agree(NULL, 0, 1, 0, 0, clocks, 1, sub, &chosen));
    ASSERT_EQ(chosen, 300);
    ASSERT_EQ(sfb__ckpt_agree(NULL, 0, 1, 0, 0, clocks, 0, sub, &chosen), -ENOENT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "no valid checkpoint of rank 0 in");
    ASSERT_EQ(sfb__ckpt_scan("/nonexistent/sfb", 1, 3, cfg, clocks, 8, &cw), 0);
    sfb_model_close(&m);
    return 0;
}

/* The resume decision depends on the reports only: a 2-worker set resumed
 * with 3 (ranks 0 and 1 see files of world 2, rank 2 sees none) is the
 * world-size error on every rank, never "no valid checkpoint of rank 2";
 * otherwise the lowest failing rank is named, whoever decides. */
static int test_agree_same_everywhere(void)
{
    uint8_t all[3 * SFB__CKPT_REPORT];
    int64_t c[2] = {200, 100}, chosen = -1;
    sfb__error(-SFB_ECONFIG, "d/rank-0.clock-000000000200.ckpt: world is 2 in the checkpoint");
    sfb__ckpt_report_pack(all, 0, -SFB_ECONFIG, 2, NULL, 0, "d");
    sfb__error(-SFB_ECONFIG, "d/rank-1.clock-000000000200.ckpt: world is 2 in the checkpoint");
    sfb__ckpt_report_pack(all + SFB__CKPT_REPORT, 1, -SFB_ECONFIG, 2, NULL, 0, "d");
    sfb__ckpt_report_pack(all + 2 * SFB__CKPT_REPORT, 2, 0, 0, NULL, 0, "d");
    ASSERT_EQ(sfb__ckpt_decide(all, 3, "d", &chosen), -SFB_ECONFIG);
    ASSERT_STR_CONTAINS(sfb_last_error(), "d: configuration differs: world is 2 in the "
                                          "checkpoint, 3 now (resume with -n 2)");
    /* every rank missing its files: rank 0 is named, not the decider */
    for (uint32_t r = 0; r < 3; r++)
        sfb__ckpt_report_pack(all + r * SFB__CKPT_REPORT, r, 0, 0, NULL, 0, "d");
    ASSERT_EQ(sfb__ckpt_decide(all, 3, "d", &chosen), -ENOENT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "rank 0 cannot resume: no valid checkpoint of rank 0 in d");
    /* a failed scan outranks a missing file, even of a lower rank */
    sfb__error(-SFB_ECONFIG, "lr is \"1\" in the checkpoint, \"0.5\" now");
    sfb__ckpt_report_pack(all + 2 * SFB__CKPT_REPORT, 2, -SFB_ECONFIG, 0, NULL, 0, "d");
    ASSERT_EQ(sfb__ckpt_decide(all, 3, "d", &chosen), -SFB_ECONFIG);
    ASSERT_STR_CONTAINS(sfb_last_error(), "rank 2 cannot resume: lr is");
    /* all valid: the newest clock common to every rank */
    for (uint32_t r = 0; r < 3; r++)
        sfb__ckpt_report_pack(all + r * SFB__CKPT_REPORT, r, 0, 0, c + (r == 1), 2 - (r == 1),
                              "d");
    ASSERT_OK(sfb__ckpt_decide(all, 3, "d", &chosen));
    ASSERT_EQ(chosen, 100);
    return 0;
}

static const struct test_case tests[] = {
    {"agree_same_everywhere", test_agree_same_everywhere},
    {"config_text", test_config_text},
    {"round_trip", test_round_trip},
    {"every_corruption", test_every_corruption},
    {"config_mismatch", test_config_mismatch},
    {"prune_and_scan", test_prune_and_scan},
};

int main(int argc, char **argv)
{
    if (!mkdtemp(dir)) return 1;
    int r = test_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return r;
}
