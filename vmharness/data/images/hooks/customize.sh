#!/bin/sh
# mmdebstrap customize hook: $1 is the new root, with /proc, /sys and /dev mounted.
# Its input comes in the environment, set by vmharness/guest/imagebuild.py (never spliced into this text):
#   VMH_OVERLAY      folder copied over the root (images/overlay)
# A researcher's bzImage and modules go in after this hook, by the builder (imagebuild.py
# _install_kernel), so that the root it leaves serves every such kernel (guest/basetree.py).
set -eu
root="$1"
cp -a "$VMH_OVERLAY/." "$root/"
# The initramfs without udev: the root is /dev/vda, whose node devtmpfs makes as soon as virtio_blk
# (loaded from the overlay's module list) finds the disk; udev's start and coldplug there took 4.7 s of
# a 16 s TCG boot (1.3 s without). The booted root's own udev (init = "systemd") is left as it is.
# Diverted out of initramfs-tools' folders: mkinitramfs copies every script file it finds there.
aside=/usr/local/share/initramfs-tools-unused
for f in hooks/udev scripts/init-top/udev scripts/init-bottom/udev; do
    mkdir -p "$root$aside/${f%/*}"
    chroot "$root" dpkg-divert --quiet --local --rename --divert "$aside/$f" --add "/usr/share/initramfs-tools/$f"
done
# The overlay's initramfs configuration (virtio and ext4 only) for the distribution's kernel.
chroot "$root" update-initramfs -u -k all >/dev/null

# The harness drives the guest through the agent; nothing needs a password. sshd gets host keys
# at first boot from its own unit (regenerated per image, never shipped).
chroot "$root" passwd -l root >/dev/null
rm -f "$root"/etc/ssh/ssh_host_*
: > "$root/etc/machine-id"
chroot "$root" systemctl enable ssh-hostkeys.service >/dev/null 2>&1
# Nor does sshd start at boot, on every address: the harness starts it through the agent once the
# management link has its address, listening there alone (not on a passed-through benchmark NIC).
chroot "$root" systemctl disable ssh.service >/dev/null 2>&1

# Units that only add noise to a benchmark or time to a boot.
for unit in apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer e2scrub_reap.service \
            fstrim.timer systemd-timesyncd.service sysstat-collect.timer sysstat-summary.timer \
            nginx.service; do
    chroot "$root" systemctl mask "$unit" >/dev/null 2>&1 || true
done

rm -rf "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
       "$root"/boot/*.dpkg-bak "$root"/boot/*.new
