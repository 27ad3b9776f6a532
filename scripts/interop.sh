#!/usr/bin/env bash
# scripts/interop.sh OURS [PINGPONG-OPTIONS...]
#
# Runs our rc_pingpong example (the executable OURS) against itself and against rdma-core's C
# ibv_rc_pingpong, on one machine over 127.0.0.1: ours/ours, ours server with the C client, the
# C server with our client. Each side runs under `timeout 120`, the server first and the client
# 1.5 s later. Both sides get PINGPONG-OPTIONS (ibv_rc_pingpong's: -d -i -s -m -r -n -l -g);
# -p PORT is the first pair's port (default 18515), the next pairs take the ports after it, so
# no pair meets the previous one's TIME_WAIT. Inside the Soft-RoCE guest (scripts/rdma-vm) the
# options start with `-d rxe0 -g $RDMA_VM_GID_INDEX`: RoCE needs a GID. Exits non-zero if a pair
# fails.
set -euo pipefail

C=ibv_rc_pingpong
[ $# -gt 0 ] || { echo "usage: $0 OURS [PINGPONG-OPTIONS...]" >&2; exit 2; }
OURS=$1
shift
[ -x "$OURS" ] || { echo "interop: $OURS is not an executable (cargo build --release --example rc_pingpong)" >&2; exit 2; }
command -v "$C" >/dev/null || { echo "interop: $C not found (Debian: ibverbs-utils)" >&2; exit 2; }

OPTS=() PORT=18515
[ -z "${RDMA_VM_GID_INDEX:-}" ] || OPTS=(-d rxe0 -g "$RDMA_VM_GID_INDEX")
while [ $# -gt 0 ]; do
  if [ "$1" = -p ]; then PORT=${2:?interop: -p needs a port}; shift 2; else OPTS+=("$1"); shift; fi
done
[[ $PORT =~ ^[0-9]+$ ]] || { echo "interop: bad port: $PORT" >&2; exit 2; }

LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT
PASS=0 FAIL=0

name() { if [ "$1" = "$OURS" ]; then echo "ours"; else echo "C $C"; fi; }
pair() {  # pair SERVER CLIENT: one ping-pong on the next port
  local srv=$1 cli=$2 spid src=0 crc=0 what
  what="server $(name "$srv"), client $(name "$cli")"
  echo "=== $what, port $PORT"
  timeout 120 "$srv" -p "$PORT" "${OPTS[@]}" > "$LOG/server" 2>&1 & spid=$!
  sleep 1.5
  timeout 120 "$cli" -p "$PORT" "${OPTS[@]}" 127.0.0.1 > "$LOG/client" 2>&1 || crc=$?
  wait "$spid" || src=$?
  echo "--- server (exit $src)"; cat "$LOG/server"
  echo "--- client (exit $crc)"; cat "$LOG/client"
  if [ $src = 0 ] && [ $crc = 0 ]; then
    PASS=$((PASS + 1)); echo "PASS: $what"
  else
    FAIL=$((FAIL + 1)); echo "FAIL: $what"
  fi
  PORT=$((PORT + 1))
}

pair "$OURS" "$OURS"
pair "$OURS" "$C"
pair "$C" "$OURS"
echo "$PASS passed, $FAIL failed"
[ $FAIL = 0 ]
