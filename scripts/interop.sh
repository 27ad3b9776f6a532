#!/usr/bin/env bash
# scripts/interop.sh OURS [OPTIONS...]
#
# Runs one of our programs (the executable OURS) beside its C counterpart, on one machine over
# 127.0.0.1, each side under `timeout 120`, the server first and the client once the server
# listens on its TCP port:
# - rc_pingpong (an example of rdma-verbs): against itself and against rdma-core's ibv_rc_pingpong both ways (ours/ours,
#   ours server with the C client, the C server with our client); it is wire-compatible.
#   OPTIONS are ibv_rc_pingpong's (-d -i -s -m -r -n -l -g); default port 18515.
# - write_bw (a tool of perftest/): against itself, then perftest's ib_write_bw against itself for comparison (the two
#   do not share a wire format). OPTIONS are perftest's (-d -i -s -n -q -x ...); default port
#   18520; ib_write_bw also gets -F (no CPU-frequency check).
# Both sides get OPTIONS; -p PORT is the first pair's port, the next pairs take the ports after
# it, so no pair meets the previous one's TIME_WAIT. Inside the Soft-RoCE guest
# (scripts/rdma-vm) the options start with `-d rxe0` and the GID index ($RDMA_VM_GID_INDEX): RoCE
# needs a GID. Exits non-zero if a pair fails.
set -euo pipefail

[ $# -gt 0 ] || { echo "usage: $0 OURS [OPTIONS...]" >&2; exit 2; }
OURS=$1
shift
[ -x "$OURS" ] || {
  echo "interop: $OURS is not an executable (cargo build --release --example rc_pingpong; cargo build --release -p rdma-verbs-perftest --bin write_bw)" >&2
  exit 2
}
case $(basename "$OURS") in
  rc_pingpong) C=ibv_rc_pingpong GID=-g PORT=18515 C_OPTS=() PACKAGE=ibverbs-utils ;;
  write_bw) C=ib_write_bw GID=-x PORT=18520 C_OPTS=(-F) PACKAGE=perftest ;;
  *) echo "interop: no C counterpart known for $OURS (rc_pingpong or write_bw)" >&2; exit 2 ;;
esac
command -v "$C" >/dev/null || { echo "interop: $C not found (Debian: $PACKAGE)" >&2; exit 2; }

OPTS=()
[ -z "${RDMA_VM_GID_INDEX:-}" ] || OPTS=(-d rxe0 "$GID" "$RDMA_VM_GID_INDEX")
while [ $# -gt 0 ]; do
  if [ "$1" = -p ]; then PORT=${2:?interop: -p needs a port}; shift 2; else OPTS+=("$1"); shift; fi
done
[[ $PORT =~ ^[0-9]+$ ]] || { echo "interop: bad port: $PORT" >&2; exit 2; }

LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT
PASS=0 FAIL=0

name() { if [ "$1" = "$OURS" ]; then echo "ours"; else echo "C $C"; fi; }
side() {  # side EXE LOG [HOST]: one side on this pair's port; the C tool gets its extras
  local exe=$1 log=$2 extra=()
  shift 2
  [ "$exe" = "$OURS" ] || extra=("${C_OPTS[@]}")
  timeout 120 "$exe" -p "$PORT" "${OPTS[@]}" "${extra[@]}" "$@" > "$log" 2>&1
}
listening() {  # listening PID: waits (up to 20 s) until this pair's port is listened on
  local i
  command -v ss >/dev/null || { sleep 1.5; return; }   # (iproute2's ss; else a fixed pause)
  for ((i = 0; i < 200; i++)); do
    ss -Hltn "sport = :$PORT" 2>/dev/null | grep -q . && return
    kill -0 "$1" 2>/dev/null || return   # the server is gone: its log will say why
    sleep 0.1
  done
}
pair() {  # pair SERVER CLIENT: one run on the next port
  local srv=$1 cli=$2 spid src=0 crc=0 what
  what="server $(name "$srv"), client $(name "$cli")"
  echo "=== $what, port $PORT"
  side "$srv" "$LOG/server" & spid=$!
  listening "$spid"
  side "$cli" "$LOG/client" 127.0.0.1 || crc=$?
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
if [ "$C" = ibv_rc_pingpong ]; then
  pair "$OURS" "$C"
  pair "$C" "$OURS"
else
  pair "$C" "$C"
fi
echo "$PASS passed, $FAIL failed"
[ $FAIL = 0 ]
