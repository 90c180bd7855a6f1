/*
 * aws_creds.h - AWS credentials the way the AWS CLI and SDKs find them.
 *
 * Order: the environment (AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY, with an optional
 * AWS_SESSION_TOKEN), then the shared credentials file ($AWS_SHARED_CREDENTIALS_FILE, else
 * ~/.aws/credentials), section [PROFILE] where PROFILE is the given profile, else
 * $AWS_PROFILE, else "default".
 *
 * The strings are owned by the struct; aws_creds_clear() wipes and frees them. Error
 * messages never contain a key or a token.
 */
#ifndef PAGEFS_AWS_CREDS_H
#define PAGEFS_AWS_CREDS_H

#include <stddef.h>

struct aws_creds {
    char *access_key;
    char *secret_key;
    char *session_token; /* NULL when there is none */
};

/* Find credentials (see above). `profile` may be NULL. Returns 0, -ENOENT when none were
 * found anywhere, -EINVAL when the chosen profile has only one of the two keys, -ENOMEM;
 * on error writes a one-line message (no secrets) into err. */
int aws_creds_load(const char *profile, struct aws_creds *out, char *err, size_t errlen);

/* Read section [profile] of an INI-style credentials file. Section headers may also be
 * written "[profile NAME]" (the config-file spelling). Keys aws_access_key_id,
 * aws_secret_access_key, aws_session_token (or the older aws_security_token) are matched
 * without regard to case; blank lines and lines starting with '#' or ';' are ignored, and
 * whitespace around names and values is trimmed. Returns 0, -ENOENT if the file or the
 * profile does not exist or the profile has no keys, -EINVAL if it has only one of the two
 * keys, -EIO on a read error, -ENOMEM. */
int aws_creds_from_file(const char *path, const char *profile, struct aws_creds *out);

/* Wipe and free the strings; the struct is left zeroed. Safe on a zeroed struct. */
void aws_creds_clear(struct aws_creds *c);

#endif
