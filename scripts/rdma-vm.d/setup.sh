#!/usr/bin/env bash
# setup.sh - idempotent preparation for scripts/rdma-vm, which calls it on every run (~0.1 s
# when the cache is complete). Prints "KERNEL INITRD" on stdout; messages go to stderr.
#  1. host packages: scripts/deps, called only when one of the tools used here is missing
#  2. the Debian kernel package: unpacked into the cache (not installed; /boot is untouched)
#  3. siw.ko, built out of tree (Debian kernels have CONFIG_RDMA_SIW unset), only when siw is
#     requested (RDMA_VM_DEVICES) or RDMA_VM_SIW=1: it costs a ~140 MB linux-source download
#  4. the initramfs: busybox, init.sh and the modules for 9p, overlayfs and RDMA
# Environment: RDMA_VM_CACHE (default /var/cache/rdma-vm), RDMA_VM_KPKG (kernel package;
# default: the one linux-image-amd64 depends on when the cache is first built), RDMA_VM_SIW.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${RDMA_VM_CACHE:-/var/cache/rdma-vm}
log() { echo "[rdma-vm setup] $*" >&2; }
PATH=$PATH:/usr/sbin:/sbin   # depmod and modprobe live there, often not on a user's PATH
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo

mkdir -p "$CACHE/debs" || { log "cannot create $CACHE; set RDMA_VM_CACHE to a writable directory"; exit 1; }
CACHE=$(cd "$CACHE" && pwd)   # absolute: module paths are made relative to it below
exec 9>"$CACHE/.lock"   # serialize concurrent runs (cargo may start several test binaries)
flock 9

# ---------------------------------------------------------------- 1. host packages
for t in qemu-system-x86_64 busybox depmod modprobe cpio xz strip rdma ibv_devices; do
  command -v "$t" >/dev/null || { "$HERE/../deps" >&2; break; }
done

# An apt query or download fails when the package lists are stale or absent (a fresh
# container): refresh them and retry once.
apt_retry() { "$@" 2>/dev/null || { log "apt-get update"; $SUDO apt-get update -qq; "$@"; }; }

