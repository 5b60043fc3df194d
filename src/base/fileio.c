#include "config.h"
#include "src/base/fileio.h"
#include "src/base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "a special file";
}

int sfb__open_regular(const char *path, const char *what, int *fd_out, struct stat *st_out)
{
    *fd_out = -1;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer, forever; the file type is only known once it is open. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return sfb__error(e == ENOENT ? -ENOENT : -EIO, "%s: cannot open %s: %s", path, what,
                          strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sfb__error(-EIO, "%s: cannot stat %s: %s", path, what, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sfb__error(S_ISDIR(st.st_mode) ? -EISDIR : -EIO,
                          "%s: not a regular file but %s (%s must be a regular file)", path,
                          file_kind(st.st_mode), what);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        return sfb__error(-EIO, "%s: fcntl: %s", path, strerror(e));
    }
    *fd_out = fd;
    if (st_out) *st_out = st;
    return 0;
}

int sfb__read_file(const char *path, size_t max_size, uint8_t **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    int fd;
    struct stat st;
    int ret = sfb__open_regular(path, "the input", &fd, &st);
    if (ret) return ret;
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

/* Creates the temporary file beside `path` ("PATH.tmp.<pid>.<random>",
 * its name left in tmp[cap]) exclusively: an entry already there under
 * that name, a symlink planted there included, is never opened or followed
 * (O_EXCL | O_NOFOLLOW); another name is tried. Returns the descriptor or
 * -errno. */
static int create_temp(const char *path, char *tmp, size_t cap)
{
    int err = EEXIST;
    for (int attempt = 0; attempt < 16 && err == EEXIST; attempt++) {
        uint32_t r;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = (uint32_t)(uintptr_t)&r ^ (uint32_t)attempt * 2654435761u;
        snprintf(tmp, cap, "%s.tmp.%ld.%08x", path, (long)getpid(), r);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) return fd;
        err = errno;
    }
    return -err;
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
    int ret = 0;
    int fd = create_temp(path, tmp, plen + 32);
    if (fd < 0) {
        ret = fd;
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
