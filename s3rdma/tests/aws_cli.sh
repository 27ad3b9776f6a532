#!/usr/bin/env bash
# s3rdma/tests/aws_cli.sh S3RDMA-BINARY - acceptance test with S3 clients nobody here wrote:
# the AWS CLI and boto3 (pip-installed into a cached venv) against a running `s3rdma serve`.
# Buckets, objects with `/` in their keys, listings (prefix, delimiter, pages), ranged GETs, a
# multipart upload (`aws s3 cp` of a file above the multipart threshold), deletes, a presigned
# URL, refused credentials, a byte flipped on disk that GET must refuse to serve, and HTTPS
# (with a certificate made by openssl).
set -euo pipefail
BIN=$(realpath "${1:?usage: aws_cli.sh S3RDMA-BINARY}")
# The clients, pinned (a new release changes what is tested only when the pins move), in a venv
# that outlives a CI clone; it is rebuilt when the pins change.
CLIENTS="awscli==1.46.3 boto3==1.44.18"
VENV=${S3RDMA_CLIENT_VENV:-/var/cache/s3rdma-clients}
if [ "$(cat "$VENV/.s3rdma-clients" 2>/dev/null)" != "$CLIENTS" ]; then
  echo "==> pip install $CLIENTS into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || { echo "aws_cli.sh: python3 -m venv failed; install python3-venv (scripts/deps does)" >&2; exit 1; }
  # shellcheck disable=SC2086  # (the pins are separate arguments)
  "$VENV/bin/pip" install -q --disable-pip-version-check $CLIENTS
  echo "$CLIENTS" > "$VENV/.s3rdma-clients"
