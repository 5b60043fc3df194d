/* Doorbells for ranks that sleep instead of polling: see bell.h. */
#include "config.h"
#include "src/bell.h"

#include "src/common.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct sfb__bell {
    int fd;
    uint64_t key;
    uint32_t world;
    uint32_t nmarked;
    uint32_t *marked;  /* peers to ring at the next flush */
    uint8_t *is_marked;
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
    *out = b;
    return 0;
fail:
    sfb__bell_close(&b);
    return ret;
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

void sfb__bell_mark(struct sfb__bell *b, uint32_t peer)
{
    if (peer >= b->world || b->is_marked[peer]) return;
    b->is_marked[peer] = 1;
    b->marked[b->nmarked++] = peer;
}

unsigned sfb__bell_flush(struct sfb__bell *b)
{
    unsigned sent = 0;
    for (uint32_t i = 0; i < b->nmarked; i++) {
        uint32_t p = b->marked[i];
        b->is_marked[p] = 0;
        struct sockaddr_un a;
        socklen_t len = bell_addr(&a, b->key, p);
        /* EAGAIN: rings already waiting there; ECONNREFUSED: gone. */
        if (sendto(b->fd, "", 0, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, len) == 0)
            sent++;
    }
    b->nmarked = 0;
    return sent;
}

void sfb__bell_close(struct sfb__bell **bp)
{
    struct sfb__bell *b = *bp;
    if (!b) return;
    if (b->fd >= 0) close(b->fd);
    free(b->marked);
    free(b->is_marked);
    free(b);
    *bp = NULL;
}
