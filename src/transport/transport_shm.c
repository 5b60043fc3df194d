/* libfabric transport: the shm provider's region names in /dev/shm, the
 * removal of regions and doorbells that dead processes left there, and a
 * close's wait for the first contacts it asked for. The protocol and the
 * split into files: src/transport/transport_impl.h. */
#include "config.h"
#include "src/transport/transport_impl.h"

#include "src/loop/bell.h"
#include "src/loop/loop.h"
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

/* libfabric 1.17's shm: the first operation to a peer puts a connection
 * request (this endpoint's region name) in the peer's queue and fails with
 * -FI_EAGAIN until the peer has mapped the region by that name. A peer
 * that takes the request after this endpoint's close has unlinked the name
 * dereferences the mapping that failed (SIGSEGV in smr_progress_connreq):
 * a call notice sent to a peer it had never talked to just before the job
 * closed killed that peer (3 runs of 20). The close waits for such a peer
 * while it can still take the request, alive, its endpoint open: for the
 * requests out, and for the operations queued to a peer never contacted,
 * which would send one. Then it starts no first contact (the operations
 * stay queued, and go with the close). */
#define FIRST_CONTACT_S 1.0

/* Whether rank p's region still has its name (its endpoint is open). */
static int region_named(struct sfb__transport *t, uint32_t p)
{
    size_t len;
    const uint8_t *at = sfb__tp_peer_name(t, p, 0, &len);
    char name[SFB__TP_NAME_MAX + 1];
    memcpy(name, at, len);
    name[len] = '\0';
    const char *bare = strstr(name, "://");
    bare = bare ? bare + 3 : name;
    char path[SFB__TP_NAME_MAX + 16];
    snprintf(path, sizeof path, "/dev/shm/%s", bare);
    return *bare && !strchr(bare, '/') && access(path, F_OK) == 0;
}

/* Whether the close waits for rank p, whose contact is `want` (ASKED: the
 * request is out; NONE: an operation queued for it will send one). */
static int waits_for(struct sfb__transport *t, uint32_t p, int want)
{
    return t->peers.contact[p] == want && !sfb__tp_peer_gone(t, p) && region_named(t, p);
}

struct unanswered {
    struct sfb__transport *t;
    int64_t peer; /* out: one the close waits for, or -1 */
    int last;     /* in: the last look (the wait is over either way) */
};
static void find_unanswered(void *arg)
{
    struct unanswered *u = arg;
    struct sfb__transport *t = u->t;
    sfb__tp_on_async(t); /* the sends submitted before the close */
    for (uint32_t p = 0; p < sfb__tp_world(t) && u->peer < 0; p++)
        if (waits_for(t, p, CONTACT_ASKED)) u->peer = p;
    for (struct sreq *r = t->pend_head; r && u->peer < 0; r = r->next)
        if (waits_for(t, r->dst, CONTACT_NONE)) u->peer = r->dst;
    for (struct op *o = t->ack_head; o && u->peer < 0; o = o->qnext)
        if (waits_for(t, o->peer, CONTACT_NONE)) u->peer = o->peer;
    for (struct sfb__buf *a = t->rd_head; a && u->peer < 0; a = a->next)
        if (waits_for(t, a->src, CONTACT_NONE)) u->peer = a->src;
    if (u->peer < 0 || u->last) t->contacts_closed = 1;
}

void sfb__tp_shm_settle(struct sfb__transport *t)
{
    if (!t->shm_name[0] || !sfb__tp_world(t)) return;
    double t0 = sfb__now();
    for (;;) {
        struct unanswered u = {t, -1, sfb__now() - t0 >= FIRST_CONTACT_S};
        if (sfb__loop_call(t->loop, find_unanswered, &u) || u.peer < 0) break;
        if (u.last) {
            SFB_LOG_D("transport: closing with rank %lld's first contact unanswered after %.1f s",
                      (long long)u.peer, FIRST_CONTACT_S);
            return;
        }
        sfb__sleep(0.002);
    }
    if (sfb__now() - t0 > 0.01)
        SFB_LOG_D("transport: waited %.0f ms at close for peers to take first contacts",
                  (sfb__now() - t0) * 1e3);
}

/* libfabric's shm provider (1.17) installs handlers for SIGINT, SIGTERM,
 * SIGSEGV, SIGBUS and more when its endpoint opens: they unlink the regions
 * of the process's endpoints by name and re-raise with the disposition
 * they found. A child forked after that (a DataLoader's worker, a
 * multiprocessing.Pool's, which Pool.terminate() — `with Pool() as p:` —
 * ends by SIGTERM) inherited them: its SIGTERM unlinked its parent's
 * regions, and the parent's peers, no longer finding them, failed the job
 * ("rank 1 is dead or silent"). Each disposition the open replaced is kept
 * with the one it replaced; in a forked child, one still in place is given
 * back the one it replaced (sigaction is async-signal-safe). */
static const int shm_sigs[] = SFB_TAKEN_SIGNALS;
_Static_assert(SFB_ARRAY_LEN(shm_sigs) <= 16, "struct sfb__tp_sigs holds 16");
static struct sigaction fi_act[16], fi_was[16]; /* libfabric's, and what it replaced */
static volatile sig_atomic_t fi_took[16];
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static int same_handler(const struct sigaction *a, const struct sigaction *b)
{
    if ((a->sa_flags & SA_SIGINFO) != (b->sa_flags & SA_SIGINFO)) return 0;
    return (a->sa_flags & SA_SIGINFO) ? a->sa_sigaction == b->sa_sigaction
                                      : a->sa_handler == b->sa_handler;
}

static void forked_child(void)
{
    for (size_t i = 0; i < SFB_ARRAY_LEN(shm_sigs); i++) {
        struct sigaction now;
        if (fi_took[i] && sigaction(shm_sigs[i], NULL, &now) == 0 &&
            same_handler(&now, &fi_act[i]))
            sigaction(shm_sigs[i], &fi_was[i], NULL);
    }
}

static void at_fork(void)
{
    pthread_atfork(NULL, NULL, forked_child);
}

void sfb__tp_shm_signals_before(struct sfb__tp_sigs *s)
{
    for (size_t i = 0; i < SFB_ARRAY_LEN(shm_sigs); i++)
        s->have[i] = sigaction(shm_sigs[i], NULL, &s->act[i]) == 0;
}

void sfb__tp_shm_signals_opened(const struct sfb__tp_sigs *before)
{
    int took = 0;
    for (size_t i = 0; i < SFB_ARRAY_LEN(shm_sigs); i++) {
        struct sigaction now;
        if (fi_took[i] || !before->have[i] || sigaction(shm_sigs[i], NULL, &now) != 0 ||
            same_handler(&now, &before->act[i]))
            continue;
        fi_act[i] = now;
        fi_was[i] = before->act[i];
        fi_took[i] = 1;
        took = 1;
    }
    if (took) pthread_once(&fork_once, at_fork);
}
