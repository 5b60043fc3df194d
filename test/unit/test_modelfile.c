/* Model files: round trip, and corruption of every kind is detected. */
#include <sfb/sfb.h>
#include "src/base/bytes.h"
#include "test.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static char dir[] = "/tmp/sfb_modelfile_XXXXXX";
static char path[256];

static int make_model(struct sfb_model **m)
{
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    s.kind = "mlr";
    s.d = 7;
    s.k = 3;
    s.lambda = 0.25;
    s.seed = 42;
    int r = sfb_model_open(m, &s);
    if (r) return r;
    struct sfb_matrix *a = sfb_model_matrix(*m, 0);
    for (size_t i = 0; i < (size_t)a->rows * a->cols; i++) a->data[i] = (float)i * 0.5f - 3.0f;
    return 0;
}

static long file_size(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static int patch_byte(const char *p, long off, unsigned char x)
{
    FILE *f = fopen(p, "r+b");
    if (!f) return -1;
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ x, f);
    fclose(f);
    return 0;
}

static int setup(void)
{
    if (!mkdtemp(dir)) return -1;
    snprintf(path, sizeof path, "%s/m.sfb", dir);
    return 0;
}

static int test_round_trip(void)
{
    struct sfb_model *m, *l;
    ASSERT_OK(make_model(&m));
    ASSERT_OK(sfb_model_save(m, path, 1234));
    int64_t clock = 0;
    ASSERT_OK(sfb_model_load(&l, path, &clock));
    ASSERT_EQ(clock, 1234);
    ASSERT_EQ(sfb_model_n_matrices(l), 1);
    struct sfb_matrix *a = sfb_model_matrix(m, 0), *b = sfb_model_matrix(l, 0);
    ASSERT_EQ(a->rows, b->rows);
    ASSERT_EQ(a->cols, b->cols);
    ASSERT_EQ(a->rows, 3);
    ASSERT_EQ(a->cols, 8); /* 7 features + bias */
    ASSERT(memcmp(a->data, b->data, sizeof(float) * a->rows * a->cols) == 0);
    const struct sfb_model_settings *s = sfb_model_get_settings(l);
    ASSERT_NEAR(s->lambda, 0.25, 0);
    ASSERT_EQ(s->seed, 42);
    ASSERT_EQ(s->d, 7);
    ASSERT_EQ(s->k, 3);
    sfb_model_close(&m);
    sfb_model_close(&l);
    ASSERT(l == NULL);
    return 0;
}

static int test_flipped_bytes(void)
{
    struct sfb_model *m, *l = NULL;
    ASSERT_OK(make_model(&m));
    ASSERT_OK(sfb_model_save(m, path, 7));
    long n = file_size(path);
    ASSERT_GT(n, 72);
    /* A flip anywhere in the checksummed body or the checksum itself
     * (72: the version-2 settings; 90: the matrix after the shapes). */
    long offs[] = {20, 40, 60, 72, 90, n / 2, n - 9, n - 1};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        ASSERT_OK(sfb_model_save(m, path, 7));
        ASSERT_EQ(patch_byte(path, offs[i], 0x10), 0);
        int r = sfb_model_load(&l, path, NULL);
        ASSERT_EQ(r, -SFB_ECHECKSUM);
        ASSERT(l == NULL);
        ASSERT_STR_CONTAINS(sfb_last_error(), "checksum");
    }
    /* The magic is checked before the checksum. */
    ASSERT_OK(sfb_model_save(m, path, 7));
    ASSERT_EQ(patch_byte(path, 0, 0x01), 0);
    ASSERT_EQ(sfb_model_load(&l, path, NULL), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "magic");
    sfb_model_close(&m);
    return 0;
}

static int test_truncated(void)
{
    struct sfb_model *m, *l = NULL;
    ASSERT_OK(make_model(&m));
    ASSERT_OK(sfb_model_save(m, path, 7));
    long n = file_size(path);
    long cuts[] = {0, 5, 71, n / 2, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        ASSERT_OK(sfb_model_save(m, path, 7));
        ASSERT_EQ(truncate(path, cuts[i]), 0);
        int r = sfb_model_load(&l, path, NULL);
        ASSERT_EQ(r, -SFB_ETRUNC);
        ASSERT(l == NULL);
        ASSERT_STR_CONTAINS(sfb_last_error(), path);
    }
    ASSERT_EQ(sfb_model_load(&l, "/nonexistent/model.sfb", NULL), -ENOENT);
    sfb_model_close(&m);
    return 0;
}

static int test_save_is_atomic(void)
{
    /* Saving into a missing directory fails and leaves nothing behind. */
    struct sfb_model *m;
    ASSERT_OK(make_model(&m));
    char bad[300];
    snprintf(bad, sizeof bad, "%s/missing/m.sfb", dir);
    ASSERT(sfb_model_save(m, bad, 1) < 0);
    /* Overwriting keeps a loadable file at every moment: the old one stays
     * until the new one is renamed over it. */
    ASSERT_OK(sfb_model_save(m, path, 1));
    ASSERT_OK(sfb_model_save(m, path, 2));
    struct sfb_model *l;
    int64_t clock;
    ASSERT_OK(sfb_model_load(&l, path, &clock));
    ASSERT_EQ(clock, 2);
    sfb_model_close(&l);
    sfb_model_close(&m);
    return 0;
}

