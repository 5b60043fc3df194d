/* Worker stand-in for the launcher and bootstrap tests.
 *
 *   boot_helper lines N CODE      print N lines to stdout and N to stderr, then
 *                                 an unterminated line; exit CODE
 *   boot_helper fail R CODE       rank R exits CODE after 0.2 s; others sleep 60 s
 *   boot_helper trap              print "ready", wait for a signal, print
 *                                 "rank r got signal s", exit 0 (60 s bound)
 *   boot_helper gather            bootstrap (any mode), two allgathers of
 *                                 distinct blobs + allgatherv + barrier; prints
 *                                 "ok rank r size n kind k key x"; exit 0 or 1
 */
#include "src/boot/bootstrap.h"
#include "src/base/util.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* From libev: referenced so that libev is loaded here as in `sfb worker`,
 * which makes the gather test under mpirun also check the libev/libevent
 * symbol clash (see test/integration/meson.build). ev.h itself is reserved
 * to src/loop/loop.c. */
int ev_version_major(void);

static volatile sig_atomic_t got_sig;
static void on_sig(int s) { got_sig = s; }

static int env_rank(void)
{
    const char *r = getenv("SFB_RANK");
    return r ? atoi(r) : -1;
}

static void log_sink(void *u, enum sfb_log_level l, int rank, const char *msg)
{
    fprintf(stderr, "log%d: %s\n", (int)l, msg);
}

#define CHECK(c)                                                                \
    do {                                                                       \
        if (!(c)) {                                                            \
            printf("FAIL rank %d line %d: %s (%s)\n", rank, __LINE__, #c,      \
                   sfb_last_error());                                          \
            return 1;                                                          \
        }                                                                      \
    } while (0)

static int gather(void)
{
    struct sfb__bootstrap *bs;
    int rank = -1;
    sfb_log_set(log_sink, NULL, SFB_LOG_WARN);
    struct sfb__bootstrap_settings s;
    sfb__bootstrap_default_settings(&s);
    s.connect_timeout_s = 20;
    s.timeout_s = 20;
    CHECK(sfb__bootstrap_open(&bs, &s) == 0);
    rank = sfb__bootstrap_rank(bs);
    int n = sfb__bootstrap_size(bs);
    for (int round = 0; round < 2; round++) {
        uint64_t mine[3] = {0x1234567800000000ull + (uint64_t)rank, (uint64_t)round, ~(uint64_t)rank};
        uint64_t *all = calloc((size_t)n, sizeof mine);
        CHECK(all);
        CHECK(sfb__bootstrap_allgather(bs, mine, sizeof mine, all) == 0);
        for (int r = 0; r < n; r++) {
            CHECK(all[3 * r] == 0x1234567800000000ull + (uint64_t)r);
            CHECK(all[3 * r + 1] == (uint64_t)round);
            CHECK(all[3 * r + 2] == ~(uint64_t)r);
        }
        free(all);
    }
    /* Unequal lengths: rank r contributes r+1 bytes of value r. */
    unsigned char mine[64];
    memset(mine, rank, sizeof mine);
    void *all;
    size_t *lens = calloc((size_t)n, sizeof *lens);
    CHECK(lens);
    CHECK(sfb__bootstrap_allgatherv(bs, mine, (size_t)rank % 64 + 1, &all, lens) == 0);
    const unsigned char *p = all;
    for (int r = 0; r < n; r++) {
        CHECK(lens[r] == (size_t)r % 64 + 1);
        for (size_t i = 0; i < lens[r]; i++) CHECK(p[i] == (unsigned char)r);
        p += lens[r];
    }
    free(all);
    free(lens);
    CHECK(sfb__bootstrap_barrier(bs) == 0);
    if (ev_version_major() < 4) printf("note: old libev\n");
    printf("ok rank %d size %d kind %s key 0x%016" PRIx64 "\n", rank, n,
           sfb__bootstrap_kind_name(sfb__bootstrap_kind(bs)), sfb__bootstrap_job_key(bs));
    sfb__bootstrap_close(&bs);
    CHECK(bs == NULL);
    return 0;
}

int main(int argc, char **argv)
{
    int rank = env_rank();
    if (argc >= 4 && !strcmp(argv[1], "lines")) {
        int n = atoi(argv[2]);
        for (int i = 0; i < n; i++) {
            printf("out %d of rank %d\n", i, rank);
            fflush(stdout);
            fprintf(stderr, "err %d of rank %d\n", i, rank);
        }
        printf("partial of rank %d", rank);
        return atoi(argv[3]);
    }
    if (argc >= 4 && !strcmp(argv[1], "fail")) {
        if (rank == atoi(argv[2])) {
            usleep(200000);
            printf("rank %d failing\n", rank);
            return atoi(argv[3]);
        }
        sleep(60);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "trap")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sig;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        printf("ready\n");
        fflush(stdout);
        for (int i = 0; i < 600 && !got_sig; i++) usleep(100000);
        printf("rank %d got signal %d\n", rank, (int)got_sig);
        return got_sig ? 0 : 1;
    }
    if (argc >= 2 && !strcmp(argv[1], "gather")) return gather();
    fprintf(stderr, "usage: boot_helper lines N CODE | fail R CODE | trap | gather\n");
    return 2;
}
