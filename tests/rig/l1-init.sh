#!/bin/busybox sh
# PID 1 of the L1 guest, run by busybox from the rig's initramfs.
# initramfs.py fills in the @-delimited placeholders; the kernel command line passes
# rig_modules=<L0 path of the unpacked lib/modules/<release>> in the environment.
# PID 1 must never exit: on a fatal error it powers off (QEMU runs with -no-reboot,
# so the host sees QEMU exit and shows this console), otherwise it ends in the
# agent loop.

/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8

say() { echo "rig-init: $*"; }
fatal() {
    echo "rig-init: FATAL: $*"
    poweroff -f
    while :; do sleep 3600; done
}
must() { "$@" || fatal "failed: $*"; }

must mount -t proc proc /proc
must mount -t sysfs sysfs /sys
must mount -t devtmpfs devtmpfs /dev
# L1's kernel started on one CPU (maxcpus=1): bring up the others now (topology.ONE_CPU_AT_BOOT).
for c in /sys/devices/system/cpu/cpu[0-9]*; do
    if [ -e "$c/online" ] && [ "$(cat "$c/online")" = 0 ]; then
        echo 1 > "$c/online" || fatal "could not bring ${c##*/} online"
    fi
done

for m in @MODULES@; do
    must insmod "/lib/modules/@RELEASE@/$m"
done
# Let the kernel load further modules (vfio_iommu_type1, ...) with L0's modprobe
# inside the chroot, where /lib/modules/@RELEASE@ is bound below.
echo /sbin/rig-modprobe > /proc/sys/kernel/modprobe

# L0's root, read-only; everything writable below is L1's own.
must mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=@MSIZE@ hostroot /host
must mount -t proc proc /host/proc
must mount -t sysfs sysfs /host/sys
must mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/pts /host/dev/shm /host/dev/hugepages
must mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /host/dev/pts
must mount -t tmpfs -o mode=1777 tmpfs /host/dev/shm
must mount -t hugetlbfs hugetlbfs /host/dev/hugepages
# /etc and /var writable in L1 (libvirtd and the harness's guests write there: domain definitions,
# QEMU's state and logs, overlays), each an overlay whose upper half is L1's tmpfs: L0's trees are
# its lower half, and nothing written reaches L0.
for d in etc var; do
    must mkdir -p "/run/$d-overlay"
    must mount -t tmpfs -o mode=755 tmpfs "/run/$d-overlay"
    must mkdir -p "/run/$d-overlay/upper" "/run/$d-overlay/work"
    must mount -t overlay -o "lowerdir=/host/$d,upperdir=/run/$d-overlay/upper,workdir=/run/$d-overlay/work" \
        overlay "/host/$d"
done
# The overlays and console logs of the guests the harness boots in L1 on a tmpfs of their own: L0's
# tests write the same folder (/var/lib/vmharness/vms/_run) while the rig runs, and an overlayfs whose
# lower half changes under it may lose a file L1 has just made (QEMU then could not stat its overlay).
must mkdir -p /host/var/lib/vmharness/vms
must mount -t tmpfs -o mode=755 tmpfs /host/var/lib/vmharness/vms
# The tmpfs mounts below would hide the repository or the cache if L0 keeps them under
# /tmp, /run or /var/tmp (a CI clone may): bind each rig_keep path aside first, and back
# in place wherever a tmpfs covered it.
keep_paths=$(echo "$rig_keep" | tr : ' ')
i=0
for k in $keep_paths; do
    must mkdir -p "/keep/$i"
    must mount -o bind "/host$k" "/keep/$i"
    i=$((i + 1))
done
must mount -t tmpfs -o mode=755 tmpfs /host/run
must mount -t tmpfs -o mode=1777 tmpfs /host/tmp
must mount -t tmpfs -o mode=1777 tmpfs /host/var/tmp
i=0
for k in $keep_paths; do
    if [ ! -e "/host$k" ]; then
        must mkdir -p "/host$k"
        must mount -o bind "/keep/$i" "/host$k"
    fi
    i=$((i + 1))
done
# The trees nothing changes while the rig runs (rig_cached=, topology.CACHED_TAG), over the
# uncached mount's: read through a mount that keeps what it read.
must mkdir -p /cached
must mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=@MSIZE@ @CACHED_TAG@ /cached
for c in $(echo "$rig_cached" | tr : ' '); do
    [ -d "/host$c" ] || fatal "rig_cached: $c is not a directory in L0's root"
    must mount -o bind "/cached$c" "/host$c"
done

