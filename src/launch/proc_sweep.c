/* The launcher's process-tree sweep (src/launch/proc_sweep.h). */
#include "src/launch/proc_sweep.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Calls fn(pid, pgid, state, arg) for every process whose parent is this
 * one (from /proc: the launcher is single-threaded, so its children are
 * those whose ppid is its pid). */
static void each_child(void (*fn)(pid_t pid, pid_t pgid, char state, void *arg), void *arg)
{
    DIR *d = opendir("/proc");
    if (!d) return;
    pid_t self = getpid();
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue;
        buf[n] = '\0';
        /* "pid (comm) state ppid pgrp ...": comm may hold spaces and ')' */
        char *rp = strrchr(buf, ')'), state;
        int ppid, pgrp;
        if (!rp || sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) != 3) continue;
        if (ppid == self) fn((pid_t)atoi(e->d_name), (pid_t)pgrp, state, arg);
    }
    closedir(d);
}

static int listed(const pid_t *v, size_t n, pid_t pid)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == pid) return 1;
    return 0;
}

static void list_add(pid_t **v, size_t *n, pid_t pid)
{
    pid_t *grown = realloc(*v, (*n + 1) * sizeof *grown);
    if (!grown) return; /* out of memory: listed again next time */
    *v = grown;
    (*v)[(*n)++] = pid;
}

static void note_before(pid_t pid, pid_t pgid, char state, void *arg)
{
    (void)pgid;
    (void)state;
    struct sfb__sweep *w = arg;
    list_add(&w->before, &w->nbefore, pid);
}

void sfb__sweep_note_before(struct sfb__sweep *w)
{
    each_child(note_before, w);
}

struct round {
    struct sfb__sweep *w;
    int sig, left;
    int (*is_rank)(void *arg, pid_t pid);
    void *arg;
};

static void sweep_child(pid_t pid, pid_t pgid, char state, void *arg)
{
    struct round *r = arg;
    struct sfb__sweep *w = r->w;
    if (listed(w->before, w->nbefore, pid) || r->is_rank(r->arg, pid)) return;
    r->left++;
    if (state == 'Z') {
        waitpid(pid, NULL, WNOHANG);
        return;
    }
    if (r->sig == SIGTERM && listed(w->termed, w->ntermed, pid)) return;
    if (r->sig == SIGTERM) list_add(&w->termed, &w->ntermed, pid);
    if (pgid > 1 && pgid != getpgrp()) kill(-pgid, r->sig);
    kill(pid, r->sig);
}

int sfb__sweep_orphans(struct sfb__sweep *w, int sig, int (*is_rank)(void *arg, pid_t pid),
                       void *arg)
{
    struct round r = {w, sig, 0, is_rank, arg};
    each_child(sweep_child, &r);
    return r.left;
}

void sfb__sweep_free(struct sfb__sweep *w)
{
    free(w->before);
    free(w->termed);
    memset(w, 0, sizeof *w);
}
