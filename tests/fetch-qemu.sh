#!/bin/bash
# fetch-qemu.sh CACHE SUITE MAJOR MIRROR: QEMU MAJOR.x from Debian's SUITE (bookworm-backports) at MIRROR
# (the host's own, as the Makefile finds it), unpacked
# beside the system's QEMU into CACHE/qemu-VERSION (the package's version without its epoch, so a
# folder is named by what it holds), once per machine: apt-get runs with a private configuration (its
# own sources list, lists and cache; the machine's apt sources are not read or changed), `dpkg -x`
# unpacks the emulator, its data, its modules and the SeaBIOS it asks for into a folder of its own,
# which is renamed into place whole, under a lock, once the binary answers as QEMU MAJOR with every
# library found on this machine.
#
# Why the modules and SeaBIOS, and the `qemu-bundle` link: Debian's QEMU looks for its loadable modules
# and its firmware in the system's folders (/usr/lib/x86_64-linux-gnu/qemu, /usr/share/qemu,
# /usr/share/seabios), which hold 7.2's: QEMU 10.0 aborts loading a 7.2 module ("Only modules from the
# same build can be loaded"), which libvirt's probe of a new emulator makes it do (qom-list-types).
# A folder `qemu-bundle` beside the binary is where QEMU looks first, for every such folder
# (get_relocated_path): linked to the unpacked root, it makes QEMU 10.0 take its own modules, data and
# SeaBIOS. iPXE's ROMs are not in backports: the system's are linked in (/usr/lib/ipxe/qemu).
# CACHE must be reachable by libvirt's QEMU user (libvirt-qemu): not under /root.
set -euo pipefail
cache=$1 suite=$2 major=$3 mirror=$4
mkdir -p -m 755 "$cache"
exec 9>"$cache/.lock"
flock -w 900 9
for found in "$cache"/qemu-"$major".*/usr/bin/qemu-system-x86_64; do
    [ -x "$found" ] && [ -L "${found%/*}/qemu-bundle" ] && exit 0
done
echo "fetching QEMU $major from $suite into $cache (once per machine)"
tmp=$(mktemp -d "$cache/.fetch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "deb $mirror $suite main" > "$tmp/sources.list"
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs"
apt=(apt-get -qq -o Dir::Etc::SourceList="$tmp/sources.list" -o Dir::Etc::SourceParts=- \
     -o Dir::State::Lists="$tmp/lists" -o Dir::Cache="$tmp/cache" -o APT::Sandbox::User=root)
"${apt[@]}" update
(cd "$tmp/debs" && "${apt[@]}" download "qemu-system-x86/$suite" "qemu-system-data/$suite" \
    "qemu-system-common/$suite" "seabios/$suite")
version=$(dpkg-deb -f "$tmp"/debs/qemu-system-x86_*.deb Version)
mkdir -m 755 "$tmp/root"
for deb in "$tmp"/debs/*.deb; do dpkg -x "$deb" "$tmp/root"; done
chmod 755 "$tmp/root"
ln -s ../.. "$tmp/root/usr/bin/qemu-bundle"
mkdir -p "$tmp/root/usr/lib/ipxe"
ln -s /usr/lib/ipxe/qemu "$tmp/root/usr/lib/ipxe/qemu"
qemu="$tmp/root/usr/bin/qemu-system-x86_64"
for f in "$qemu" "$tmp"/root/usr/lib/x86_64-linux-gnu/qemu/*.so; do
    if ldd "$f" | grep -q "not found"; then
        echo "QEMU $version: $f needs libraries this machine lacks:"; ldd "$f" | grep "not found"; exit 1
    fi
done
"$qemu" -version | head -1 | grep -q "^QEMU emulator version $major\." || {
    echo "$qemu does not answer -version as QEMU $major"; exit 1; }
# what libvirt's probe asks (every type, every module loaded), and the firmware a q35 guest needs
printf '%s\n' '{"execute":"qmp_capabilities"}' '{"execute":"qom-list-types"}' '{"execute":"quit"}' |
    "$qemu" -machine none -accel tcg -nodefaults -display none -qmp stdio | grep -q '"name": "q35-' || {
    echo "$qemu does not list its types over QMP (its modules?)"; exit 1; }
timeout 30 "$qemu" -machine q35 -accel tcg -nodefaults -display none -device virtio-net-pci,netdev=n -netdev \
    user,id=n -S -qmp stdio <<< '{"execute":"qmp_capabilities"}
{"execute":"quit"}' > /dev/null || { echo "$qemu cannot start a q35 machine (its firmware?)"; exit 1; }
mv -T "$tmp/root" "$cache/qemu-${version#*:}"
echo "QEMU $version in $cache/qemu-${version#*:}"
