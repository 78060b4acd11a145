#!/bin/busybox sh
# PID 1 of an L2 guest booted by `vmharness run` with the rig's kernel (see l2root.py): load the
# drivers the guest needs from this initramfs (the image's own modules are for another kernel
# release), mount the image's root, and hand over to the init its cmdline names (init=...).
/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
read -r up _ < /proc/uptime
echo "l2-root: loading drivers at ${up} s"
for m in @MODULES@; do
    insmod "/lib/modules/@RELEASE@/$m" || echo "l2-root: insmod $m failed"
done
i=0
while [ ! -b /dev/vda ] && [ "$i" -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
mount -t ext4 -o rw /dev/vda /root || { echo "l2-root: cannot mount /dev/vda"; poweroff -f; }
read -r up _ < /proc/uptime
echo "l2-root: root mounted at ${up} s"
init=/sbin/init
for word in $(cat /proc/cmdline); do
    case $word in init=*) init=${word#init=} ;; esac
done
umount /proc /sys
mount --move /dev /root/dev
exec switch_root /root "$init"
