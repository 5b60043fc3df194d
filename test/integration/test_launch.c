/* Local launcher tests: rank prefixes, failure propagation, signal
 * forwarding, and the env rendezvous through the launcher. The worker is
 * boot_helper (path in $BOOT_HELPER). */
#include "src/base/util.h"
#include "src/boot/bootstrap.h"
#include "src/launch/launch_internal.h"
#include "src/base/timeline.h"
#include "test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *helper(void)
{
    const char *h = getenv("BOOT_HELPER");
    return h ? h : "./boot_helper";
}

/* Reads the whole of a memfd into a static NUL-terminated buffer. */
static char *slurp(int fd)
{
    static char buf[1 << 20];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

static int count_lines(const char *s, const char *needle)
{
    int k = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++) k++;
    return k;
}

static void settings(struct sfb__launch_settings *s, int out, int err)
{
    sfb__launch_default_settings(s);
    s->out_fd = out;
    s->err_fd = err;
    s->timeout_s = 30;
}

static int test_prefix(void)
{
    int out = memfd_create("out", 0), err = memfd_create("err", 0);
    struct sfb__launch_settings s;
    settings(&s, out, err);
    char *argv[] = {(char *)helper(), "lines", "20", "0", NULL};
    ASSERT_OK(sfb__launch_local(3, argv, &s));
    char *o = slurp(out);
    int lines = 0;
    for (char *line = strtok(o, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        int pr = -1, i = -1, r = -2;
        if (sscanf(line, "[%d] out %d of rank %d", &pr, &i, &r) == 3) {
            ASSERT_EQ(pr, r);
            ASSERT(i >= 0 && i < 20);
        } else {
            ASSERT_EQ(sscanf(line, "[%d] partial of rank %d", &pr, &r), 2);
            ASSERT_EQ(pr, r);
        }
    }
    ASSERT_EQ(lines, 3 * 21);
    char *e = slurp(err);
    for (int r = 0; r < 3; r++) {
        char want[64];
        snprintf(want, sizeof want, "[%d] err 19 of rank %d\n", r, r);
        ASSERT_STR_CONTAINS(e, want);
    }
    ASSERT_EQ(count_lines(e, "\n"), 60);
    ASSERT_EQ(count_lines(e, "out "), 0);
    close(out);
    close(err);
    return 0;
}

static int test_failure_stops_others(void)
{
    int out = memfd_create("out", 0);
    struct sfb__launch_settings s;
    settings(&s, out, out);
    char *argv[] = {(char *)helper(), "fail", "2", "5", NULL};
    double t0 = sfb__now();
    int r = sfb__launch_local(4, argv, &s);
    double dt = sfb__now() - t0;
    ASSERT_EQ(r, -SFB_EPEER);
    ASSERT_STR_CONTAINS(sfb_last_error(), "rank 2 exited with status 5");
    ASSERT_LT(dt, 5.0); /* the others sleep 60 s: they were stopped */
    ASSERT_STR_CONTAINS(slurp(out), "[2] rank 2 failing\n");
    close(out);
    return 0;
}

static int test_killed_by_signal(void)
{
    int out = memfd_create("out", 0);
    struct sfb__launch_settings s;
    settings(&s, out, out);
    char *argv[] = {"/bin/sh", "-c", "if [ $SFB_RANK = 1 ]; then sleep 0.2; kill -9 $$; fi; exec sleep 60", NULL};
    double t0 = sfb__now();
    int r = sfb__launch_local(3, argv, &s);
    ASSERT_EQ(r, -SFB_EPEER);
    ASSERT_STR_CONTAINS(sfb_last_error(), "rank 1 killed by signal 9");
    ASSERT_LT(sfb__now() - t0, 5.0);
    close(out);
    return 0;
}

static int test_sigkill_after_grace(void)
{
    int out = memfd_create("out", 0);
    struct sfb__launch_settings s;
    settings(&s, out, out);
    s.grace_s = 0.5;
    /* Rank 1 ignores SIGTERM, so only the SIGKILL after the grace period
     * ends it. */
    char *argv[] = {"/bin/sh", "-c", "trap '' TERM; if [ $SFB_RANK = 0 ]; then sleep 0.2; exit 1; fi; exec sleep 60",
                    NULL};
    double t0 = sfb__now();
    int r = sfb__launch_local(2, argv, &s);
    double dt = sfb__now() - t0;
    ASSERT_EQ(r, -SFB_EPEER);
    ASSERT_STR_CONTAINS(sfb_last_error(), "rank 0 exited with status 1");
    ASSERT(dt > 0.6);
    ASSERT_LT(dt, 5.0);
    close(out);
    return 0;
}

/* A peer that noticed the fabric fail can exit before the killed rank is
 * reaped: the killed rank is still the one named. */
static int test_killed_rank_named_over_earlier_exit(void)
{
    int out = memfd_create("out", 0);
    struct sfb__launch_settings s;
    settings(&s, out, out);
    s.grace_s = 3.0;
    char *argv[] = {"/bin/sh", "-c",
                    "trap '' TERM; if [ $SFB_RANK = 0 ]; then sleep 0.1; exit 1; fi; "
                    "if [ $SFB_RANK = 1 ]; then sleep 0.4; kill -9 $$; fi; exec sleep 60",
                    NULL};
    int r = sfb__launch_local(3, argv, &s);
    ASSERT_EQ(r, -SFB_EPEER);
    ASSERT_STR_CONTAINS(sfb_last_error(), "rank 1 killed by signal 9");
    close(out);
    return 0;
}

static int test_exec_failure(void)
{
    int out = memfd_create("out", 0), err = memfd_create("err", 0);
    struct sfb__launch_settings s;
    settings(&s, out, err);
    char *argv[] = {"/nonexistent/worker", NULL};
    ASSERT_EQ(sfb__launch_local(2, argv, &s), -SFB_EPEER);
    ASSERT_STR_CONTAINS(sfb_last_error(), "exited with status 127");
    ASSERT_STR_CONTAINS(slurp(err), "cannot execute /nonexistent/worker");
    close(out);
    close(err);
    return 0;
}

static int test_bad_args(void)
{
    char *argv[] = {"/bin/true", NULL};
    ASSERT_EQ(sfb__launch_local(0, argv, NULL), -SFB_EUSAGE);
    char *none[] = {NULL};
    ASSERT_EQ(sfb__launch_local(2, none, NULL), -SFB_EUSAGE);
    char self[4096], tiny[4];
    ASSERT_OK(sfb__launch_self_path(self, sizeof self));
    ASSERT_STR_CONTAINS(self, "/test_launch");
    ASSERT_EQ(self[0], '/');
    ASSERT_EQ(sfb__launch_self_path(tiny, sizeof tiny), -ENAMETOOLONG);
    return 0;
}

/* The rendezvous port the launcher holds for rank 0: no other socket binds
 * it meanwhile (a port taken between the launcher's pick and rank 0's bind
 * failed a job with "Address already in use"), while rank 0's bootstrap,
 * binding with SO_REUSEADDR, listens on it and takes connections. */
static int test_reserved_port(void)
{
    int held = -1;
    int port = sfb__launch_reserve_port("127.0.0.1", &held);
    ASSERT_GT(port, 0);
    ASSERT_GE(held, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int other = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(other, 0);
    ASSERT_EQ(bind(other, (struct sockaddr *)&a, sizeof a), -1);
    ASSERT_EQ(errno, EADDRINUSE);
    close(other);
    int rank0 = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    ASSERT_OK(setsockopt(rank0, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
    ASSERT_OK(bind(rank0, (struct sockaddr *)&a, sizeof a));
    ASSERT_OK(listen(rank0, 4));
    int peer = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_OK(connect(peer, (struct sockaddr *)&a, sizeof a));
    int in = accept(rank0, NULL, NULL);
    ASSERT_GE(in, 0);
    close(in);
    close(peer);
    close(rank0);
    close(held);
    ASSERT_EQ(sfb__launch_reserve_port("not-an-ip", &held), -SFB_EUSAGE);
    ASSERT_EQ(held, -1);
    return 0;
}

static int test_all_ok(void)
{
    int out = memfd_create("out", 0);
    struct sfb__launch_settings s;
    settings(&s, out, out);
    char *argv[] = {"/bin/sh", "-c", "echo \"rank=$SFB_RANK world=$SFB_WORLD_SIZE rdv=$SFB_RENDEZVOUS\"", NULL};
    ASSERT_OK(sfb__launch_local(2, argv, &s));
    char *o = slurp(out);
    ASSERT_STR_CONTAINS(o, "[0] rank=0 world=2 rdv=127.0.0.1:");
    ASSERT_STR_CONTAINS(o, "[1] rank=1 world=2 rdv=127.0.0.1:");
    close(out);
    return 0;
}

/* Processes whose command line is exactly argv0 arg1 (from /proc). */
static int count_running(const char *argv0, const char *arg1)
{
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300], cmd[256] = {0};
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t got = fread(cmd, 1, sizeof cmd - 1, f);
        fclose(f);
        size_t l0 = strlen(cmd);
        if (got > l0 + 1 && !strcmp(cmd, argv0) && !strcmp(cmd + l0 + 1, arg1)) n++;
    }
    if (d) closedir(d);
    return n;
}

/* The launcher is a library call: while it makes its caller a child
 * subreaper, to stop what the ranks leave behind (here a setsid'd sleep,
 * reparented to it), it leaves the caller's own children alone, running
 * or exited and unreaped, and restores the caller's subreaper flag. */
static int test_caller_children_kept(void)
{
    pid_t running = fork();
    if (running == 0) {
        execlp("sleep", "sleep", "30", (char *)NULL);
        _exit(127);
    }
    pid_t exited = fork();
    if (exited == 0) _exit(7);
    ASSERT(running > 0 && exited > 0);
    sfb__sleep(0.1); /* `exited` is a zombie now */
    int before = -1, after = -1;
    ASSERT_EQ(prctl(PR_GET_CHILD_SUBREAPER, &before), 0);
    int out = memfd_create("out", 0), err = memfd_create("err", 0);
    struct sfb__launch_settings s;
    settings(&s, out, err);
    char *argv[] = {"/bin/sh", "-c", "setsid sleep 77.75 </dev/null >/dev/null 2>&1 & sleep 0.2",
                    NULL};
    ASSERT_OK(sfb__launch_local(2, argv, &s));
    ASSERT_EQ(prctl(PR_GET_CHILD_SUBREAPER, &after), 0);
    ASSERT_EQ(after, before);
    ASSERT_EQ(waitpid(running, NULL, WNOHANG), 0); /* still running, still ours */
    int st = 0;
    ASSERT_EQ(waitpid(exited, &st, WNOHANG), exited); /* not reaped by the launcher */
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 7);
    kill(running, SIGKILL);
    ASSERT_EQ(waitpid(running, NULL, 0), running);
    /* and the ranks' orphan is gone */
    ASSERT_EQ(count_running("sleep", "77.75"), 0);
    close(out);
    close(err);
    return 0;
}

/* The launcher runs in a child of the test so the test can signal it. */
static int test_signal_forwarding(void)
{
    int out = memfd_create("out", 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct sfb__launch_settings s;
        settings(&s, out, out);
        char *argv[] = {(char *)helper(), "trap", NULL};
        int r = sfb__launch_local(3, argv, &s);
        dprintf(out, "launcher: %d %s\n", r, sfb_last_error());
        _exit(r == -SFB_EABORT ? 0 : 1);
    }
    ASSERT_GT(pid, 0);
    double t0 = sfb__now();
    while (count_lines(slurp(out), "ready") < 3 && sfb__now() - t0 < 10) usleep(20000);
    int ready = count_lines(slurp(out), "ready");
    kill(pid, SIGINT);
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0 && sfb__now() - t0 < 20) usleep(20000);
    if (waitpid(pid, &st, WNOHANG) == 0) {
        kill(pid, SIGKILL); /* its workers follow through PDEATHSIG */
        waitpid(pid, &st, 0);
        TEST_FAIL_AT("launcher did not stop after SIGINT");
    }
    char *o = slurp(out);
    ASSERT_EQ(ready, 3);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (int r = 0; r < 3; r++) {
        char want[64];
        snprintf(want, sizeof want, "[%d] rank %d got signal %d\n", r, r, SIGINT);
        ASSERT_STR_CONTAINS(o, want);
    }
    ASSERT_STR_CONTAINS(o, "interrupted by signal 2");
    close(out);
    return 0;
}

