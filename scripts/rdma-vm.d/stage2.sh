#!/bin/bash
# Runs in the guest as root, chrooted into the overlay of the host's root, from the run
# directory (/run/rdma-vm) that scripts/rdma-vm fills. Creates the soft RDMA devices on the
# netdevs init.sh made, then runs the command. Bash builtins where possible: every exec costs
# 0.1-0.2 s under TCG.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
OUT=/run/rdma-vm
read -r T0 _ < /proc/uptime

# Settings and the passed-through environment, written by scripts/rdma-vm.
# shellcheck source=/dev/null
. "$OUT/env"

# The command's stdout/stderr go to the virtio-serial ports that the host streams.
STDOUT=/dev/console STDERR=/dev/console
for p in /sys/class/virtio-ports/*; do
  read -r n < "$p/name" || continue
  case $n in
    rdmavm.stdout) STDOUT=/dev/${p##*/} ;;
    rdmavm.stderr) STDERR=/dev/${p##*/} ;;
  esac
done
fail() { echo "[rdma-vm] $*" > "$STDERR"; : > "$OUT/setup_failed"; exit 125; }

ulimit -l unlimited          # RLIMIT_MEMLOCK (default 8 MiB): ibv_reg_mr pins memory
ulimit -n 65536

RDMA_VM_GID_INDEX=
rxes=0
for d in $RDMA_VM_DEVICES; do
  case $d in
    rxe) if [ $rxes = 0 ]; then
           rdma link add rxe0 type rxe netdev rdma0 || fail "rdma link add rxe0 failed"
         else
           # The second rxe's netdev, rdma1 (init.sh makes rdma0 only; siw, which has rdma1
           # otherwise, is not asked for beside two rxe), at rdma0's MTU.
           read -r mtu < /sys/class/net/rdma0/mtu
           { ip link add rdma1 type dummy && ip link set rdma1 mtu "$mtu" up &&
             ip addr add "$RDMA_VM_SIW_IPV4/24" dev rdma1; } || fail "cannot set up netdev rdma1"
           rdma link add rxe1 type rxe netdev rdma1 || fail "rdma link add rxe1 failed"
         fi
         rxes=$((rxes + 1)) ;;
    siw) rdma link add siw0 type siw netdev rdma1 || fail "rdma link add siw0 failed" ;;
  esac
done

# An rxe device gets the RoCE v2 GID of its netdev's IPv4 address (::ffff:a.b.c.d)
# asynchronously after the link is created: wait for it (up to 10 s); its index goes in GID.
exec {sleepfd}<> <(:)    # a pipe that never has data: "read -t" on it sleeps without an exec
roce_v2_gid() {  # roce_v2_gid DEVICE IPV4
  local a b c d want g v t P=/sys/class/infiniband/$1/ports/1
  IFS=. read -r a b c d <<< "$2"
  printf -v want '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d"
  GID=
  for _ in {1..200}; do
    for g in "$P"/gids/*; do
      read -r v < "$g" && [ "$v" = "$want" ] || continue
      read -r t < "$P/gid_attrs/types/${g##*/}" && [ "$t" = "RoCE v2" ] && { GID=${g##*/}; return; }
    done
    read -r -t 0.05 -u "$sleepfd" || true
  done 2>/dev/null
  fail "$1 has no RoCE v2 GID for $2 after 10 s"
}
if [ $rxes -ge 1 ]; then
  roce_v2_gid rxe0 "$RDMA_VM_IPV4"
  RDMA_VM_GID_INDEX=$GID
fi
[ $rxes -lt 2 ] || roce_v2_gid rxe1 "$RDMA_VM_SIW_IPV4"
export RDMA_VM_DEVICES RDMA_VM_IPV4 RDMA_VM_SIW_IPV4 RDMA_VM_GID_INDEX
# The project's device tests must fail, not skip, when they find no device in here.
export RDMA_VERBS_REQUIRE_DEVICE=1

cd "$RDMA_VM_CWD" || fail "cannot enter $RDMA_VM_CWD"
read -r T1 _ < /proc/uptime
# The guest's watchdog: past RDMA_VM_GUEST_TIMEOUT (set by scripts/rdma-vm, shorter than the
# host's timeout) it records the processes, with what each waits in, and the kernel log's
# tail into the run directory (scripts/rdma-vm prints it: the stderr port is the command's
# until it exits), then kills the command's session; so a hung command leaves a trace before
# the host gives up on the whole guest.
GT=${RDMA_VM_GUEST_TIMEOUT:-840}
setsid bash "$OUT/cmd" > "$STDOUT" 2> "$STDERR" < /dev/null &
cmd=$!
(
  sleep "$GT"
  kill -0 "$cmd" 2>/dev/null || exit 0
  {
    echo "[rdma-vm] watchdog: the command still runs after $GT s in the guest; killing it"
    echo "[rdma-vm] ---- ps (kernel threads left out)"
    ps -N --ppid 2 -p 2 -o pid,ppid,stat,etime,wchan:24,args
    echo "[rdma-vm] ---- dmesg | tail -n 40"
    dmesg | tail -n 40
  } > "$OUT/watchdog" 2>&1
  kill -TERM -- "-$cmd" 2>/dev/null
  sleep 5
  kill -KILL -- "-$cmd" 2>/dev/null
) &
watchdog=$!
wait "$cmd"
rc=$?
kill "$watchdog" 2>/dev/null
[ ! -f "$OUT/watchdog" ] || rc=124
read -r T2 _ < /proc/uptime
if [ "${RDMA_VM_VERBOSE:-0}" = 1 ]; then
  echo "guest uptime: stage2 start $T0 s, command start $T1 s, command end $T2 s" > "$OUT/uptime"
  dmesg > "$OUT/dmesg"
fi
exit $rc
