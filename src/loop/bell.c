/* Doorbells for ranks that sleep instead of polling: see bell.h. */
#include "config.h"
#include "src/loop/bell.h"

#include "src/base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* One sleeping flag per rank, a cache line each. */
struct flag {
    _Atomic uint32_t sleeping;
    char pad[60];
};

struct sfb__bell {
    int fd;
    uint32_t rank;
    struct flag *flags; /* world of them, shared by the job's ranks; NULL: ring always */
    size_t flags_len;
    char shm[64];
    uint64_t key;
    uint32_t world;
    uint32_t nmarked;
    uint32_t *marked;  /* peers to ring at the next flush */
    uint8_t *is_marked;
    int always; /* a marked peer's queue was full: ring whether or not it sleeps */
};

static socklen_t bell_addr(struct sockaddr_un *a, uint64_t key, uint32_t rank)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* abstract namespace: sun_path[0] == '\0' */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "sfb-bell-%016llx-%u",
                     (unsigned long long)key, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int sfb__bell_open(struct sfb__bell **out, uint64_t job_key, uint32_t rank, uint32_t world)
{
    *out = NULL;
    struct sfb__bell *b = calloc(1, sizeof *b);
    if (!b) return -ENOMEM;
    b->fd = -1;
    b->key = job_key;
    b->world = world;
    b->marked = calloc(world, sizeof *b->marked);
    b->is_marked = calloc(world, 1);
    int ret = -ENOMEM;
    if (!b->marked || !b->is_marked) goto fail;
    b->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (b->fd < 0) {
        ret = sfb__error(-errno, "doorbell: socket: %s", strerror(errno));
        goto fail;
    }
    struct sockaddr_un a;
    socklen_t len = bell_addr(&a, job_key, rank);
    if (bind(b->fd, (struct sockaddr *)&a, len) != 0) {
        ret = sfb__error(-errno, "doorbell of rank %u: bind: %s", rank, strerror(errno));
        goto fail;
    }
    b->rank = rank;
    /* The flags: every rank opens (or creates) the same segment; a rank
     * that cannot leaves flags NULL and rings every time. */
    snprintf(b->shm, sizeof b->shm, "/" SFB__BELL_SHM_PREFIX "%016llx",
             (unsigned long long)job_key);
    b->flags_len = (size_t)world * sizeof(struct flag);
    int sfd = shm_open(b->shm, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (sfd >= 0) {
        struct stat st;
        if (fstat(sfd, &st) == 0 && (size_t)st.st_size < b->flags_len &&
            ftruncate(sfd, (off_t)b->flags_len) != 0)
            st.st_size = -1;
        void *m = mmap(NULL, b->flags_len, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
        if (m != MAP_FAILED) b->flags = m;
        close(sfd);
    }
    *out = b;
    return 0;
fail:
    sfb__bell_close(&b);
    return ret;
}

void sfb__bell_unlink(struct sfb__bell *b)
{
    if (b && b->shm[0]) shm_unlink(b->shm);
}

void sfb__bell_sleeping(struct sfb__bell *b, int on)
{
    if (!b->flags) return;
    atomic_store_explicit(&b->flags[b->rank].sleeping, (uint32_t)on, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
}

int sfb__bell_is_sleeping(const struct sfb__bell *b)
{
    return !b->flags || atomic_load_explicit(&b->flags[b->rank].sleeping, memory_order_relaxed);
}

int sfb__bell_fd(const struct sfb__bell *b)
{
    return b->fd;
}

unsigned sfb__bell_drain(struct sfb__bell *b)
{
    char buf[64];
    unsigned n = 0;
    while (recv(b->fd, buf, sizeof buf, MSG_DONTWAIT) >= 0) n++;
    return n;
}

void sfb__bell_mark(struct sfb__bell *b, uint32_t peer, int always)
{
    if (peer >= b->world) return;
    if (always) b->always = 1;
    if (b->is_marked[peer]) return;
    b->is_marked[peer] = 1;
    b->marked[b->nmarked++] = peer;
}

unsigned sfb__bell_flush(struct sfb__bell *b)
{
    unsigned sent = 0;
    /* Pairs with sfb__bell_sleeping: what was posted before this fence is
     * seen by a receiver that polls after setting its flag, or the flag is
     * seen here. */
    atomic_thread_fence(memory_order_seq_cst);
    for (uint32_t i = 0; i < b->nmarked; i++) {
        uint32_t p = b->marked[i];
        b->is_marked[p] = 0;
        if (b->flags && !b->always &&
            !atomic_load_explicit(&b->flags[p].sleeping, memory_order_relaxed))
            continue;
        struct sockaddr_un a;
        socklen_t len = bell_addr(&a, b->key, p);
        /* EAGAIN: rings already waiting there; ECONNREFUSED: gone. */
        if (sendto(b->fd, "", 0, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, len) == 0)
            sent++;
    }
    b->nmarked = 0;
    b->always = 0;
    return sent;
}

void sfb__bell_close(struct sfb__bell **bp)
{
    struct sfb__bell *b = *bp;
    if (!b) return;
    if (b->fd >= 0) close(b->fd);
    if (b->flags) munmap(b->flags, b->flags_len);
    free(b->marked);
    free(b->is_marked);
    free(b);
    *bp = NULL;
}