/* dml and sc keep the settings that shape and evaluate them. */
static int test_round_trip_v2_settings(void)
{
    const char *kinds[] = {"dml", "sc"};
    for (int t = 0; t < 2; t++) {
        struct sfb_model_settings s;
        sfb_model_default_settings(&s);
        s.kind = kinds[t];
        s.d = 9;
        s.lambda = 0.5;
        s.seed = 77;
        s.proj_dim = 3;
        s.knn_k = 7;
        s.dict_size = 5;
        s.code_steps = 11;
        struct sfb_model *m, *l;
        ASSERT_OK(sfb_model_open(&m, &s));
        struct sfb_matrix *a = sfb_model_matrix(m, 0);
        ASSERT_EQ(a->rows, t == 0 ? 3 : 9);
        ASSERT_EQ(a->cols, t == 0 ? 9 : 5);
        ASSERT_OK(sfb_model_save(m, path, 5));
        ASSERT_OK(sfb_model_load(&l, path, NULL));
        const struct sfb_model_settings *g = sfb_model_get_settings(l);
        ASSERT(strcmp(g->kind, kinds[t]) == 0);
        ASSERT_EQ(g->proj_dim, 3);
        ASSERT_EQ(g->knn_k, 7);
        ASSERT_EQ(g->dict_size, 5);
        ASSERT_EQ(g->code_steps, 11);
        ASSERT_EQ(g->seed, 77);
        struct sfb_matrix *b = sfb_model_matrix(l, 0);
        ASSERT(memcmp(a->data, b->data, sizeof(float) * a->rows * a->cols) == 0);
        sfb_model_close(&m);
        sfb_model_close(&l);
    }
    return 0;
}

/* A version-1 file (64-byte fixed header, no model settings beyond lambda
 * and seed) still loads, with the defaults for the newer settings. */
static int test_reads_version_1(void)
{
    uint8_t buf[64 + 8 + 2 * 3 * 4 + 8];
    memset(buf, 0, sizeof buf);
    memcpy(buf, "SFBMODL1", 8);
    sfb__put_u32(buf + 8, 1);
    sfb__put_u32(buf + 12, 1);
    memcpy(buf + 16, "mlr", 3);
    sfb__put_u32(buf + 32, 2); /* d */
    sfb__put_u32(buf + 36, 2); /* k */
    sfb__put_f64(buf + 40, 0.125);
    sfb__put_u64(buf + 48, 9);
    sfb__put_u64(buf + 56, 33);
    sfb__put_u32(buf + 64, 2);
    sfb__put_u32(buf + 68, 3);
    float v[6] = {1, 2, 3, 4, 5, 6};
    sfb__put_f32s(buf + 72, v, 6);
    sfb__put_u64(buf + 96, XXH3_64bits(buf, 96));
    FILE *f = fopen(path, "wb");
    ASSERT(f != NULL);
    ASSERT_EQ(fwrite(buf, 1, sizeof buf, f), sizeof buf);
    fclose(f);
    struct sfb_model *l;
    int64_t clock;
    ASSERT_OK(sfb_model_load(&l, path, &clock));
    ASSERT_EQ(clock, 33);
    const struct sfb_model_settings *g = sfb_model_get_settings(l);
    ASSERT_NEAR(g->lambda, 0.125, 0);
    ASSERT_EQ(g->seed, 9);
    ASSERT_EQ(g->proj_dim, 64);
    ASSERT_EQ(g->code_steps, 20);
    struct sfb_matrix *a = sfb_model_matrix(l, 0);
    ASSERT_EQ(a->rows, 2);
    ASSERT_EQ(a->cols, 3);
    ASSERT_EQ(a->data[5], 6);
    sfb_model_close(&l);
    /* Version 4 is refused by name. */
    sfb__put_u32(buf + 8, 4);
    f = fopen(path, "wb");
    ASSERT(f != NULL);
    ASSERT_EQ(fwrite(buf, 1, sizeof buf, f), sizeof buf);
    fclose(f);
    ASSERT_EQ(sfb_model_load(&l, path, NULL), -SFB_EVERSION);
    return 0;
}

/* Writes `len` bytes to path. */
static int write_bytes(const uint8_t *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    ASSERT(f != NULL);
    ASSERT_EQ(fwrite(buf, 1, len, f), len);
    fclose(f);
    return 0;
}

/* An mlp file is version 3 and stores the hidden sizes, so loading it
 * re-creates the network (4 → 5 → 4 → 3); an mlr file stays version 2 (the
 * 80-byte header it always had). A version-3 header whose hidden sizes do
 * not match the stored shapes, or that describe no network, is refused
 * naming the file. */
