"""The run folder of `vmharness run`: made with its configuration and plan, pinned to the guest image
it started with (built from the recipe if missing; a resumed run goes on with it), and given each
guest's facts and domain XML the first time an instance is measured, so that a result can be traced
to the guest and machines that produced it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vmharness import progress
from vmharness.bench import bench, plan
from vmharness.bench.machines import client_versions, first_line
from vmharness.errors import HarnessError
from vmharness.guest import domain, image, imagebuild, session
from vmharness.guest.recipe import load_recipe
from vmharness.model.sections import RunConfig
from vmharness.rundir.store import RunDir
from vmharness.system import imagedir
from vmharness.system.machine import for_uri


def new_run(cfg: RunConfig, out: Path, nic: dict[str, Any]) -> RunDir:
    """`nic`: where the NIC and hugepages came from (hostprep.Choice.to_json), kept beside the config."""
    return RunDir.create(out, {"kind": "run", "id": bench.new_id(), "config": cfg.to_json(), "nic": nic,
                               "harness": bench.harness_version(), "points_planned": plan.planned(cfg)})


def ensure_image(cfg: RunConfig, run: RunDir, say: progress.Say) -> str | None:
    """The image folder of the instances that name none: the recipe's, built if missing, and kept for
    the whole run (a resumed run goes on with the image it started with, whatever the recipe is now)."""
    if all(i.image or cfg.guest.image for i in cfg.instance):
        return None
    pinned = run.manifest.get("image")
    if pinned:
        if not (Path(pinned) / "image.json").exists():
            raise HarnessError(f"the image this run started with is gone: {pinned}",
                               "start a new run (measurements from two images do not mix)")
        return str(pinned)
    recipe = load_recipe()
    images = imagedir.path()
    if image.find(recipe, images) is None:
        say(f"building the guest image from {recipe.folder} (once; cached afterwards)")
    built, _ = imagebuild.build(recipe, images, say)
    say(f"image {built.folder}")
    run.update_manifest(image=str(built.folder), image_meta=built.meta)
    return str(built.folder)


def note_guest(run: RunDir, cfg: RunConfig, b: session.Booted, inst: str, booted: str) -> None:
    """The guest's facts and domain XML under `inst`'s name, the first time `inst` is measured
    (`booted`: the instance whose guest it is, when `inst` rides on it)."""
    m = run.manifest
    guests = m.get("instances", {})
    changes: dict[str, Any] = {}
    if inst not in guests:
        changes["instances"] = {**guests, inst: b.facts}
        xml = f"{inst}.xml"
        if "/" in xml or xml.startswith("."):
            raise HarnessError(f"instance name {inst!r} does not make a file inside {run.path}/domains",
                               "instance names are letters, digits, '.', '_' and '-'")
        run.folder.folder("domains").write(xml, (b.xml if inst == booted else
                                                 rider_note(cfg, inst, booted) + b.xml).encode())
    if "guest" not in m:
        changes["guest"] = {"kvm": b.guest.kvm, "uri": b.guest.uri, "boot_seconds": b.guest.boot_seconds,
                            "shares_host_with_client": for_uri(b.guest.uri).local and any(
                                c.host == "local" for c in cfg.client)}
        nginx = {i.name: first_line(b.machine, [i.nginx, "-v"]) for i in cfg.instance}
        server = {"machine": b.machine.key, "kernel": b.facts.get("kernel", ""),
                  "cpus": str(b.facts.get("cpus", "")), "nginx": nginx}
        changes["machines"] = {"server": server, "clients": client_versions(cfg)}
    if changes:
        run.update_manifest(**changes)


def rider_note(cfg: RunConfig, inst: str, booted: str) -> str:
    """What a riding instance does to its host's guest, above that guest's XML."""
    mine, host = (next(i for i in cfg.instance if i.name == name) for name in (inst, booted))
    how = []
    if mine.vcpu_cap != host.vcpu_cap:
        cap = mine.vcpu_cap
        how.append(f"its vCPUs capped live to {cap}% (vcpu_quota {domain.cap_quota(cap)} of vcpu_period "
                   f"{domain.CAP_PERIOD_US})" if cap else "its vCPUs uncapped live")
    if mine.pipeline != host.pipeline:
        how.append(f"loaded {mine.pipeline} requests deep per connection")
    return f"<!-- {inst}: the guest of {booted} below, {' and '.join(how)} -->\n"
