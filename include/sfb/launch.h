/* sfb — starting a job of local workers (what `sfb run -n P` does). */
#ifndef SFB_LAUNCH_H
#define SFB_LAUNCH_H

#include <sfb/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs argv (NULL-terminated; argv[0] a path or a name in PATH) as ranks
 * 0..nprocs-1 on this machine, wired together by the environment rendezvous
 * on loopback (SFB_RANK, SFB_WORLD_SIZE, SFB_RENDEZVOUS, SFB_JOB_KEY). Each
 * line a worker prints is written as "[rank] line". SIGINT/SIGTERM/SIGHUP
 * are forwarded; when one worker fails the others are stopped.
 * Each worker leads a process group of its own, and signals go to the whole
 * group. While it runs, the caller is a child subreaper
 * (PR_SET_CHILD_SUBREAPER; its earlier setting is restored on return), so
 * descendants that leave a worker's group (setsid, a double fork) come back
 * to it when their parent dies; once every worker is reaped, whatever the
 * workers left running gets SIGTERM, and SIGKILL 3 s later: nothing started
 * by the job outlives the call. The caller's own children from before the
 * call are left alone (not signalled, not reaped); an orphan of one of them
 * that is reparented to the caller during the call is taken for the job's.
 * A caller that has used BLAS calls sfb_blas_reserve (<sfb/sf.h>) first:
 * under an address-space limit fork waits for OpenBLAS's threads, which
 * never return from a mapping that does not fit.
 * Blocks until all are reaped. Returns 0 if every worker exited 0;
 * -SFB_EPEER naming the failed rank and its status in sfb_last_error();
 * -SFB_EABORT when a signal stopped the job; -SFB_EUSAGE; or -errno.
 * Main thread of a single-threaded process only. */
SFB_API int sfb_launch_local(int nprocs, char *const argv[]);

/* As sfb_launch_local, but each worker is a fork of this process that
 * calls worker(argc, argv) (argc counts argv) and exits with its return
 * value, instead of executing argv: libfabric is initialised once here
 * first, so the workers skip loading and probing its providers, and
 * dynamic loading, which cost every process ~0.15 s of CPU (the whole of a
 * 2-core host for 2 s at 64 workers). A worker's process name is
 * "sfb rank R". SFB_LAUNCH_EXEC=1 in the environment makes it exec argv
 * as sfb_launch_local does. The caller must be single-threaded, hold no
 * open fabric and expect worker() to run in a copy of its state. */
SFB_API int sfb_launch_local_fork(int nprocs, int (*worker)(int argc, char **argv),
                                  char *const argv[]);

/* The signal (SIGINT, SIGTERM or SIGHUP) that stopped the job of the last
 * sfb_launch_local call in this process, or 0 if none did (a CLI exits
 * 128 + it). Same thread as sfb_launch_local. */
SFB_API int sfb_launch_stop_signal(void);

/* 2 when a copy of the last sfb_launch_local call exited 2 (it found a
 * usage error, e.g. settings only the workers can judge: its peers then
 * fail naming it, and may exit first); else the exit status of the first
 * copy that failed, when it exited (0: none failed, or it was killed by a
 * signal). A CLI exits 2 when it is 2. Same thread. */
SFB_API int sfb_launch_failed_exit(void);

/* Absolute path of the running executable, to start "self worker ...". */
SFB_API int sfb_launch_self_path(char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
