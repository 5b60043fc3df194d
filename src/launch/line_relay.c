/* The launcher's output relay (src/launch/line_relay.h). */
#include "src/launch/line_relay.h"
#include "src/base/util.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LINE_CAP (64 * 1024)

static void write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            struct pollfd pf = {fd, POLLOUT, 0};
            poll(&pf, 1, 100);
        } else {
            return; /* a closed terminal or pipe: drop the output, keep supervising */
        }
    }
}

/* One line, prefixed, in one write() so lines of different ranks never mix. */
static void emit(struct sfb__line_relay *r, int rank, int out, const char *line, size_t len)
{
    char pre[24];
    int pl = snprintf(pre, sizeof pre, "[%d] ", rank);
    if (sfb__reserve((void **)&r->scratch, &r->scratch_cap, (size_t)pl + len + 1)) {
        write_all(out, pre, (size_t)pl); /* out of memory: still deliver the text */
        write_all(out, line, len);
        write_all(out, "\n", 1);
        return;
    }
    memcpy(r->scratch, pre, (size_t)pl);
    memcpy(r->scratch + pl, line, len);
    r->scratch[(size_t)pl + len] = '\n';
    write_all(out, r->scratch, (size_t)pl + len + 1);
}

void sfb__line_close(struct sfb__line_relay *r, int rank, struct sfb__line_stream *s)
{
    if (s->fd < 0) return;
    if (s->used) emit(r, rank, s->out, s->buf, s->used);
    s->used = 0;
    close(s->fd);
    s->fd = -1;
}

void sfb__line_read(struct sfb__line_relay *r, int rank, struct sfb__line_stream *s)
{
    if (s->cap - s->used < 1024 && s->cap < LINE_CAP) {
        size_t want = SFB_MIN(LINE_CAP, s->cap ? s->cap * 2 : 4096);
        if (sfb__reserve((void **)&s->buf, &s->cap, want) && s->cap == 0) {
            sfb__line_close(r, rank, s);
            return;
        }
    }
    ssize_t n = read(s->fd, s->buf + s->used, s->cap - s->used);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
        sfb__line_close(r, rank, s);
        return;
    }
    size_t start = 0, end = s->used + (size_t)n;
    for (size_t i = s->used; i < end; i++)
        if (s->buf[i] == '\n') {
            emit(r, rank, s->out, s->buf + start, i - start);
            start = i + 1;
        }
    if (start == 0 && end == s->cap) { /* a line longer than the buffer: split it */
        emit(r, rank, s->out, s->buf, end);
        start = end;
    }
    memmove(s->buf, s->buf + start, end - start);
    s->used = end - start;
}

void sfb__line_stream_free(struct sfb__line_stream *s)
{
    free(s->buf);
    s->buf = NULL;
    s->cap = s->used = 0;
}

void sfb__line_relay_free(struct sfb__line_relay *r)
{
    free(r->scratch);
    r->scratch = NULL;
    r->scratch_cap = 0;
}
