#include "config.h"
#include "src/fileio.h"
#include "src/common.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int sfb__read_file(const char *path, size_t max_size, uint8_t **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return sfb__error(-e, "%s: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sfb__error(-EIO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_size) {
        close(fd);
        return sfb__error(-EFBIG, "%s: %lld bytes is larger than the %zu allowed", path,
                          (long long)st.st_size, max_size);
    }
    size_t size = (size_t)st.st_size;
    uint8_t *p = malloc(size ? size : 1);
    if (!p) {
        close(fd);
        return sfb__error(-ENOMEM, "%s: cannot allocate %zu bytes", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, p + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            free(p);
            close(fd);
            return sfb__error(-EIO, "%s: read failed at byte %zu: %s", path, got,
                              r < 0 ? strerror(e) : "file shrank while reading");
        }
        got += (size_t)r;
    }
    close(fd);
    *buf = p;
    *len = size;
    return 0;
}

static int write_all(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int sfb__write_file_atomic(const char *path, const struct sfb__piece *pieces, size_t n)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    char *dcopy = strdup(path);
    if (!tmp || !dcopy) {
        free(tmp);
        free(dcopy);
        return sfb__error(-ENOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    int ret = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        ret = -errno;
        sfb__error(ret, "%s: cannot create: %s", tmp, strerror(-ret));
        goto out;
    }
    for (size_t i = 0; i < n && !ret; i++) ret = write_all(fd, pieces[i].data, pieces[i].len);
    if (!ret && fsync(fd) != 0) ret = -errno;
    if (close(fd) != 0 && !ret) ret = -errno;
    if (ret) {
        sfb__error(ret, "%s: write failed: %s (nothing written: the partial %s is removed)",
                   path, strerror(-ret), tmp);
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        ret = -errno;
        sfb__error(ret, "%s: rename failed: %s", path, strerror(-ret));
        unlink(tmp);
        goto out;
    }
    /* Make the rename itself durable. */
    int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
out:
    free(tmp);
    free(dcopy);
    return ret;
}