# /lib/modules/<release> for the chroot. L0 need not have /lib/modules at all, and
# a read-only tree cannot grow a mount point, so /lib (usr/lib on merged-/usr
# systems) gets a tmpfs-backed overlay first.
[ -n "$rig_modules" ] || fatal "rig_modules= missing from the kernel command line"
libdir=/host$(chroot /host readlink -f /lib)
case $libdir in /host/?*) ;; *) fatal "cannot resolve L0's /lib" ;; esac
mkdir -p /run/lib-overlay
must mount -t tmpfs -o mode=755 tmpfs /run/lib-overlay
mkdir -p /run/lib-overlay/upper /run/lib-overlay/work
must mount -t overlay -o "lowerdir=$libdir,upperdir=/run/lib-overlay/upper,workdir=/run/lib-overlay/work" overlay "$libdir"
must mkdir -p "$libdir/modules/@RELEASE@"
must mount -o bind,ro "/host$rig_modules" "$libdir/modules/@RELEASE@"

# A rig whose L1 reboots (kexec: the harness's host boots) keeps a folder of L0's across its boots
# (topology.PERSIST_TAG): the host boots' state and the run folder are bound from it into place, and
# the kernels L1 may boot, each with its initrd (the one it comes home to, and any other a host boot
# names), are copied from it into a /boot of L1's own. libvirt's cache
# of what each QEMU binary can do is kept there too, as a host's /var/cache is across its boots
# (libvirt probes the binary again where the kernel, QEMU or libvirtd changed; the probe takes 8-15 s
# in L1). Its kexec is the rig's unpacked kexec-tools (rig_kexec=), put into /usr/sbin through an overlay.
if [ -n "$rig_persist" ]; then
    must mkdir -p /persist
    must mount -t 9p -o trans=virtio,version=9p2000.L,msize=@MSIZE@ @PERSIST_TAG@ /persist
    for pair in hostboots:lib/vmharness/hostboots runs:lib/vmharness/runs libvirt-cache:cache/libvirt/qemu; do
        must mkdir -p "/persist/${pair%%:*}" "/host/var/${pair#*:}"
        must mount -o bind "/persist/${pair%%:*}" "/host/var/${pair#*:}"
    done
    must mount -t tmpfs -o mode=755 tmpfs /host/boot
    for f in /persist/boot/vmlinuz-* /persist/boot/initrd.img-*; do
        must cp "$f" /host/boot/
    done
    [ -f /host/boot/vmlinuz-@RELEASE@ ] && [ -f /host/boot/initrd.img-@RELEASE@ ] || \
        fatal "rig_persist: no vmlinuz-@RELEASE@ or initrd.img-@RELEASE@ to come home to in its boot folder"
    [ -x "/host$rig_kexec/sbin/kexec" ] || fatal "rig_kexec: no sbin/kexec in $rig_kexec"
    sbin=/host$(chroot /host readlink -f /usr/sbin)
    mkdir -p /run/sbin-overlay
    must mount -t tmpfs -o mode=755 tmpfs /run/sbin-overlay
    mkdir -p /run/sbin-overlay/upper /run/sbin-overlay/work
    must mount -t overlay -o "lowerdir=$sbin,upperdir=/run/sbin-overlay/upper,workdir=/run/sbin-overlay/work" \
        overlay "$sbin"
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$rig_kexec/usr/lib/x86_64-linux-gnu" \
        "$rig_kexec/sbin/kexec" > "$sbin/kexec"
    must chmod 755 "$sbin/kexec"
fi

hostname @HOSTNAME@
must ip link set lo up
nic0=
for d in /sys/class/net/*; do
    [ "$(cat "$d/address")" = "@NIC0_MAC@" ] && nic0=${d##*/}
done
[ -n "$nic0" ] || fatal "no interface with MAC @NIC0_MAC@ (nic0)"
must ip link set "$nic0" up
must ip addr add @NIC0_ADDR@ dev "$nic0"
must ip route add default via @GATEWAY@ dev "$nic0"

port=
tries=0
while [ -z "$port" ]; do
    for p in /sys/class/virtio-ports/*; do
        [ "$(cat "$p/name" 2>/dev/null)" = "@AGENT_PORT@" ] && port=/dev/${p##*/}
    done
    tries=$((tries + 1))
    [ -n "$port" ] || [ "$tries" -lt 100 ] || fatal "no virtio port named @AGENT_PORT@"
    [ -n "$port" ] || sleep 0.1
done

say "nic0 is $nic0; starting qemu-ga on $port"
while :; do
    chroot /host /usr/sbin/qemu-ga -m virtio-serial -p "$port"
    say "qemu-ga exited with status $?; restarting"
    sleep 1
done
