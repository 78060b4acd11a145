#!/bin/busybox sh
# PID 1 of the L2 guest (see l2.py): list the PCI devices L2 sees, one line each,
# then the marker with L2's uptime, and power off. l2.py fills in the @-delimited
# placeholders. A failed step does not stop it (the caller judges the listing); should
# PID 1 die instead, the kernel panics, and with panic=-1 and -no-reboot QEMU exits.
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t sysfs sysfs /sys
for d in /sys/bus/pci/devices/*; do
    [ -r "$d/class" ] || continue
    read -r vendor < "$d/vendor"
    read -r device < "$d/device"
    read -r class < "$d/class"
    echo "@PCI_TAG@ ${d##*/} ${vendor#0x}:${device#0x} $class"
done
read -r uptime _ < /proc/uptime
echo "@DONE_TAG@ $uptime"
$bb poweroff -f