fi
AWS=("$VENV/bin/aws")
WORK=$(mktemp -d)
SERVER=
cleanup() { [ -z "$SERVER" ] || kill "$SERVER" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
fail() { echo "aws_cli.sh: FAILED: $*" >&2; exit 1; }

mkdir "$WORK/root"
echo '{"access_key_id": "s3rdma-test", "secret_access_key": "s3rdma-test-secret"}' > "$WORK/creds.json"
"$BIN" serve --root "$WORK/root" --listen 127.0.0.1:0 --credentials "$WORK/creds.json" > "$WORK/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do grep -q 'on http://' "$WORK/server.log" && break; sleep 0.1; done
ENDPOINT=$(sed -n 's|.* on \(http://[^ ]*\) .*|\1|p' "$WORK/server.log")
[ -n "$ENDPOINT" ] || { cat "$WORK/server.log" >&2; fail "the server did not start"; }
cat "$WORK/server.log"

export AWS_ACCESS_KEY_ID=s3rdma-test AWS_SECRET_ACCESS_KEY=s3rdma-test-secret AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE="$WORK/aws-config" AWS_SHARED_CREDENTIALS_FILE=/dev/null
printf '[default]\ns3 =\n  addressing_style = path\n' > "$AWS_CONFIG_FILE"
s3() { "${AWS[@]}" --endpoint-url "$ENDPOINT" "$@"; }

echo "==> buckets"
s3 s3 mb s3://acceptance
s3 s3 ls | grep -qw acceptance || fail "the bucket is not listed"

echo "==> put, list, get"
head -c 3000 /dev/urandom > "$WORK/small"
for key in dir/a.bin dir/sub/b.bin top.bin; do s3 s3 cp --quiet "$WORK/small" "s3://acceptance/$key"; done
[ "$(s3 s3 ls --recursive s3://acceptance | wc -l)" = 3 ] || fail "three objects are not listed"
s3 s3api list-objects-v2 --bucket acceptance --delimiter / --query 'CommonPrefixes[].Prefix' --output text | grep -qx 'dir/' ||
  fail "no common prefix dir/"
s3 s3api list-objects-v2 --bucket acceptance --prefix dir/ --delimiter / --output json > "$WORK/list.json"
"$VENV/bin/python" - "$WORK/list.json" <<'PY'
import json, sys
listing = json.load(open(sys.argv[1]))
assert [o["Key"] for o in listing["Contents"]] == ["dir/a.bin"], listing
assert [p["Prefix"] for p in listing["CommonPrefixes"]] == ["dir/sub/"], listing
PY
s3 s3 cp --quiet s3://acceptance/dir/sub/b.bin "$WORK/got"
cmp "$WORK/small" "$WORK/got" || fail "GET returned other bytes"

echo "==> multipart upload (aws s3 cp above the 8 MiB threshold)"
head -c $((20 * 1024 * 1024 + 12345)) /dev/urandom > "$WORK/big"
s3 s3 cp --quiet "$WORK/big" s3://acceptance/big/object.bin
etag=$(s3 s3api head-object --bucket acceptance --key big/object.bin --query ETag --output text)
case $etag in *-3\"|*-3) ;; *) fail "the multipart ETag $etag is not of 3 parts";; esac
s3 s3 cp --quiet s3://acceptance/big/object.bin "$WORK/big.got"
cmp "$WORK/big" "$WORK/big.got" || fail "the multipart object came back different"

echo "==> boto3: ranges, pages, presigned URL, abort"
"$VENV/bin/python" - "$ENDPOINT" "$WORK/big" <<'PY'
import sys, urllib.request
import boto3
from botocore.config import Config
endpoint, big = sys.argv[1], open(sys.argv[2], "rb").read()
s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"}))
for rng, want in [("bytes=0-99", big[:100]), ("bytes=1048570-1048589", big[1048570:1048590]),
                  ("bytes=-7", big[-7:]), (f"bytes={len(big) - 5}-", big[-5:])]:
    got = s3.get_object(Bucket="acceptance", Key="big/object.bin", Range=rng)
    assert got["Body"].read() == want, rng
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206, rng
keys = [f"page/{i:02}" for i in range(7)]
for key in keys:
    s3.put_object(Bucket="acceptance", Key=key, Body=key.encode())
pages = s3.get_paginator("list_objects_v2").paginate(Bucket="acceptance", Prefix="page/", PaginationConfig={"PageSize": 3})
listed = [[o["Key"] for o in page.get("Contents", [])] for page in pages]
assert listed == [keys[0:3], keys[3:6], keys[6:]], listed
url = s3.generate_presigned_url("get_object", Params={"Bucket": "acceptance", "Key": "page/03"}, ExpiresIn=60)
assert urllib.request.urlopen(url).read() == b"page/03"
up = s3.create_multipart_upload(Bucket="acceptance", Key="aborted")
s3.upload_part(Bucket="acceptance", Key="aborted", UploadId=up["UploadId"], PartNumber=1, Body=b"x")
s3.abort_multipart_upload(Bucket="acceptance", Key="aborted", UploadId=up["UploadId"])
try:
    s3.head_object(Bucket="acceptance", Key="aborted")
    raise AssertionError("an aborted upload left an object")
except s3.exceptions.ClientError as e:
    assert e.response["Error"]["Code"] in ("404", "NoSuchKey"), e.response
for key in keys:
    s3.delete_object(Bucket="acceptance", Key=key)
# Digests that do not match the body: refused, nothing stored.
import base64, hashlib
for wrong in [{"ContentMD5": base64.b64encode(hashlib.md5(b"other").digest()).decode()},
              {"ChecksumSHA256": base64.b64encode(hashlib.sha256(b"other").digest()).decode()}]:
    try:
        s3.put_object(Bucket="acceptance", Key="bad-digest", Body=b"body", **wrong)
        raise AssertionError(f"a wrong {wrong} was accepted")
    except s3.exceptions.ClientError as e:
        assert e.response["Error"]["Code"] == "BadDigest", e.response
assert "Contents" not in s3.list_objects_v2(Bucket="acceptance", Prefix="bad-digest")
print("boto3: ranges, 3 pages, presigned GET, abort and wrong digests as expected")
PY

echo "==> wrong credentials are refused"
if AWS_SECRET_ACCESS_KEY=wrong s3 s3 ls s3://acceptance > "$WORK/out" 2>&1; then fail "a wrong secret was accepted"; fi
grep -q 'SignatureDoesNotMatch\|AccessDenied\|403' "$WORK/out" || { cat "$WORK/out"; fail "no 403 for a wrong secret"; }
if AWS_ACCESS_KEY_ID=nobody s3 s3 ls s3://acceptance > "$WORK/out" 2>&1; then fail "an unknown access key was accepted"; fi
"$VENV/bin/python" - "$ENDPOINT/acceptance/top.bin" <<'PY' || fail "an unsigned GET was not refused with 403"
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1])
    sys.exit(1)