# ---------------------------------------------------------------- 2. kernel
KPKG=${RDMA_VM_KPKG:-$(cat "$CACHE/kpkg" 2>/dev/null || true)}
[ -n "$KPKG" ] || KPKG=$(apt_retry apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ && !k {print $2; k=1}')
[ -n "$KPKG" ] || { log "cannot resolve the kernel package (linux-image-amd64)"; exit 1; }
KVER=${KPKG#linux-image-}
KROOT=$CACHE/$KVER
download() { ( cd "$CACHE/debs" && apt_retry apt-get download -o APT::Sandbox::User=root "$1" >/dev/null ); }
if [ ! -f "$KROOT/boot/config-$KVER" ]; then
  log "downloading $KPKG"
  download "$KPKG"
  rm -rf "$KROOT.tmp"
  dpkg-deb -x "$CACHE/debs/${KPKG}"_*.deb "$KROOT.tmp"
  depmod -b "$KROOT.tmp" "$KVER"
  rm -rf "$KROOT"; mv "$KROOT.tmp" "$KROOT"
  rm -f "$CACHE/debs/${KPKG}"_*.deb
fi
echo "$KPKG" > "$CACHE/kpkg"
grep -q '^CONFIG_RDMA_RXE=m' "$KROOT/boot/config-$KVER" || { log "$KPKG has no rdma_rxe"; exit 1; }
# Boot the uncompressed vmlinux through its PVH entry point: decompressing the bzImage in the
# guest costs ~6 s under TCG. It is the first xz stream inside the bzImage.
KERNEL=$KROOT/boot/vmlinux-$KVER
if [ ! -f "$KERNEL" ]; then
  grep -q '^CONFIG_PVH=y' "$KROOT/boot/config-$KVER" || { log "$KPKG lacks CONFIG_PVH"; exit 1; }
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$KROOT/boot/vmlinuz-$KVER" | awk -F: 'NR==1{print $1}')
  # (xz stops after that stream, so tail gets SIGPIPE: not a pipeline, which pipefail would fail)
  if ! { [ -n "$off" ] && xz -dc --single-stream < <(tail -c +$((off + 1)) "$KROOT/boot/vmlinuz-$KVER") > "$KERNEL.tmp" &&
         [ "$(head -c 4 "$KERNEL.tmp" | od -An -c | tr -d ' ')" = '177ELF' ]; }; then
    log "cannot extract vmlinux from $KROOT/boot/vmlinuz-$KVER"; exit 1
  fi
  mv "$KERNEL.tmp" "$KERNEL"
fi

# ---------------------------------------------------------------- 3. siw.ko
SIW_KO=$KROOT/lib/modules/$KVER/updates/siw/siw.ko
if { [ "${RDMA_VM_SIW:-0}" = 1 ] || [[ " ${RDMA_VM_DEVICES:-} " == *" siw "* ]]; } && [ ! -f "$SIW_KO" ]; then
  log "building siw.ko out of tree"
  "$HERE/../deps" "linux-headers-$KVER" make gcc >&2 ||
    { log "no headers for $KVER in the archive any more? rm -rf $CACHE moves to the current kernel"; exit 1; }
  SRCPKG=linux-source-$(echo "$KVER" | cut -d. -f1-2)   # only drivers/infiniband/sw/siw is used
  download "$SRCPKG"
  B=$CACHE/siw-build; rm -rf "$B"; mkdir -p "$B"
  dpkg-deb --fsys-tarfile "$CACHE/debs/${SRCPKG}"_*.deb | tar -x -C "$B" --wildcards './usr/src/*.tar.xz'
  rm -f "$CACHE/debs/${SRCPKG}"_*.deb
  tar -xJf "$B"/usr/src/*.tar.xz -C "$B" --wildcards '*/drivers/infiniband/sw/siw/*'
  SIWSRC=$(echo "$B"/*/drivers/infiniband/sw/siw)
  make -s -C "/usr/src/linux-headers-$KVER" M="$SIWSRC" CONFIG_RDMA_SIW=m modules >&2
  mkdir -p "$(dirname "$SIW_KO")"
  strip --strip-debug -o "$SIW_KO" "$SIWSRC/siw.ko"
  depmod -b "$KROOT" "$KVER"
  rm -rf "$B"
fi

# ---------------------------------------------------------------- 4. initramfs
MODS="virtio_pci virtio_mmio 9pnet_virtio 9p virtio_console overlay dummy
      ib_core ib_uverbs ib_umad rdma_cm rdma_ucm rdma_rxe
      crc32_generic crc32c_generic crc32_pclmul crc32c_intel"
[ -f "$SIW_KO" ] && MODS="$MODS siw"
# Named after what goes in, so a changed init.sh/setup.sh or a new siw.ko rebuilds it.
KEY=$(cat "$HERE/init.sh" "$HERE/setup.sh" - <<< "$MODS" | cksum | cut -d' ' -f1)
INITRD=$CACHE/initramfs-$KVER-$KEY.cpio
if [ ! -f "$INITRD" ]; then
  log "building initramfs"
  S=$CACHE/initramfs.tmp; rm -rf "$S"
  mkdir -p "$S"/{bin,dev,proc,sys,newroot,lower,ovl,lib/modules/"$KVER"}
  cp /bin/busybox "$S/bin/busybox"
  cp "$HERE/init.sh" "$S/init"; chmod 755 "$S/init"
  # Stripping also drops the module signatures: without the RSA checks module loading takes
  # 0.6 s instead of 1.1 s under TCG (the kernel logs "module verification failed").
  for m in $MODS; do
    modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
  done | sort -u | while read -r f; do
    rel=${f#"$KROOT"/}
    mkdir -p "$S/$(dirname "$rel")"
    strip --strip-debug -o "$S/$rel" "$f"
  done
  cp "$KROOT/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$S/lib/modules/$KVER/"
  depmod -b "$S" "$KVER"
  ( cd "$S" && find . | LC_ALL=C sort | cpio -o -H newc --quiet ) > "$INITRD.tmp"
  rm -rf "$S" "$CACHE/initramfs-$KVER"-*.cpio
  mv "$INITRD.tmp" "$INITRD"
fi

echo "$KERNEL $INITRD"
