/*
 * aws_sts.h - AWS STS: AssumeRole and AssumeRoleWithWebIdentity, the two calls that turn a
 * role into temporary credentials.
 *
 * Requests are form POSTs (Action=...&Version=2011-06-15&...) to the STS endpoint over the
 * one HTTP request path (curl_common.h); AssumeRole is signed with SigV4 for service "sts"
 * with the source credentials, AssumeRoleWithWebIdentity is not signed (the token is the
 * proof). The reply's <Credentials> (AccessKeyId, SecretAccessKey, SessionToken, Expiration)
 * is parsed with expat (s3_xml.h). An error reply's <Code> and a short reason go into err;
 * never a key, a secret, a session token or a web identity token.
 */
#ifndef PAGEFS_AWS_STS_H
#define PAGEFS_AWS_STS_H

#include "backends/aws_creds.h"

#include <stddef.h>

#define AWS_STS_DEFAULT_DURATION 3600 /* DurationSeconds asked for when none is configured */

struct aws_sts_conf {
    const char *endpoint; /* the STS URL, e.g. https://sts.us-east-1.amazonaws.com */
    const char *region;   /* the signing region; NULL or "aws-global": us-east-1, which also
                             signs for the global endpoint https://sts.amazonaws.com, whatever
                             the region (as the SDKs do) */
    int timeout_ms;       /* the whole call; <= 0: 10 s */
};

/* The STS endpoint for `region`: $AWS_ENDPOINT_URL_STS, else $AWS_ENDPOINT_URL, else
 * profile_endpoint (a profile's endpoint_url; NULL: none), else the regional endpoint
 * https://sts.REGION.amazonaws.com (".amazonaws.com.cn" for cn-* regions), or the global
 * https://sts.amazonaws.com when regional_mode is "legacy" and the region is one of the
 * SDKs' legacy-global regions. regional_mode: $AWS_STS_REGIONAL_ENDPOINTS when the caller
 * has no profile setting (sts_regional_endpoints); NULL means "regional". Writes into buf;
 * returns 0, -EINVAL (a mode other than regional/legacy, a bad region), -ENAMETOOLONG. */
int aws_sts_endpoint(const char *region, const char *regional_mode, const char *profile_endpoint,
                     char *buf, size_t len);

/* AssumeRole of role_arn as `source`. session_name NULL: "pagefs-<unix time>"; external_id
 * may be NULL; duration_s <= 0: AWS_STS_DEFAULT_DURATION. Returns 0 with *out (temporary:
 * expiration set), -EACCES when STS refuses (AccessDenied, InvalidClientTokenId, ...),
 * -EINVAL for a bad parameter (ValidationError, a malformed role ARN), -EIO for a reply
 * without usable credentials, the transport's -errno (-ETIMEDOUT, -ECONNREFUSED, ...),
 * -ENOMEM. */
int aws_sts_assume_role(const struct aws_sts_conf *conf, const struct aws_creds *source,
                        const char *role_arn, const char *session_name, const char *external_id,
                        int duration_s, struct aws_creds *out, char *err, size_t errlen);

/* AssumeRoleWithWebIdentity of role_arn with the token read now from token_file (tokens are
 * rotated: read at every call). Returns as aws_sts_assume_role(), and -ENOENT when the token
 * file cannot be read, -EINVAL when it is empty. */
int aws_sts_assume_role_web_identity(const struct aws_sts_conf *conf, const char *role_arn,
                                     const char *session_name, const char *token_file,
                                     int duration_s, struct aws_creds *out, char *err,
                                     size_t errlen);

#endif
