/* Whole-file reads and atomic writes (src/base/fileio.c): a write replaces
 * the file whole and leaves no temp file; a failed write leaves the old
 * file untouched and no temp file; every error names the path. */
#include "src/base/util.h"
#include "src/base/fileio.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/sfb_fileio_XXXXXX";

static const char *in_dir(const char *name)
{
    static char p[4][256];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}

/* Entries of the test directory, "." and ".." left out. */
static int entries(void)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static int content_is(const char *path, const char *want)
{
    uint8_t *buf;
    size_t len;
    ASSERT_OK(sfb__read_file(path, 1 << 20, &buf, &len));
    int same = len == strlen(want) && memcmp(buf, want, len) == 0;
    if (!same) fprintf(stderr, "  %s holds \"%.*s\", not \"%s\"\n", path, (int)len, buf, want);
    free(buf);
    ASSERT(same);
    return 0;
}

static int test_write_and_replace(void)
{
    const char *p = in_dir("model.bin");
    struct sfb__piece two[] = {{"head|", 5}, {"body", 4}};
    ASSERT_OK(sfb__write_file_atomic(p, two, 2));
    if (content_is(p, "head|body")) return 1;
    struct sfb__piece one[] = {{"new", 3}};
    ASSERT_OK(sfb__write_file_atomic(p, one, 1));
    if (content_is(p, "new")) return 1;
    ASSERT_EQ(entries(), 1); /* no temp file left behind */
    ASSERT_OK(sfb__write_file_atomic(p, NULL, 0));
    if (content_is(p, "")) return 1;
    struct stat st;
    ASSERT_EQ(stat(p, &st), 0);
    mode_t mask = umask(0);
    umask(mask);
    ASSERT_EQ(st.st_mode & 0777, 0644 & ~mask);
    ASSERT_EQ(unlink(p), 0);
    return 0;
}

/* A symlink planted where the temporary file used to be made (PATH.tmp.<pid>)
 * is neither followed nor replaced: the write goes to PATH, the link's
 * target keeps its bytes. */
static int test_planted_symlink_not_followed(void)
{
    const char *victim = in_dir("victim");
    struct sfb__piece v[] = {{"precious", 8}};
    ASSERT_OK(sfb__write_file_atomic(victim, v, 1));
    char p[600], link[700];
    snprintf(p, sizeof p, "%s", in_dir("out.bin"));
    snprintf(link, sizeof link, "%s.tmp.%ld", p, (long)getpid());
    ASSERT_EQ(symlink(victim, link), 0);
    struct sfb__piece one[] = {{"model", 5}};
    ASSERT_OK(sfb__write_file_atomic(p, one, 1));
    if (content_is(p, "model")) return 1;
    if (content_is(victim, "precious")) return 1;
    struct stat st;
    ASSERT_EQ(lstat(link, &st), 0);
    ASSERT_EQ(S_ISLNK(st.st_mode), 1);
    ASSERT_EQ(entries(), 3); /* victim, out.bin, the link: no temp file left */
    ASSERT_EQ(unlink(link), 0);
    ASSERT_EQ(unlink(p), 0);
    ASSERT_EQ(unlink(victim), 0);
    return 0;
}

static int test_write_errors_name_the_path(void)
{
    /* a directory that does not exist */
    const char *p = in_dir("no/such/dir/model.bin");
    struct sfb__piece one[] = {{"x", 1}};
    ASSERT_EQ(sfb__write_file_atomic(p, one, 1), -ENOENT);
    ASSERT_STR_CONTAINS(sfb_last_error(), p);
    ASSERT_STR_CONTAINS(sfb_last_error(), "cannot create");
    /* a directory where the file should be: the rename fails, the temp
     * file goes */
    const char *d = in_dir("adir");
    ASSERT_EQ(mkdir(d, 0755), 0);
    ASSERT_EQ(sfb__write_file_atomic(d, one, 1), -EISDIR);
    ASSERT_STR_CONTAINS(sfb_last_error(), d);
    ASSERT_STR_CONTAINS(sfb_last_error(), "rename failed");
    ASSERT_EQ(entries(), 1);
    ASSERT_EQ(rmdir(d), 0);
    return 0;
}

