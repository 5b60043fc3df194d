/* libfabric transport: the shm provider's region names in /dev/shm, and
 * the removal of regions and doorbells that dead processes left there. The
 * protocol and the split into files: src/transport/transport_impl.h. */
#include "config.h"
#include "src/transport/transport_impl.h"

#include "src/loop/bell.h"
#include "src/base/util.h"

#include <dirent.h>
#include <errno.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A job's doorbell flags (SFB__BELL_SHM_PREFIX "<key>", src/loop/bell.h)
 * lose their name once every rank has mapped them, at the end of start-up,
 * which the bootstrap bounds to minutes; one last written (created or sized) more
 * than BELL_STALE_S ago is of a job killed during start-up. */
#define BELL_STALE_S 600
static void reap_old_bell(const char *name)
{
    char path[300];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (time(NULL) - st.st_mtime > BELL_STALE_S && unlink(path) == 0)
        SFB_LOG_D("transport: removed %s, a doorbell left by a start-up %lld s ago", path,
                  (long long)(time(NULL) - st.st_mtime));
}

/* The shm provider names its region after the pid by default
 * ("<pid>:<dom>:<ep>" in /dev/shm). A process killed with SIGKILL leaves its
 * region behind, and a later process that gets the same pid then fails with
 * EBUSY. So: a name of our own with a random part, and removal of the
 * regions of our own dead processes (the pid is the name's last field). */
static void shm_reap_dead(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    int seen = 0, removed = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "sfb_", 4) != 0) continue;
        seen++;
        if (strncmp(e->d_name, SFB__BELL_SHM_PREFIX, strlen(SFB__BELL_SHM_PREFIX)) == 0) {
            reap_old_bell(e->d_name);
            continue;
        }
        const char *us = strrchr(e->d_name, '_');
        char *end;
        long pid = us ? strtol(us + 1, &end, 10) : 0;
        if (pid <= 0 || *end) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char path[300];
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        if (unlink(path) == 0) {
            removed++;
            SFB_LOG_D("transport: removed %s of dead process %ld", path, pid);
        }
    }
    closedir(d);
    SFB_LOG_D("transport: swept /dev/shm: %d regions of sfb, %d of dead processes removed", seen,
              removed);
}

int sfb__tp_shm_name(struct sfb__transport *t)
{
    if (!t->s.skip_shm_sweep) shm_reap_dead();
    char name[128];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(name, sizeof name, "sfb_%08lx%08lx_%u_%ld", (unsigned long)ts.tv_nsec,
             (unsigned long)ts.tv_sec & 0xffffffffu, t->s.rank, (long)getpid());
    int rc = fi_setname(&t->ep->fid, name, strlen(name) + 1);
    if (!rc) snprintf(t->shm_name, sizeof t->shm_name, "%s", name);
    return rc ? sfb__error(rc, "transport: fi_setname(%s): %s", name, fi_strerror(-rc)) : 0;
}
