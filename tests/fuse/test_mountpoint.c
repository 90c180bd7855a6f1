/*
 * test_mountpoint.c - unit tests of the FUSE usability check in fuse/mountpoint.c:
 * mountpoint_fuse_conf_allows_other() reads fuse.conf as fusermount3 does, and
 * mountpoint_fuse_check() refuses a missing FUSE device and allow_other without
 * user_allow_other (for a non-root user) with one line that says what to do.
 *
 * The refusal of a /dev/fuse the user may not open needs a non-root process: the mount test
 * tests/hostile/test_bad_args.py runs the daemon as nobody for it. Here, run as root, a device
 * file with mode 0600 passes (root may open it), which is what the check must say too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuse/mountpoint.h"
#include "testlib.h"

static char *dir;

static char *path_in(const char *name)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s", dir, name) < 0)
        abort();
    return p;
}

/* Writes text to dir/name; returns the path (caller frees). */
static char *conf_file(const char *name, const char *text)
{
    char *p = path_in(name);
    CHECK_EQ(test_write_file(p, text, strlen(text)), 0);
    return p;
}

static void test_conf_parsing(void)
{
    static const struct {
        const char *text;
        int allows;
    } cases[] = {
        {"user_allow_other\n", 1},
        {"user_allow_other", 1}, /* no final newline */
        {"# comment\nmount_max = 1000\n  user_allow_other \t\n", 1},
        {"user_allow_other # trailing comment\n", 1},
        {"\tuser_allow_other\r\n", 1},
        {"", 0},
        {"#user_allow_other\n", 0}, /* Debian's default: commented out */
        {"# user_allow_other\nmount_max = 10\n", 0},
        {"user_allow_other_x\n", 0},
        {"xuser_allow_other\n", 0},
        {"user_allow_others\n", 0},
        {"user allow other\n", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *p = conf_file("fuse.conf", cases[i].text);
        int got = mountpoint_fuse_conf_allows_other(p);
        if (got != cases[i].allows)
            fprintf(stderr, "  fuse.conf \"%s\": %d\n", cases[i].text, got);
        CHECK_EQ(got, cases[i].allows);
        free(p);
    }
    char *missing = path_in("no-such-fuse.conf");
    CHECK_EQ(mountpoint_fuse_conf_allows_other(missing), 0);
    free(missing);
    /* A directory cannot be read as a file. */
    CHECK_EQ(mountpoint_fuse_conf_allows_other(dir), -EISDIR);
}

static void test_device(void)
{
    char err[512] = "";
    char *dev = path_in("no-such-fuse-device");
    char *conf = conf_file("fuse.conf", "user_allow_other\n");
    CHECK_EQ(mountpoint_fuse_check(dev, conf, NULL, err, sizeof(err)), -ENOENT);
    char want[1024];
    snprintf(want, sizeof(want),
             "%s does not exist: load the fuse kernel module (modprobe fuse), or in a container "
             "pass the device in (e.g. docker run --device /dev/fuse --cap-add SYS_ADMIN)",
             dev);
    CHECK_STR(err, want);
    CHECK(strchr(err, '\n') == NULL);

    /* A device file this process may read and write (root may open a 0600 one). */
    char *ok = conf_file("fuse-device", "");
    CHECK_EQ(chmod(ok, getuid() == 0 ? 0600 : 0666), 0);
    err[0] = '\0';
    CHECK_EQ(mountpoint_fuse_check(ok, conf, "allow_other", err, sizeof(err)), 0);
    CHECK_STR(err, "");
    free(ok);
    free(conf);
    free(dev);
}

static void test_allow_other(void)
{
    char err[512] = "";
    char *dev = conf_file("fuse-device", "");
    CHECK_EQ(chmod(dev, 0666), 0);
    char *without = conf_file("fuse.conf", "#user_allow_other\n");
    int rc = mountpoint_fuse_check(dev, without, "allow_other", err, sizeof(err));
    if (getuid() == 0) {
        /* Root needs no user_allow_other: fusermount3 is not involved. */
        CHECK_EQ(rc, 0);
    } else {
        CHECK_EQ(rc, -EPERM);
        char want[1024];
        snprintf(want, sizeof(want),
                 "allow_other needs 'user_allow_other' in %s when a non-root user mounts: add "
                 "that line to %s (as root), or mount as root",
                 without, without);
        CHECK_STR(err, want);
    }
    /* Without an option asking for other users, fuse.conf does not matter. */
    CHECK_EQ(mountpoint_fuse_check(dev, without, NULL, err, sizeof(err)), 0);
    free(without);
    free(dev);
}

int main(void)
{
    dir = test_mkdtemp("mountpoint");
    RUN(test_conf_parsing);
    RUN(test_device);
    RUN(test_allow_other);
    test_rm_rf(dir);
    free(dir);
    return test_finish();
}