static int test_mlp_version_3(void)
{
    struct sfb_model_settings s;
    sfb_model_default_settings(&s);
    s.kind = "mlp";
    s.d = 4;
    s.k = 3;
    s.seed = 5;
    s.hidden = (struct sfb_model_u32_list){2, {5, 4}};
    struct sfb_model *m, *l = NULL;
    ASSERT_OK(sfb_model_open(&m, &s));
    ASSERT_EQ(sfb_model_n_matrices(m), 3);
    ASSERT_OK(sfb_model_save(m, path, 11));
    uint8_t buf[512];
    FILE *f = fopen(path, "rb");
    ASSERT(f != NULL);
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ASSERT_EQ(n, 96 + 3 * 8 + 4 * (5 * 5 + 4 * 6 + 3 * 5) + 8);
    ASSERT_EQ(sfb__get_u32(buf + 8), 3);
    ASSERT_EQ(sfb__get_u32(buf + 80), 2);
    ASSERT_EQ(sfb__get_u32(buf + 84), 5);
    ASSERT_EQ(sfb__get_u32(buf + 88), 4);
    ASSERT_EQ(sfb__get_u32(buf + 92), 0);
    ASSERT_OK(sfb_model_load(&l, path, NULL));
    const struct sfb_model_settings *g = sfb_model_get_settings(l);
    ASSERT_EQ(g->hidden.n, 2);
    ASSERT_EQ(g->hidden.v[0], 5);
    ASSERT_EQ(g->hidden.v[1], 4);
    ASSERT_EQ(sfb_model_n_matrices(l), 3);
    for (uint32_t i = 0; i < 3; i++) {
        struct sfb_matrix *a = sfb_model_matrix(m, i), *b = sfb_model_matrix(l, i);
        ASSERT_EQ(a->rows, b->rows);
        ASSERT_EQ(a->cols, b->cols);
        ASSERT(memcmp(a->data, b->data, sizeof(float) * a->rows * a->cols) == 0);
    }
    sfb_model_close(&l);
    /* hidden sizes that contradict the stored shapes */
    sfb__put_u32(buf + 84, 6);
    sfb__put_u64(buf + n - 8, XXH3_64bits(buf, n - 8));
    if (write_bytes(buf, n)) return 1;
    ASSERT_EQ(sfb_model_load(&l, path, NULL), -SFB_ESHAPE);
    ASSERT_STR_CONTAINS(sfb_last_error(), path);
    ASSERT_STR_CONTAINS(sfb_last_error(), "matrix 0 5x5, but its header describes 3 mlp");
    /* a count no network has */
    sfb__put_u32(buf + 84, 5);
    sfb__put_u32(buf + 80, 9);
    sfb__put_u64(buf + n - 8, XXH3_64bits(buf, n - 8));
    if (write_bytes(buf, n)) return 1;
    ASSERT_EQ(sfb_model_load(&l, path, NULL), -SFB_EFORMAT);
    ASSERT_STR_CONTAINS(sfb_last_error(), "header settings rejected: mlp: hidden has 9 layers");
    ASSERT(l == NULL);
    sfb_model_close(&m);
    /* mlr: version 2 */
    ASSERT_OK(make_model(&m));
    ASSERT_OK(sfb_model_save(m, path, 1));
    f = fopen(path, "rb");
    ASSERT(f != NULL);
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ASSERT_EQ(sfb__get_u32(buf + 8), 2);
    ASSERT_EQ(n, 80 + 8 + 4 * 3 * 8 + 8);
    sfb_model_close(&m);
    return 0;
}

/* A FIFO as the model file is refused at once, naming it (it used to block
 * in open() waiting for a writer); a directory too. */
static int test_not_regular(void)
{
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s/fifo.sfb", dir);
    ASSERT_EQ(mkfifo(fifo, 0600), 0);
    alarm(20);
    struct sfb_model *l = NULL;
    ASSERT(sfb_model_load(&l, fifo, NULL) < 0);
    alarm(0);
    ASSERT(l == NULL);
    ASSERT_STR_CONTAINS(sfb_last_error(), fifo);
    ASSERT_STR_CONTAINS(sfb_last_error(), "not a regular file but a FIFO");
    ASSERT_EQ(sfb_model_load(&l, dir, NULL), -EISDIR);
    ASSERT_STR_CONTAINS(sfb_last_error(), "a directory");
    return 0;
}

static const struct test_case tests[] = {
    {"round_trip_v2_settings", test_round_trip_v2_settings},
    {"reads_version_1", test_reads_version_1},
    {"mlp_version_3", test_mlp_version_3},
    {"round_trip", test_round_trip},
    {"flipped_bytes", test_flipped_bytes},
    {"truncated", test_truncated},
    {"save_is_atomic", test_save_is_atomic},
    {"not_regular", test_not_regular},
};

int main(int argc, char **argv)
{
    if (setup()) return 1;
    int r = test_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return r;
}
