/* The launcher's output relay: each rank's stdout and stderr read from a
 * pipe and written line by line as "[rank] line\n", each line by one
 * write() so lines of different ranks never mix (a partial last line gets a
 * newline; a line longer than 64 KiB is split). */
#ifndef SFB_LAUNCH_LINE_RELAY_H
#define SFB_LAUNCH_LINE_RELAY_H

#include <stddef.h>

/* One pipe of one rank. */
struct sfb__line_stream {
    int fd;  /* read end, -1 once closed */
    int out; /* destination fd */
    size_t used, cap;
    char *buf;
};

/* What the streams of one launch share: the buffer one prefixed line is
 * built in. Zero-initialised; sfb__line_relay_free releases it. */
struct sfb__line_relay {
    char *scratch;
    size_t scratch_cap;
};

/* Reads what the pipe holds and writes every complete line; at end of file
 * (or an error) writes the partial line and closes the stream. */
void sfb__line_read(struct sfb__line_relay *r, int rank, struct sfb__line_stream *s);
/* Writes the partial line left, if any, and closes the stream (no-op once
 * closed). The stream's buffer stays allocated: sfb__line_stream_free. */
void sfb__line_close(struct sfb__line_relay *r, int rank, struct sfb__line_stream *s);
void sfb__line_stream_free(struct sfb__line_stream *s);
void sfb__line_relay_free(struct sfb__line_relay *r);

#endif
