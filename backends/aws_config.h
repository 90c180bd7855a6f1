/*
 * aws_config.h - the AWS shared files: ~/.aws/credentials and ~/.aws/config, read as the AWS
 * CLI and SDKs read them.
 *
 * Files: $AWS_SHARED_CREDENTIALS_FILE (else $HOME/.aws/credentials) and $AWS_CONFIG_FILE (else
 * $HOME/.aws/config); a leading "~/" in either variable is $HOME. In the credentials file a
 * profile's section is [NAME]; in the config file it is [profile NAME], except [default]
 * (which may also be written [profile default]). Other sections of the config file
 * ([sso-session x], [services x], ...) are not profiles. Keys are matched without regard to
 * case and whitespace around names and values is trimmed; blank lines and lines starting
 * with '#' or ';' are comments; an indented line continues a nested value (e.g. "s3 =" and
 * its sub-keys) and is skipped. When both files set a key of the same profile the credentials
 * file wins. A file that does not exist is empty.
 *
 * The profile is a snapshot: files are read once by aws_profile_load(). No message contains a
 * value (values may be secrets); messages name files, profiles and keys only.
 */
#ifndef PAGEFS_AWS_CONFIG_H
#define PAGEFS_AWS_CONFIG_H

#include <stddef.h>

struct aws_profile;

/* Loads profile `name` (NULL or "": $AWS_PROFILE, else "default") from both files. Returns 0
 * with *out (free with aws_profile_free()); -ENOENT when neither file has the profile (*out
 * NULL, err says which files were read); -EIO when a file exists but cannot be read; -ENOMEM. */
int aws_profile_load(const char *name, struct aws_profile **out, char *err, size_t errlen);

/* The profile's name, e.g. "default". */
const char *aws_profile_name(const struct aws_profile *p);

/* The value of key (case-insensitive), or NULL when the profile does not set it. An empty
 * value ("key =") is returned as "". Valid until aws_profile_free(). */
const char *aws_profile_get(const struct aws_profile *p, const char *key);

/* Wipes the values (they may hold secrets) and frees. NULL is a no-op. */
void aws_profile_free(struct aws_profile *p);

/* The paths the functions above read (for messages): into buf, "" when HOME is unset and
 * the variable too. */
void aws_config_credentials_path(char *buf, size_t len);
void aws_config_config_path(char *buf, size_t len);

#endif
