/*
 * pagefs.c - main() of the pagefs binary: one command line, two kinds of commands.
 *
 *   pagefs load|stats|evict|cache|fsck ...       operator commands (tools/ctl.h)
 *   pagefs mount SOURCE MOUNTPOINT [options]     the daemon (fuse/daemon.h)
 *   pagefs SOURCE MOUNTPOINT [options]           the same, as mount.fuse.pagefs calls it
 *   pagefs --help | --version
 *
 * Design: the binary's entry point sits above every layer, so each arrow points down: the
 * operator commands (library pagefs_ctl) and the daemon (library pagefs_fuse) know nothing of
 * each other or of this file. An argv[1] that names an operator command goes to
 * pagefs_ctl_main(); anything else is the mount command line, parsed by fuse/options.h (a
 * pure function of argv and an environment snapshot taken here) and then run by
 * pagefs_daemon_run(), or answered with the help text or the version.
 *
 * Exit status: the command's (ctl.h), or the daemon's (0 clean, 1 failed to mount); 1 for a
 * bad mount command line, after a one-line message on stderr. No state beyond main's locals.
 */
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuse/daemon.h"
#include "fuse/options.h"
#include "tools/ctl.h"

int main(int argc, char *argv[])
{
    if (argc > 1 && pagefs_ctl_is_command(argv[1]))
        return pagefs_ctl_main(argc, argv);

    struct pagefs_env env = {
        .euid = geteuid(),
        .home = getenv("HOME"),
        .xdg_cache_home = getenv("XDG_CACHE_HOME"),
    };
    struct pagefs_options o;
    char err[512];
    int code = 0;
    int rc = pagefs_options_parse(argc, argv, &env, &o, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", rc == -ENOMEM ? "out of memory" : err);
        code = 1;
        goto out_clear;
    }
    switch (o.action) {
    case PAGEFS_ACTION_HELP:
        pagefs_options_help(stdout, "pagefs", &env);
        break;
    case PAGEFS_ACTION_VERSION:
        printf("pagefs %s (libfuse %s)\n", PAGEFS_VERSION, fuse_pkgversion());
        break;
    case PAGEFS_ACTION_MOUNT:
        code = pagefs_daemon_run(&o);
        break;
    }
out_clear:
    pagefs_options_clear(&o);
    return code;
}
