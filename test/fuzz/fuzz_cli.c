/* CLI option parser (cli_parse_job, compiled in from src/cli/options.c).
 *
 * Input: byte 0 bit 0 = with_n (`sfb run` vs `sfb worker`), then argv
 * elements separated by NUL bytes (at most 64). Every argument string is its
 * own exact-size allocation, freed after the call, so a pointer the parser
 * keeps into a previous call's argv is caught by ASan. On success (0) every
 * field must be inside its documented range; the result is 0, 1 (help) or 2
 * (usage error) and nothing else. */
#include "fuzz.h"

#include "src/cli/cli.h"

#include <string.h>

#define MAX_ARGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_stdio();
    return 0;
}

static int is_one_of(const char *s, const char *const *set)
{
    for (; *set; set++)
        if (!strcmp(s, *set)) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet_stdio();
    if (size < 1) return 0;
    int with_n = data[0] & 1;
    data++;
    size--;
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc] = strdup(with_n ? "run" : "worker");
    if (!argv[argc++]) abort();
    size_t i = 0;
    while (i < size && argc < MAX_ARGS + 1) {
        const uint8_t *z = memchr(data + i, '\0', size - i);
        size_t l = z ? (size_t)(z - (data + i)) : size - i;
        char *a = malloc(l + 1);
        if (!a) abort();
        memcpy(a, data + i, l);
        a[l] = '\0';
        argv[argc++] = a;
        i += l + 1;
    }
    argv[argc] = NULL;

    struct cli_job job;
    int r = cli_parse_job(argc, argv, argv[0], with_n, &job);
    FUZZ_CHECK(r == 0 || r == 1 || r == 2);
    if (r == 0) {
        static const char *const syncs[] = {"sfb", "fms", NULL};
        static const char *const topos[] = {"full", "halton", "halton-classic", NULL};
        FUZZ_CHECK(job.nprocs >= 1 && job.nprocs <= 4096);
        FUZZ_CHECK(with_n || job.nprocs == 1);
        FUZZ_CHECK(job.sync && is_one_of(job.sync, syncs));
        FUZZ_CHECK(job.topology && is_one_of(job.topology, topos));
        FUZZ_CHECK(job.staleness >= -1 && job.staleness <= 1000000);
        FUZZ_CHECK(job.degree >= 0 && job.degree <= 64);
        FUZZ_CHECK(job.degree == 0 || strcmp(job.topology, "full") != 0);
        FUZZ_CHECK(job.out_dir != NULL);
        const struct sfb_train_settings *t = &job.train;
        FUZZ_CHECK(t->batch >= 1);
        FUZZ_CHECK(t->lr > 0);
        FUZZ_CHECK(t->lambda >= 0);
        FUZZ_CHECK(t->threads >= 1 && t->threads <= 1024);
        FUZZ_CHECK(t->libsvm.classes == 0 || t->libsvm.classes >= 2);
        FUZZ_CHECK(!t->model || sfb_model_find(t->model));
    }
    for (int k = 0; k < argc; k++) free(argv[k]);
    return 0;
}
