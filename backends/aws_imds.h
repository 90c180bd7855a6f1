/*
 * aws_imds.h - credentials served over HTTP by the platform: the container endpoint (ECS
 * tasks, EKS Pod Identity) and the EC2 instance metadata service (IMDSv2).
 *
 * Container: $AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (appended to http://169.254.170.2) or
 * $AWS_CONTAINER_CREDENTIALS_FULL_URI. A full URI must be https (any host), or http to a
 * loopback address (127.0.0.0/8, ::1, or a name that resolves only to loopback) or to one
 * of the documented link-local hosts 169.254.170.2, 169.254.170.23 and fd00:ec2::23; others
 * are refused. The Authorization header is the contents of
 * $AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read at every call: it is rotated), else
 * $AWS_CONTAINER_AUTHORIZATION_TOKEN; a token with CR or LF is refused. The reply is JSON:
 * {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"}.
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
 * -EIO for a reply that is not the JSON above; the transport's -errno; -ENOMEM. */
int aws_creds_from_container(int timeout_ms, struct aws_creds *out, char *err, size_t errlen);

/* Instance-metadata credentials. Returns 0 with *out; -ENOENT when disabled, when no
 * endpoint answers (refused, unreachable, timed out: not on EC2) or when the instance has no
 * role; -EIO for a bad reply; -EACCES; -ENOMEM. */
int aws_creds_from_imds(struct aws_creds *out, char *err, size_t errlen);

#endif