except urllib.error.HTTPError as e:
    sys.exit(e.code != 403)
PY

echo "==> a byte flipped on disk is never served"
file="$WORK/root/acceptance/big/object.bin"
"$VENV/bin/python" - "$file" $((15 * 1024 * 1024)) <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2]))
    byte = f.read(1)[0]
    f.seek(int(sys.argv[2]))
    f.write(bytes([byte ^ 0x01]))
PY
if s3 s3 cp --quiet s3://acceptance/big/object.bin "$WORK/corrupt" 2> "$WORK/out"; then
  fail "a corrupt object was served whole"
fi
# A range in the intact first blocks is still served; one in the flipped block is not.
s3 s3api get-object --bucket acceptance --key big/object.bin --range bytes=0-9 "$WORK/head" > /dev/null
if s3 s3api get-object --bucket acceptance --key big/object.bin --range bytes=$((15 * 1024 * 1024))-$((15 * 1024 * 1024 + 9)) \
     "$WORK/flipped" > "$WORK/out" 2>&1; then
  fail "a range over the flipped byte was served"
fi
grep -q InternalError "$WORK/out" || { cat "$WORK/out"; fail "no InternalError for the flipped block"; }
grep -q 'fail their stored CRC64NVME' "$WORK/server.log" || fail "the server did not log the corruption"

echo "==> HTTPS (serve --tls-cert/--tls-key; the AWS CLI trusting its certificate)"
mkdir "$WORK/tls-root"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2> /dev/null
"$BIN" serve --root "$WORK/tls-root" --listen 127.0.0.1:0 --credentials "$WORK/creds.json" --rdma off \
  --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" > "$WORK/tls.log" 2>&1 &
TLS_SERVER=$!
for _ in $(seq 100); do grep -q 'on https://' "$WORK/tls.log" && break; sleep 0.1; done
TLS_ENDPOINT=$(sed -n 's|.* on \(https://[^ ]*\) .*|\1|p' "$WORK/tls.log")
[ -n "$TLS_ENDPOINT" ] || { cat "$WORK/tls.log" >&2; kill "$TLS_SERVER"; fail "the HTTPS server did not start"; }
tls_ok=0
"${AWS[@]}" --endpoint-url "$TLS_ENDPOINT" --ca-bundle "$WORK/cert.pem" s3 mb s3://secure > /dev/null &&
  "${AWS[@]}" --endpoint-url "$TLS_ENDPOINT" --ca-bundle "$WORK/cert.pem" s3 ls | grep -qw secure && tls_ok=1
kill "$TLS_SERVER"
[ $tls_ok = 1 ] || { cat "$WORK/tls.log" >&2; fail "the AWS CLI could not use the HTTPS server"; }

echo "==> deletes"
s3 s3 rm --quiet --recursive s3://acceptance
[ -z "$(s3 s3 ls --recursive s3://acceptance)" ] || fail "objects are left after rm"
s3 s3 rb s3://acceptance
if s3 s3 ls | grep -qw acceptance; then fail "the deleted bucket is listed"; fi
echo "aws_cli.sh: all passed (aws $("${AWS[@]}" --version 2>&1 | cut -d' ' -f1), boto3 $("$VENV/bin/python" -c 'import boto3; print(boto3.__version__)'))"