static int test_rendezvous_through_launcher(void)
{
    int out = memfd_create("out", 0);
    struct sfb__launch_settings s;
    settings(&s, out, out);
    char *argv[] = {(char *)helper(), "gather", NULL};
    int r = sfb__launch_local(4, argv, &s);
    char *o = slurp(out);
    if (r) fprintf(stderr, "%s\n", o);
    ASSERT_OK(r);
    char key[4][32];
    for (int i = 0; i < 4; i++) {
        char want[64];
        snprintf(want, sizeof want, "[%d] ok rank %d size 4 kind env rendezvous key ", i, i);
        const char *p = strstr(o, want);
        ASSERT(p);
        ASSERT_EQ(sscanf(p + strlen(want), "%31s", key[i]), 1);
        ASSERT_EQ(strcmp(key[i], key[0]), 0);
    }
    close(out);
    return 0;
}

/* How many of this process's fds above stdio link to a name starting with
 * `prefix`. */
static int count_fds(const char *prefix)
{
    char path[300], link[256];
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t l = readlink(path, link, sizeof link - 1);
        if (l <= 0 || atoi(e->d_name) <= 2) continue;
        link[l] = 0;
        n += !strncmp(link, prefix, strlen(prefix));
    }
    if (d) closedir(d);
    return n;
}

