/*
 * s3_xml.h - the network-free half of the S3 backend: parsing ListObjectsV2 and error
 * replies (expat), S3's URL decoding, timestamps, and S3's refinement of the errno mapping
 * (curl_common.h). s3.c does the I/O; everything here is a pure function of its arguments,
 * so the unit tests exercise it without a server.
 */
#ifndef PAGEFS_S3_XML_H
#define PAGEFS_S3_XML_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"

/* Parse one ListObjectsV2 reply into `out` (which must be zeroed; freed by the caller with
 * backend_list_page_clear(), also on error). Keys and prefixes are URL-decoded when the
 * reply says <EncodingType>url</EncodingType>. Every key and prefix must start with
 * `strip` (the source prefix, "" for none), which is removed; an object whose key equals
 * `strip` (the source root's own directory marker) is skipped. Contents become objects
 * (size, mtime from LastModified, version = ETag with its quotes), CommonPrefixes become
 * is_prefix entries. If IsTruncated is true, out->next_token is NextContinuationToken.
 * Returns 0, -EIO for a malformed reply (bad XML, wrong root element, a field that does not
 * parse, a key outside `strip`, truncated without a token), -ENOMEM. */
int s3_xml_parse_list(const char *xml, size_t len, const char *strip,
                      struct backend_list_page *out);

/* The <Code> of an S3 <Error> reply (also radosgw's STS and IAM errors), or of an AWS STS or
 * IAM <ErrorResponse><Error> reply, copied into `code` (empty string when the body is not an
 * error document). Never fails; malformed input just yields "". */
void s3_xml_error_code(const char *xml, size_t len, char *code, size_t codelen);

struct aws_creds;

/* The temporary credentials of an STS reply (AssumeRole, AssumeRoleWithWebIdentity): the
 * <Credentials> under the root's *Result element (<AssumeRoleResponse><AssumeRoleResult>
 * <Credentials>), with its AccessKeyId, SecretAccessKey, SessionToken and Expiration
 * (aws_time_parse()); other elements are ignored. Returns 0 with *out replaced (its old
 * strings wiped), -EIO when the reply is malformed or lacks a field (each must be given once
 * and be non-empty), -ENOMEM; on error *out is left as it was. The secrets' copies made while
 * parsing are wiped. */
int s3_xml_sts_credentials(const char *xml, size_t len, struct aws_creds *out);

/* Decode %XX escapes and '+' (as a space) in place, the encoding S3 uses for
 * encoding-type=url (url_decode_to(), urlcode.h). Returns 0, or -EIO for a bad escape or an
 * encoded NUL. */
int s3_url_decode(char *s);

/* ISO-8601 UTC timestamp as S3 sends it ("2024-05-01T12:34:56.789Z", fraction optional)
 * to nanoseconds since the epoch. Returns 0 or -EIO. */
int s3_parse_iso8601(const char *s, int64_t *ns);

/* The errno of an S3 request: curl_map_error() (curl_common.h, the mapping of both HTTP
 * backends: `curl_code` a CURLcode, `http_status` the reply status, `os_errno`
 * CURLINFO_OS_ERRNO), except that a 400 whose S3 error <Code> (`s3_code`, NULL or "" if
 * none) is a credentials problem (ExpiredToken, InvalidToken, TokenRefreshRequired,
 * InvalidAccessKeyId) is -EACCES rather than -EINVAL. */
int s3_map_error(int curl_code, long http_status, long os_errno, const char *s3_code);

#endif
