/* Local launcher behind `sfb run -n P`: forks P workers wired for the env
 * rendezvous of src/boot/bootstrap.h on loopback, prefixes their output with the
 * rank, forwards signals, and stops the whole job when one worker fails. */
#ifndef SFB_SRC_LAUNCH_INTERNAL_H
#define SFB_SRC_LAUNCH_INTERNAL_H

#include <stddef.h>

#define SFB__LAUNCH_MAX_PROCS 1024

struct sfb__launch_settings {
    /* After the first failure (or a forwarded signal), survivors get SIGTERM
     * and, this many seconds later, SIGKILL (default 3). */
    double grace_s;
    /* Whole-job wall-clock limit in seconds; 0 = none (default). On expiry
     * the job is stopped as if a worker had failed. */
    double timeout_s;
    /* Where the prefixed lines of the workers' stdout / stderr go (default 1
     * and 2). */
    int out_fd, err_fd;
    /* Loopback address the workers rendezvous on (default "127.0.0.1"). */
    const char *host;
    /* NULL (default): each worker execs argv. Else each worker is a fork of
     * the caller that calls worker(argc, argv) and exits with what it
     * returns (through exit(), so stdio is flushed): no exec, no dynamic
     * loading, and what the caller initialised (libfabric) is inherited.
     * Its comm name (ps, pgrep) is "sfb rank R". */
    int (*worker)(int argc, char **argv);
    /* 1: an elastic job (default: SFB_ELASTIC=1 in the environment): a
     * rank's death does not stop the others, who go on without it; the
     * job succeeded when a rank finished it (exit 0), each failure being
     * logged as a warning. */
    int elastic;
    /* Elastic: restart a copy that died, at most this many times over the
     * job (default: SFB_RESPAWN, else 0). The new copy joins the running
     * job (SFB_JOINING=1 besides SFB_JOIN and the job key: the job's rank 0
     * takes it in at its next replica check) and prints as the rank it
     * replaces. */
    int respawn;
};

void sfb__launch_default_settings(struct sfb__launch_settings *s);

/* Runs argv (argv[0] is a path or a name searched in PATH; NULL-terminated)
 * as ranks 0..nprocs-1, each with SFB_RANK, SFB_WORLD_SIZE,
 * SFB_RENDEZVOUS=host:port (a free port) and SFB_JOB_KEY (random hex) added
 * to the environment and stdin on /dev/null. Every line a worker writes is
 * written as "[rank] line\n" by one write() (a partial last line gets a
 * newline; a line longer than 64 KiB is split). While it runs, SIGINT,
 * SIGTERM and SIGHUP sent to the caller are forwarded to the workers (a
 * second one escalates to SIGKILL); the caller's signal mask and dispositions
 * are restored on return. Workers get PR_SET_PDEATHSIG(SIGTERM), so they do
 * not outlive the launcher. Each worker leads its own process group, which
 * every signal goes to, and the caller is a child subreaper while this
 * runs (restored on return): what the workers leave running (their group's
 * members, descendants reparented here) gets SIGTERM once every worker is
 * reaped, SIGKILL after grace_s; the caller's own earlier children are
 * never touched.
 *
 * Blocks until every worker is reaped. Returns 0 only if all exited with
 * status 0. Otherwise -SFB_EPEER with sfb_last_error() naming the first
 * failure ("rank 2 exited with status 1", "rank 2 killed by signal 9"),
 * -SFB_EABORT if a forwarded signal or the timeout stopped the job,
 * -SFB_EUSAGE for bad arguments, or a negative errno if the launcher itself
 * failed (its workers are still stopped and reaped). Call from the main
 * thread of a single-threaded process (it changes the signal mask and
 * reaps its own children by pid). */
int sfb__launch_local(int nprocs, char *const argv[], const struct sfb__launch_settings *s);

/* A free TCP port on `host` (an IPv4 address), found by binding port 0 and
 * held (sfb__join_reserve's way, as an elastic job's join port): returns
 * the port (> 0) or a negative errno (-SFB_EUSAGE: not an IPv4 address);
 * *fd stays bound to the port (SO_REUSEADDR, never listening) until the
 * caller closes it, so a process that binds it with SO_REUSEADDR (rank 0's
 * bootstrap) can listen on it, and no other socket binds it or takes it for
 * an outgoing connection meanwhile. */
int sfb__launch_reserve_port(const char *host, int *fd);

/* Writes the absolute path of the running executable (from /proc/self/exe)
 * into buf, for re-executing ourselves as the worker ("sfb worker ...").
 * Returns 0, -ENAMETOOLONG, or a negative errno. */
int sfb__launch_self_path(char *buf, size_t len);

#endif
