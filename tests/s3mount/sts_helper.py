#!/usr/bin/python3
"""sts_helper.py CONFIG.json - a credential_process program for the credentials tests: asks the
radosgw of the `rgw` fixture (its real STS) for temporary credentials with AssumeRole and prints
them in credential_process's JSON format.

CONFIG.json: {"endpoint", "access", "secret", "role_arn", "region",
              "life": seconds or null (report an Expiration this soon instead of the real one,
                      so that a test sees refreshes without waiting for STS's 15-minute minimum),
              "count_file": each run adds one to the number in it,
              "issued_file": each set issued is appended (access key, secret, token), so the
                             test can look for them where they must never appear,
              "mode": "ok" | "garbage" | "fail" | "hang"}
Also importable: issue(cfg) returns the dict of one set."""

import datetime
import json
import sys
import time

import boto3


def issue(cfg, life=None):
    sts = boto3.client("sts", endpoint_url=cfg["endpoint"], region_name=cfg.get("region", "us-east-1"),
                       aws_access_key_id=cfg["access"], aws_secret_access_key=cfg["secret"])
    r = sts.assume_role(RoleArn=cfg["role_arn"], RoleSessionName="pagefs-test",
                        DurationSeconds=900)
    c = r["Credentials"]
    exp = c["Expiration"]
    if life is not None:
        exp = min(exp, datetime.datetime.now(datetime.timezone.utc)
                  + datetime.timedelta(seconds=life))
    out = {"Version": 1, "AccessKeyId": c["AccessKeyId"], "SecretAccessKey": c["SecretAccessKey"],
           "SessionToken": c["SessionToken"],
           "Expiration": exp.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if cfg.get("issued_file"):
        with open(cfg["issued_file"], "a") as f:
            f.write(json.dumps(out) + "\n")
    return out


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    if cfg.get("count_file"):
        try:
            with open(cfg["count_file"]) as f:
                n = int(f.read() or 0)
        except FileNotFoundError:
            n = 0
        with open(cfg["count_file"], "w") as f:
            f.write(str(n + 1))
    mode = cfg.get("mode", "ok")
    if mode == "garbage":
        print("this is not json")
        return 0
    if mode == "fail":
        print("sts_helper: the identity provider said no", file=sys.stderr)
        return 3
    if mode == "hang":
        time.sleep(600)
        return 0
    print(json.dumps(issue(cfg, cfg.get("life"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
