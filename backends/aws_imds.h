/*
 * aws_imds.h - credentials served over HTTP by the platform: the container endpoint (ECS
 * tasks, EKS Pod Identity) and the EC2 instance metadata service (IMDSv2).
 *
 * Container: $AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (appended to http://169.254.170.2) or
 * $AWS_CONTAINER_CREDENTIALS_FULL_URI. A full URI must be https (any host), or http to a
 * loopback address (127.0.0.0/8, ::1) or to one of the documented link-local hosts
 * 169.254.170.2, 169.254.170.23 and fd00:ec2::23, or to a name all of whose addresses are
 * such (as aws-c-auth and the Rust SDK check; the request then goes to those addresses);
 * others are refused. The Authorization header is the contents of
 * $AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read at every call: it is rotated), else
 * $AWS_CONTAINER_AUTHORIZATION_TOKEN; a token with CR or LF is refused. The reply is JSON:
 * {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"}; an endpoint serving static
 * credentials (Greengrass, a local agent) may leave out Token and Expiration, and then they
 * do not expire.
 *
 * Instance metadata: base $AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254
 * (http://[fd00:ec2::254] when $AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE is IPv6); off when
 * $AWS_EC2_METADATA_DISABLED is "true". IMDSv2: PUT /latest/api/token with
 * X-aws-ec2-metadata-token-ttl-seconds: 21600, then with X-aws-ec2-metadata-token: GET
 * /latest/meta-data/iam/security-credentials/ (the role name, first line) and GET
 * .../security-credentials/ROLE, JSON {"Code": "Success", "AccessKeyId", "SecretAccessKey",
 * "Token", "Expiration"}. A token PUT answered 403, 404 or 405 falls back to IMDSv1 (the
 * same GETs without a token), as the SDKs do. $AWS_METADATA_SERVICE_TIMEOUT (seconds,
 * default 1) bounds each request and $AWS_METADATA_SERVICE_NUM_ATTEMPTS (default 1) the
 * attempts.
 *
 * Requests go over the one HTTP request path (curl_common.h), JSON is read with json-c. No
 * message contains a key, a secret, a session token or the authorization token.
 */
#ifndef PAGEFS_AWS_IMDS_H
#define PAGEFS_AWS_IMDS_H

#include "backends/aws_creds.h"

#include <stddef.h>

/* Container credentials. timeout_ms bounds the call (<= 0: 5 s). Returns 0 with *out;
 * -ENOENT when neither variable is set (not configured: the chain goes on); -EINVAL for a
 * full URI that is not allowed or a bad token; -EACCES when the endpoint answers 401/403;
 * -EIO for a reply that is not the JSON above (or any other status, 404 included); the
 * transport's -errno; -ENOMEM. */
int aws_creds_from_container(int timeout_ms, struct aws_creds *out, char *err, size_t errlen);

/* The URL aws_creds_from_container() would fetch, built from the environment and checked as
 * above (a relative URI must begin with '/'; a full URI's host name is resolved to check its
 * addresses), without connecting to it. Returns 0 with the URL in url[0..cap); -ENOENT when
 * neither variable is set; -EINVAL (with err) for a URI that is malformed or not allowed;
 * -ENAMETOOLONG when cap is too small; -ENOMEM. The URL may carry a capability (ECS's
 * relative URI): show its host only. */
int aws_container_url(char *url, size_t cap, char *err, size_t errlen);

/* Instance-metadata credentials. Returns 0 with *out; -ENOENT when disabled, when no
 * endpoint answers (refused, unreachable, timed out: not on EC2) or when the instance has no
 * role; -EIO for a bad reply (a Code other than "Success" too); -EACCES; -EINVAL for a bad
 * setting (endpoint, endpoint mode, timeout, attempts); -ENOMEM. */
int aws_creds_from_imds(struct aws_creds *out, char *err, size_t errlen);

#endif
