#!/bin/busybox sh
# shellcheck shell=dash
# PID 1 of the guest, in the initramfs built by setup.sh. Busybox only: every dynamically
# linked exec over 9p costs 0.1-0.2 s under TCG, and udev/systemd would cost seconds.
# - loads the 9p, overlayfs and RDMA modules (they are in the initramfs)
# - creates the dummy netdevs the soft RDMA devices sit on (stage2.sh creates the devices)
# - mounts the host's / (9p, read-only) under a tmpfs overlay, so the guest can write anywhere
#   without touching the host; the run directory and the working directory are shared rw
# - chroots into it to run stage2.sh, records its exit code and powers off
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

R=/newroot
# Without an exit code from the guest, scripts/rdma-vm exits 125 and shows the console.
die() { echo "rdma-vm init: $*" > /dev/console; poweroff -f; }

# Settings from the kernel command line (scripts/rdma-vm sets them).
WORK='' MTU='' IPV4='' SIW_IPV4='' DEVICES=''
for a in $(cat /proc/cmdline); do
  case "$a" in
    rdmavm.work=*) WORK=${a#*=} ;;
    rdmavm.mtu=*) MTU=${a#*=} ;;
    rdmavm.ipv4=*) IPV4=${a#*=} ;;
    rdmavm.siw_ipv4=*) SIW_IPV4=${a#*=} ;;
    rdmavm.devices=*) DEVICES=$(echo "${a#*=}" | tr , ' ') ;;
  esac
done

modprobe -a virtio_pci virtio_mmio 9pnet_virtio 9p virtio_console overlay || die "modprobe (fs) failed"
# crc32/crc32c for rxe (ICRC) and siw (MPA CRC), through the crypto API: not autoloaded here
modprobe -a crc32_pclmul crc32c_intel crc32_generic crc32c_generic 2>/dev/null
modprobe -a ib_core ib_uverbs ib_umad rdma_cm rdma_ucm || die "modprobe (rdma core) failed"
modprobe dummy numdummies=0 || die "modprobe dummy failed"

# A dummy netdev, not lo: on lo rdma_cm fails with "rdma_resolve_route: No such device".
# siw gets its own netdev and address, because rdma_cm picks the device by IP address.
netdev() {  # netdev NAME IPV4
  ip link add "$1" type dummy && ip link set "$1" mtu "$MTU" up && ip addr add "$2/24" dev "$1" ||
    die "cannot set up netdev $1"
}
ip link set lo up
for d in $DEVICES; do
  case $d in
    rxe) modprobe rdma_rxe || die "modprobe rdma_rxe failed"; netdev rdma0 "$IPV4" ;;
    siw) modprobe siw || die "modprobe siw failed"; netdev rdma1 "$SIW_IPV4" ;;
  esac
done

O9P=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o "$O9P,ro,cache=loose" hostroot /lower || die "mount hostroot failed"
mount -t tmpfs -o mode=755 tmpfs /ovl
mkdir -p /ovl/upper /ovl/work
mount -t overlay -o lowerdir=/lower,upperdir=/ovl/upper,workdir=/ovl/work overlay $R || die "overlay failed"

mount --move /proc $R/proc
mount --move /sys $R/sys
mount --move /dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm
ln -sf /proc/self/fd $R/dev/fd            # devtmpfs lacks these (udev normally adds them);
ln -sf /proc/self/fd/0 $R/dev/stdin       # bash process substitution <(...) needs /dev/fd
ln -sf /proc/self/fd/1 $R/dev/stdout
ln -sf /proc/self/fd/2 $R/dev/stderr
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t tmpfs -o mode=755 tmpfs $R/run
mkdir -p $R/run/rdma-vm $R/run/lock
mount -t 9p -o "$O9P,rw" rdmavmout $R/run/rdma-vm || die "mount rdmavmout failed"
if [ -n "$WORK" ]; then
  mkdir -p "$R$WORK"
  mount -t 9p -o "$O9P,rw" rdmavmwork "$R$WORK" || die "mount work dir failed"
fi
echo rdma-vm > $R/proc/sys/kernel/hostname

chroot $R /bin/bash /run/rdma-vm/stage2.sh
echo $? > $R/run/rdma-vm/exitcode
sync
poweroff -f
