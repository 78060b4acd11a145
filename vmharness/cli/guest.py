"""The guest commands of `vmharness`: `image build` and `vm up|exec|console|down`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vmharness import data, textsafe
from vmharness.cli import types as cli_types
from vmharness.cli.live import live_root
from vmharness.errors import HarnessError
from vmharness.guest import domain, imagebuild, record
from vmharness.guest.kernelinput import kernel_input
from vmharness.guest.recipe import load_recipe
from vmharness.journal import journal
from vmharness.model import libvirt_uri, schema, sections
from vmharness.progress import say
from vmharness.system import imagedir
from vmharness.system.root import HostRoot

if TYPE_CHECKING:
    from vmharness.guest.instance import VmRequest

# guest/instance.py, vm.py, running.py and agent.py bring libvirt's bindings: importing them costs about 60 ms of CPU
# (libvirt itself about 20), which `image build`, every other command and `--help` do not need. The
# commands that talk to libvirt import them when they run.


def cmd_image_build(args: argparse.Namespace) -> int:
    kernel = kernel_input(args.kernel, args.modules, args.kernel_config)
    recipe = load_recipe(Path(args.recipe) if args.recipe else data.IMAGE_RECIPE, kernel)
    images = imagedir.path(args.image_dir)
    built, fresh = imagebuild.build(recipe, images, say, imagedir.flag(args.image_dir), args.force)
    m = built.meta
    if args.json:
        print(json.dumps({"folder": str(built.folder), "built_now": fresh, **m}, indent=2, sort_keys=True))
        return 0
    state = f"built in {m['build_seconds']} s" if fresh else "up to date"
    print(f"image {built.folder}: {state}")
    print(f"  disk {built.disk} ({m['disk_bytes'] / 2**20:.0f} MiB; {m['files_mib']} MiB of files in a "
          f"{m['filesystem_mib']} MiB ext4)")
    print(f"  kernel {m['kernel_release']}{' (yours)' if m['custom_kernel'] else ''}: {built.kernel}"
          + (f" + {built.initrd.name}" if built.initrd else ""))
    print(f"  cmdline {m['cmdline']}")
    return 0


def _request(args: argparse.Namespace) -> VmRequest:
    from vmharness.guest.instance import VmRequest, with_init  # libvirt's bindings: see the note at the top

    return VmRequest(
        name=args.name, memory_mib=args.memory, vcpus=args.vcpus, cmdline=with_init(args.init, args.cmdline or ""),
        kernel=args.kernel, initrd=args.initrd, bdfs=tuple(args.bdf), managed=args.managed,
        hugepages=args.hugepages, hugepage_size=args.hugepage_size, uri=libvirt_uri.check(args.uri, "--uri"),
        accel=args.accel,
        link=not args.no_link, image=args.image, image_dir=args.image_dir, owner=f"vm:{args.name}",
    )


def cmd_vm_up(args: argparse.Namespace) -> int:
    from vmharness.guest import instance, vm  # libvirt's bindings: see the note at the top

    if args.print_xml:
        root = HostRoot.open(args.host_root)
    else:
        root = live_root(args.host_root, "vm up", "drop --host-root (and VMHARNESS_HOST_ROOT), or add --print-xml")
    req = _request(args)
    planned = instance.plan(root, req, for_print=args.print_xml)
    for note in planned.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.print_xml:
        print(domain.to_xml(planned.spec), end="")
        return 0
    with journal.Lock(root):
        guest = vm.up(root, planned.spec, req.uri, planned.base_disk, domain.to_xml(planned.spec), say,
                      req.owner, boot_timeout=args.boot_timeout, link_net=planned.link_net)
    if args.json:
        print(json.dumps(guest.to_json(), indent=2, sort_keys=True))
    else:
        print(f"guest {guest.name} is up ({guest.boot_seconds} s to the agent); "
              f"run in it: vmharness vm exec {guest.name} -- uname -r; stop it: vmharness vm down {guest.name}")
    return 0


def cmd_vm_exec(args: argparse.Namespace) -> int:
    from vmharness.guest import agent, running  # libvirt's bindings: see the note at the top

    root = live_root(args.host_root, "vm exec", "drop --host-root (and VMHARNESS_HOST_ROOT)")
    guest = record.load(root, args.name)
    conn, dom = running.domain(guest)
    try:
        if args.copy:
            local, _, remote = args.copy.partition(":")
            if not remote:
                raise HarnessError(f"--copy {args.copy!r} names no guest path", "write --copy LOCAL:/path/in/guest")
            n = agent.put_file(dom, Path(local), remote)
            print(f"copied {n} bytes to {guest.name}:{remote}", file=sys.stderr)
            if not args.argv:
                return 0
        res = agent.run(dom, args.argv, timeout=args.timeout)
    finally:
        conn.close()
    textsafe.raw(sys.stdout).write(res.stdout)  # what the guest's command printed, untouched (as ssh passes it)
    textsafe.raw(sys.stderr).write(res.stderr)
    return res.returncode


def cmd_vm_console(args: argparse.Namespace) -> int:
    from vmharness.guest import running  # libvirt's bindings: see the note at the top

    guest = record.load(live_root(args.host_root, "vm console", "drop --host-root (and VMHARNESS_HOST_ROOT)"),
                        args.name)
    print(running.console_tail(guest, lines=args.lines), end="")
    print(f"(the whole log: {guest.console_log}; interactive: virsh -c {guest.uri} console "
          f"{record.domain_name(guest.name)})", file=sys.stderr)
    return 0


def cmd_vm_down(args: argparse.Namespace) -> int:
    from vmharness.guest import vm  # libvirt's bindings: see the note at the top

    root = live_root(args.host_root, "vm down", "drop --host-root (and VMHARNESS_HOST_ROOT)")
    guest = record.load(root, args.name)
    with journal.Lock(root):
        vm.down(root, guest, say, grace=args.grace)
    return 0


def register(subs: Any, add: Any) -> None:
    """Adds the commands to the main parser; `add` is cli._add."""
    image = subs.add_parser("image", help="build the guest image", description="build the guest image")
    image_subs = image.add_subparsers(dest="image_command", metavar="COMMAND", parser_class=type(image))
    p = add(image_subs, "build", cmd_image_build,
            "build the guest image from the shipped recipe (cached: nothing changed, nothing rebuilt)",
            "vmharness image build --kernel ~/linux/arch/x86/boot/bzImage --modules /tmp/mods/lib/modules/6.12.0")
    p.add_argument("--kernel", metavar="PATH", help="your kernel: a bzImage (with --modules) or a linux-image .deb")
    p.add_argument("--modules", metavar="DIR", help="the lib/modules/RELEASE tree built with --kernel")
    p.add_argument("--kernel-config", metavar="FILE", help="its .config (default: config-RELEASE beside it, "
                                                            "or .config at the top of its build tree)")
    p.add_argument("--recipe", metavar="DIR",
                   help="a recipe folder other than the shipped one (vmharness/data/images/)")
    p.add_argument("--image-dir", metavar="DIR", help="where images are kept (default /var/lib/vmharness/images; "
                                                       "also VMHARNESS_IMAGE_DIR)")
    p.add_argument("--force", action="store_true", help="build into an --image-dir that image build did not make")

    vm = subs.add_parser("vm", help="a guest by hand: up, exec, console, down",
                         description="boot a guest by hand and work in it")
    vm_subs = vm.add_subparsers(dest="vm_command", metavar="COMMAND", parser_class=type(vm))
    p = add(vm_subs, "up", cmd_vm_up, "define and boot a guest through libvirt; returns when its agent answers",
            "vmharness vm up --name demo --cmdline mitigations=off --bdf 0000:b3:00.0 --hugepages")
    p.add_argument("--name", default="guest", help="guest name (domain vmh-NAME; default guest)")
    p.add_argument("--memory", type=cli_types.whole(128, 1 << 22), default=1024, metavar="MIB",
                   help="guest memory in MiB (default 1024)")
    p.add_argument("--vcpus", type=cli_types.whole(1, 1024),
                   help="vCPUs, each pinned to a CPU of the NIC's node (default 2 or fewer)")
    p.add_argument("--cmdline", help="appended to the image's kernel command line")
    p.add_argument("--init", default="systemd", choices=schema.choices(sections.Init),
                   help="systemd: the image's own boot (default); minimal: its vmh-init, as `run` boots "
                        "(mounts, drivers, agent, sshd: a TCG boot in half the time)")
    p.add_argument("--kernel", metavar="PATH", help="boot this bzImage instead of the image's kernel")
    p.add_argument("--initrd", metavar="PATH", help="with --kernel: its initramfs")
    p.add_argument("--bdf", action="append", default=[], help="a PCI device to pass through (repeatable)")
    p.add_argument("--managed", action="store_true",
                   help="let libvirt bind the devices to vfio-pci itself (default: host-prepare did)")
    p.add_argument("--hugepages", action="store_true", help="back guest memory with hugepages")
    p.add_argument("--hugepage-size", default="2M", choices=schema.choices(sections.HugepageSize),
                   help="page size (default 2M)")
    p.add_argument("--uri", default="qemu:///system", help="libvirt connection (qemu+ssh://HOST/system: remote)")
    p.add_argument("--accel", default="auto", choices=schema.choices(sections.Accel),
                   help="auto: KVM if a probe guest runs under it, else TCG")
    p.add_argument("--no-link", action="store_true", help="no management link (tap + virtio-net)")
    p.add_argument("--image", metavar="DIR", help="an image folder (default: the current recipe's)")
    p.add_argument("--image-dir", metavar="DIR", help="where images are kept")
    p.add_argument("--boot-timeout", type=cli_types.seconds(1), default=300, metavar="S",
                   help="wait this long for the agent, then the link")
    p.add_argument("--print-xml", action="store_true", help="print the domain XML and stop (no libvirtd needed)")

    p = add(vm_subs, "exec", cmd_vm_exec, "run a command in the guest through its agent; exits with its status",
            "vmharness vm exec demo -- cat /proc/cmdline", json_flag=False)
    p.add_argument("name", help="the guest's name")
    p.add_argument("--timeout", type=cli_types.seconds(0.1), default=60, metavar="S",
                   help="give up after this long (default 60)")
    p.add_argument("--copy", metavar="LOCAL:GUESTPATH", help="first copy a file into the guest")
    p.set_defaults(argv=[])
    p.epilog = (p.epilog or "") + "\n\neverything after -- is the command, searched in the guest's PATH"

    p = add(vm_subs, "console", cmd_vm_console, "print the end of the guest's serial console log",
            "vmharness vm console demo --lines 50", json_flag=False)
    p.add_argument("name", help="the guest's name")
    p.add_argument("--lines", type=cli_types.whole(1, 1_000_000), default=40, help="how many lines (default 40)")

    p = add(vm_subs, "down", cmd_vm_down, "shut the guest down, undefine it and remove its overlay",
            "vmharness vm down demo", json_flag=False)
    p.add_argument("name", help="the guest's name")
    p.add_argument("--grace", type=cli_types.seconds(0, 3600), default=60, metavar="S",
                   help="seconds to wait for a clean shutdown before destroying it (default 60)")