static int base_pipes; /* pipes the test process holds (a fork inherits them) */

/* A forked worker (settings.worker): what it inherited, then the env
 * rendezvous and the launcher's clock origin. Prints one line or fails. */
static int fork_worker(int argc, char **argv)
{
    char comm[32] = "";
    FILE *f = fopen("/proc/self/comm", "r");
    if (f && fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
    if (f) fclose(f);
    /* the launcher's signalfd and the other ranks' pipes must be closed:
     * beyond stdio no pipe is new since the test started the launcher */
    int pipes = count_fds("pipe:") - base_pipes, signalfds = count_fds("anon_inode:[signalfd]");
    sfb__phase_reset();
    double t0 = sfb__phase_at(SFB__PH_LAUNCH), start = sfb__phase_at(SFB__PH_EXEC);
    struct sfb__bootstrap_settings bss;
    sfb__bootstrap_default_settings(&bss);
    bss.use_pmix = 0;
    bss.timeout_s = bss.connect_timeout_s = 20;
    struct sfb__bootstrap *bs = NULL;
    int r = sfb__bootstrap_open(&bs, &bss);
    int rank = r ? -1 : sfb__bootstrap_rank(bs);
    uint32_t sum = 0;
    if (!r) {
        uint32_t mine = (uint32_t)rank + 1, all[8] = {0};
        r = sfb__bootstrap_allgather(bs, &mine, sizeof mine, all);
        for (int i = 0; i < sfb__bootstrap_size(bs); i++) sum += all[i];
    }
    printf("forked rank %d comm '%s' argc %d arg '%s' pipes %d signalfds %d sum %u origin %s r %d\n",
           rank, comm, argc, argc > 1 ? argv[1] : "", pipes, signalfds, sum,
           sfb__phase_from_launcher() && t0 <= start && t0 > sfb__now() - 30 ? "launcher"
                                                                             : "wrong",
           r);
    /* every line is written before rank 2 fails and the others are stopped */
    fflush(stdout);
    if (!r) r = sfb__bootstrap_barrier(bs);
    sfb__bootstrap_close(&bs);
    return r ? 1 : rank == 2 ? 7 : 0;
}

/* Workers forked instead of executed: the same environment, stdio, exit
 * statuses and rendezvous; nothing of the launcher's held open. */
static int test_fork_workers(void)
{
    int out = memfd_create("out", MFD_CLOEXEC);
    struct sfb__launch_settings s;
    settings(&s, out, out);
    s.worker = fork_worker;
    base_pipes = count_fds("pipe:");
    char *argv[] = {"not-executed", "hello", NULL};
    double t0 = sfb__now();
    int r = sfb__launch_local(4, argv, &s);
    char *o = slurp(out);
    ASSERT_LT(sfb__now() - t0, 10.0);
    ASSERT_EQ(r, -SFB_EPEER);
    ASSERT_STR_CONTAINS(sfb_last_error(), "rank 2 exited with status 7");
    for (int i = 0; i < 4; i++) {
        char want[200];
        snprintf(want, sizeof want,
                 "[%d] forked rank %d comm 'sfb rank %d' argc 2 arg 'hello' pipes 0 signalfds 0 "
                 "sum 10 origin launcher r 0\n",
                 i, i, i);
        ASSERT_STR_CONTAINS(o, want);
    }
    close(out);
    return 0;
}

static const struct test_case tests[] = {
    {"fork_workers", test_fork_workers},
    {"prefix", test_prefix},
    {"all_ok", test_all_ok},
    {"failure_stops_others", test_failure_stops_others},
    {"killed_by_signal", test_killed_by_signal},
    {"sigkill_after_grace", test_sigkill_after_grace},
    {"killed_rank_named_over_earlier_exit", test_killed_rank_named_over_earlier_exit},
    {"exec_failure", test_exec_failure},
    {"bad_args", test_bad_args},
    {"reserved_port", test_reserved_port},
    {"signal_forwarding", test_signal_forwarding},
    {"caller_children_kept", test_caller_children_kept},
    {"rendezvous_through_launcher", test_rendezvous_through_launcher},
};

int main(int argc, char **argv)
{
    alarm(100); /* a hang becomes a failure; workers die with us (PDEATHSIG) */
    return test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
}