/* A write that fails half-way (the file size limit, as a full disk would)
 * leaves the old file as it was and no temp file. */
static int test_failed_write_keeps_old(void)
{
    const char *p = in_dir("keep.bin");
    struct sfb__piece old[] = {{"old", 3}};
    ASSERT_OK(sfb__write_file_atomic(p, old, 1));
    static char big[4096];
    memset(big, 'n', sizeof big);
    struct sfb__piece one[] = {{big, sizeof big}};
    struct rlimit was, small = {100, 0};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &was), 0);
    small.rlim_max = was.rlim_max;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    int ret = sfb__write_file_atomic(p, one, 1);
    setrlimit(RLIMIT_FSIZE, &was);
    signal(SIGXFSZ, prev);
    ASSERT_EQ(ret, -EFBIG);
    ASSERT_STR_CONTAINS(sfb_last_error(), p);
    ASSERT_STR_CONTAINS(sfb_last_error(), "write failed");
    if (content_is(p, "old")) return 1;
    ASSERT_EQ(entries(), 1);
    ASSERT_EQ(unlink(p), 0);
    return 0;
}

static int test_read_errors_name_the_path(void)
{
    uint8_t *buf = (uint8_t *)1;
    size_t len = 9;
    const char *p = in_dir("missing.bin");
    ASSERT_EQ(sfb__read_file(p, 100, &buf, &len), -ENOENT);
    ASSERT(buf == NULL);
    ASSERT_EQ(len, 0);
    ASSERT_STR_CONTAINS(sfb_last_error(), p);
    ASSERT_EQ(sfb__read_file(dir, 100, &buf, &len), -EISDIR);
    ASSERT_STR_CONTAINS(sfb_last_error(), dir);
    ASSERT_STR_CONTAINS(sfb_last_error(), "a directory");
    /* a FIFO with no writer: refused at once, not waited on */
    const char *f = in_dir("fifo");
    ASSERT_EQ(mkfifo(f, 0600), 0);
    ASSERT_EQ(sfb__read_file(f, 100, &buf, &len), -EIO);
    ASSERT_STR_CONTAINS(sfb_last_error(), f);
    ASSERT_STR_CONTAINS(sfb_last_error(), "a FIFO");
    ASSERT_EQ(unlink(f), 0);
    /* larger than allowed */
    const char *b = in_dir("big.bin");
    struct sfb__piece one[] = {{"0123456789", 10}};
    ASSERT_OK(sfb__write_file_atomic(b, one, 1));
    ASSERT_EQ(sfb__read_file(b, 9, &buf, &len), -EFBIG);
    ASSERT_STR_CONTAINS(sfb_last_error(), b);
    ASSERT_OK(sfb__read_file(b, 10, &buf, &len));
    ASSERT_EQ(len, 10);
    free(buf);
    /* what the file was meant to be is named */
    int fd;
    ASSERT_EQ(sfb__open_regular(dir, "the model file", &fd, NULL), -EISDIR);
    ASSERT_EQ(fd, -1);
    ASSERT_STR_CONTAINS(sfb_last_error(), "the model file");
    ASSERT_EQ(unlink(b), 0);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        {"write_and_replace", test_write_and_replace},
        {"write_errors_name_the_path", test_write_errors_name_the_path},
        {"planted_symlink_not_followed", test_planted_symlink_not_followed},
        {"failed_write_keeps_old", test_failed_write_keeps_old},
        {"read_errors_name_the_path", test_read_errors_name_the_path},
    };
    if (!mkdtemp(dir)) return 1;
    int ret = test_main(argc, argv, tests, SFB_ARRAY_LEN(tests));
    if (entries() == 0) rmdir(dir);
    return ret;
}
