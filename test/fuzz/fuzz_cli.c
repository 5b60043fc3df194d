/* CLI option parser (cli_parse_job, compiled in from src/cli/options.c,
 * optparse.c and paths.c).
 *
 * Input: byte 0 bit 0 = with_n (`sfb run` vs `sfb worker`), then argv
 * elements separated by NUL bytes (at most 64). Every argument string is its
 * own exact-size allocation, freed after the call; each input is parsed
 * twice, so a pointer the parser keeps into a previous call's argv is caught
 * by ASan within one input. On success (0) every
 * field must be inside its documented range, the settings must pass
 * sfb_train_check_settings for the world size the parser knew (so nothing
 * checkable from the settings alone is left to the workers), the output
 * paths must be set, fit PATH_MAX and, with P > 1, the metrics path must
 * hold %r; the result is 0, 1 (help) or 2 (usage error) and nothing else. */
#include "fuzz.h"

#include "src/cli/cli.h"

#include <limits.h>
#include <string.h>

#define MAX_ARGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_stdio();
    return 0;
}

/* Splits the input into a fresh argv (each string its own allocation). */
static int make_argv(const uint8_t *data, size_t size, int with_n, char **argv)
{
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
    return argc;
}

static void check_job(const struct cli_job *job, int with_n)
{
    const struct sfb_train_settings *t = &job->train;
    FUZZ_CHECK(job->nprocs >= 1 && job->nprocs <= 4096);
    FUZZ_CHECK(with_n || job->nprocs == 1);
    FUZZ_CHECK(t->sync && sfb_sync_registry_find(t->sync) >= 0);
    FUZZ_CHECK(t->topology && sfb_topo_is_overlay(t->topology) >= 0);
    FUZZ_CHECK(t->staleness >= -1 && t->staleness <= 1000000);
    FUZZ_CHECK(t->degree <= 64);
    FUZZ_CHECK(t->degree == 0 || sfb_topo_is_overlay(t->topology) == 1);
    FUZZ_CHECK(job->out_dir != NULL);
    FUZZ_CHECK(t->batch <= (1u << 20)); /* 0 = auto: a global minibatch of 32 */
    FUZZ_CHECK(t->lr >= 0); /* 0 = the model's default */
    FUZZ_CHECK((t->lambda >= 0 || t->lambda == -1));
    FUZZ_CHECK(t->threads >= 1 && t->threads <= 1024);
    FUZZ_CHECK(t->libsvm.classes == 0 || t->libsvm.classes >= 2);
    FUZZ_CHECK(!t->model || sfb_model_find(t->model));
    uint32_t world = cli_known_world(job, with_n);
    FUZZ_CHECK(sfb_train_check_settings(t, world) == 0);
    FUZZ_CHECK(!t->flush_clock || (t->staleness >= 0 && t->staleness <= 48));
    FUZZ_CHECK(t->model_out && t->metrics_out);
    FUZZ_CHECK(strlen(t->model_out) < PATH_MAX && strlen(t->metrics_out) < PATH_MAX);
    FUZZ_CHECK(world <= 1 || strstr(t->metrics_out, "%r"));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet_stdio();
    if (size < 1) return 0;
    int with_n = data[0] & 1;
    data++;
    size--;
    /* Parsed twice, the first argv freed in between: the second parse must
     * give the same answer and must not touch the first argv (state left
     * behind by a parse that stopped early shows up here, in one input). */
    int res[2];
    struct cli_job jobs[2];
    /* the --debug-* options go to the environment: none left from the
     * input before */
    unsetenv("SFB_DEBUG_DELAY_MS");
    unsetenv("SFB_DEBUG_SLOW_RANK");
    unsetenv("SFB_DEBUG_SLOW_FACTOR");
    for (int round = 0; round < 2; round++) {
        char *argv[MAX_ARGS + 2];
        int argc = make_argv(data, size, with_n, argv);
        res[round] = cli_parse_job(argc, argv, argv[0], with_n, &jobs[round]);
        FUZZ_CHECK(res[round] == 0 || res[round] == 1 || res[round] == 2);
        if (res[round] == 0) check_job(&jobs[round], with_n);
        for (int k = 0; k < argc; k++)
            free(argv[k]);
    }
    FUZZ_CHECK(res[0] == res[1]);
    fuzz_rejected = res[0] == 2;
    if (res[0] == 0) {
        /* Scalar settings agree (strings point into the freed argv). */
        FUZZ_CHECK(jobs[0].nprocs == jobs[1].nprocs &&
                   jobs[0].train.staleness == jobs[1].train.staleness);
        FUZZ_CHECK(jobs[0].train.degree == jobs[1].train.degree && jobs[0].quiet == jobs[1].quiet);
        FUZZ_CHECK(jobs[0].log_level == jobs[1].log_level);
        FUZZ_CHECK(jobs[0].train.batch == jobs[1].train.batch);
        FUZZ_CHECK(jobs[0].train.seed == jobs[1].train.seed);
        FUZZ_CHECK(jobs[0].train.clocks == jobs[1].train.clocks);
    }
    return 0;
}
