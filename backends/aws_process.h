/*
 * aws_process.h - credential_process: credentials printed by a helper program, as the AWS CLI
 * and SDKs run it.
 *
 * The command line is split into words the way a POSIX shell splits a simple command (single
 * quotes, double quotes with \" \\ \$ \` escapes, backslash outside quotes), with no
 * expansion of variables, globs or "~", and run with execvp() without a shell, stdin
 * /dev/null, in a process group of its own. Its standard output must be one JSON object:
 *   {"Version": 1, "AccessKeyId": "...", "SecretAccessKey": "...",
 *    "SessionToken": "..." (optional), "Expiration": "2026-12-02T17:00:00Z" (optional)}
 * An Expiration makes the credentials temporary (refreshed ahead of it); without one they do
 * not expire. The first line of its standard error (at most 200 bytes) goes into the error
 * message of a failure, since that is where such helpers say what went wrong ("run aws sso
 * login"); the standard output never does.
 *
 * The program gets descriptors 0-2 only. That relies on the caller opening its descriptors
 * O_CLOEXEC, as the daemon does (with glibc 2.34 and later the rest are closed in the child
 * as well). Thread-safe: no global state, no signal handler is changed, and only the
 * program's own pid is waited for.
 */
#ifndef PAGEFS_AWS_PROCESS_H
#define PAGEFS_AWS_PROCESS_H

#include "backends/aws_creds.h"

#include <stddef.h>

#define AWS_PROCESS_TIMEOUT_MS 30000 /* the default time a credential_process may take */
#define AWS_PROCESS_OUTPUT_MAX 65536 /* the most standard output read */

/* Runs `command` (above) and parses its output into *out. timeout_ms <= 0 is the default;
 * at the timeout the process group is killed (SIGKILL). Returns 0; -EINVAL for an empty
 * command or unbalanced quotes; -ENOENT when the program cannot be run (not found, not
 * executable); -ETIMEDOUT; -EIO when it exits non-zero, dies of a signal, prints more than
 * AWS_PROCESS_OUTPUT_MAX bytes or prints something that is not the JSON above (Version not 1,
 * a missing key, a bad Expiration); -ENOMEM. err gets one line naming the program (argv[0]
 * only, never the arguments, which may carry secrets) and what went wrong. */
int aws_creds_from_process(const char *command, int timeout_ms, struct aws_creds *out, char *err,
                           size_t errlen);

/* The word splitting above, exposed for tests: *argv_out is a NULL-terminated array of
 * malloc'd words (free with aws_process_argv_free()). Returns 0, -EINVAL (unbalanced quotes,
 * trailing backslash, no words), -ENOMEM. */
int aws_process_split(const char *command, char ***argv_out);
void aws_process_argv_free(char **argv);

#endif
