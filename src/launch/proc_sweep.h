/* The launcher's process-tree sweep: what the ranks leave running once they
 * are reaped. The launcher is a child subreaper while it runs, so a rank's
 * descendants that left its process group (setsid, a double fork) are
 * reparented to it when their parent dies; this finds them in /proc (the
 * launcher's children that are neither ranks nor the caller's own children
 * from before the launch) and stops them. */
#ifndef SFB_LAUNCH_PROC_SWEEP_H
#define SFB_LAUNCH_PROC_SWEEP_H

#include <stddef.h>
#include <sys/types.h>

/* Zero-initialised; sfb__sweep_free releases it. */
struct sfb__sweep {
    pid_t *before; /* the caller's children from before the launch: never touched */
    pid_t *termed; /* those already sent SIGTERM */
    size_t nbefore, ntermed;
};

/* Records the calling process's children now (before any rank is forked). */
void sfb__sweep_note_before(struct sfb__sweep *w);

/* One round over this process's children that are not listed before and
 * for which is_rank(arg, pid) is 0: a zombie is reaped; any other gets
 * `sig` with its process group (unless that is the caller's) — SIGTERM
 * once per process (a second one means "now" to many programs), SIGKILL in
 * every round it is given. Returns how many such children it saw. */
int sfb__sweep_orphans(struct sfb__sweep *w, int sig, int (*is_rank)(void *arg, pid_t pid),
                       void *arg);

void sfb__sweep_free(struct sfb__sweep *w);

#endif
