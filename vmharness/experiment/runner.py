"""`vmharness run`: the whole experiment. The host is prepared (NIC to vfio-pci, hugepages) and tuned
with the clients; then, iteration by iteration, each instance's guest boots with its kernel and
cmdline, is tuned, serves nginx to wrk for the whole connection sweep, and is shut down. The instances
take turns in a rotating order, so drift over the run is shared out between them. Every point goes
into the run directory as it is measured; a guest that does not boot is recorded, and the other
instances go on. At the end the host is given back (unless --keep-host: then what the run prepared
is handed over to host-prepare, for host-restore). Everything the run takes carries its owner tag
`run:ID`; what a dead run left is given back first."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vmharness import cpus, progress
from vmharness.bench import at_peak, bench, plan, sweep, tuning
from vmharness.errors import HarnessError
from vmharness.experiment import hostprep, hostrecord, ops
from vmharness.experiment.boots import Session, rides, sessions
from vmharness.experiment.runfolder import ensure_image, note_guest
from vmharness.guest import provenance, running, session, stopped
from vmharness.model import derived, profile, switches, vectors
from vmharness.model.sections import InstanceSection, RunConfig
from vmharness.rundir import record_check
from vmharness.rundir.store import POINTS, RunDir
from vmharness.system import sysfs
from vmharness.system.machine import for_uri
from vmharness.system.root import HostRoot
from vmharness.tune import access


@dataclass
class Runner:
    cfg: RunConfig
    run: RunDir
    root: HostRoot
    say: progress.Say
    tally: dict[str, int] = dataclasses.field(default_factory=lambda: {"ok": 0, "failed": 0})
    image: str | None = None  # the recipe's image, for instances that name none
    said: set[str] = dataclasses.field(default_factory=set)  # notes that are the same at every boot, said once
    # the points this runner measures (None: all): a run with host boots measures in each host boot only
    # its instances' points of that round (experiment/hostrun.py); the host's state is then the host boot's
    keep: Callable[[plan.Point], bool] | None = None

    @property
    def owner(self) -> str:
        return bench.owner(self.run)

    def _instance(self, name: str) -> InstanceSection:
        return next(i for i in self.cfg.instance if i.name == name)

    def _host_places(self) -> list[tuning.Place]:
        """The machine that runs the guests (and is a client when wrk runs here), and the other clients.
        The host's own NICs carry no benchmark traffic (the NIC is the guest's): no NIC knobs on it
        unless tuning.client_iface names them for a local client."""
        t = self.cfg.tuning
        local_client = any(c.host == "local" for c in self.cfg.client)
        out = [tuning.Place("host", access.HostTarget(self.root), t.client_iface if local_client else (),
                            is_host=for_uri(self.cfg.guest.uri).local)]
        for host in dict.fromkeys(c.host for c in self.cfg.client if c.host != "local"):
            out.append(tuning.Place(host, access.ssh_target(host), t.client_iface or None))
        return out

    def _capper(self, b: session.Booted, booted: str) -> tuple[Callable[[plan.Point], None], Callable[[], None]]:
        """Before each point: the guest's vCPUs capped as the point's instance wants (a riding control's
        cap set live, and lifted again for its host's points; a riding twin's depth is the client's); and
        the guest's vCPUs as the booted instance has them (after an explaining point's loads)."""
        state = {"cap": self._instance(booted).vcpu_cap}

        def to(want: int, name: str) -> None:
            if want != state["cap"]:
                running.cap_vcpus(b.guest, want)
                self.say(f"vCPUs of the guest {'capped to ' + str(want) + '%' if want else 'uncapped'} for {name}")
                state["cap"] = want

        return (lambda point: to(self._instance(point.instance).vcpu_cap, point.instance),
                lambda: to(self._instance(booted).vcpu_cap, booted))

    def _off_vcpus(self, b: session.Booted) -> tuple[int, ...]:
        """This machine's CPUs that hold no vCPU of the guest, where a local wrk is kept: a wrk the
        scheduler puts on a vCPU's CPU takes time from the guest, by chance, differently at each
        boot (none when the guest runs elsewhere or its vCPUs take every CPU)."""
        if not for_uri(self.cfg.guest.uri).local:
            return ()
        path = f"{sysfs.CPU}/online"
        online = cpus.parse_cpulist(self.root.read_text(path).strip(), path)
        free = tuple(c for c in online if c not in b.pinning["planned_vcpus"])
        return free if free and len(free) < len(online) else ()

    def _fail(self, s: Session, error: str) -> None:
        """A session that could not measure: recorded, and each of its missing points as failed."""
        self.say(f"FAILED {s.instance} iteration {s.iteration}: {error}")
        self.run.append({"kind": "session", "instance": s.instance, "iteration": s.iteration, "ok": False,
                         "error": error})
        done = self.run.completed()
        for p in s.points:
            if p.key not in done:
                load = ({"kind": "load", "percent": p.percent} if p.percent else
                        {"kind": "syscalls"} if p.counted else {"kind": "profile"} if p.profiled
                        else {"kind": "measurement"})
                self.run.append({**load, "key": p.key, "instance": p.instance, "connections": p.connections,
                                 "iteration": p.iteration, "ok": False, "attempts": 0, "error": error,
                                 "failed_attempts": []})
                self.tally["failed"] += 1

    def _more(self, s: Session) -> Callable[[], list[plan.Point]] | None:
        """With the adaptive search: after each round of a session's points, what the search wants next
        of this boot's iteration and instances (the baseline's boot walks the whole ladder)."""
        if self.cfg.sweep.search != "adaptive":
            return None
        riding = rides(self.cfg)
        return lambda: [p for p in plan.adaptive(self.cfg, self.run.records())
                        if p.iteration == s.iteration and riding.get(p.instance, p.instance) == s.instance]

    def _loads(self, s: Session) -> Callable[[], list[plan.Point]]:
        """After a session's sweep: the open-loop and counted points of its iteration and instances."""
        riding = rides(self.cfg)
        return lambda: [p for p in at_peak.after_sweep(self.cfg, self.run.records(), s.iteration)
                        if riding.get(p.instance, p.instance) == s.instance]

    def _idle_of(self, s: Session) -> dict[str, Any] | None:
        """The baseline's sessions, when the run has a control: their guests' vCPU time without load is
        what the control's expectation leaves out of the cap (analysis/variants.py)."""
        if self.cfg.control.cap and s.instance == self.cfg.instance[0].name:
            return {"instance": s.instance, "iteration": s.iteration}
        return None

    def _changes_nothing(self, s: Session, b: session.Booted) -> str | None:
        """Why a study's leave-one-out instance need not be measured: its guest reports the same
        mitigations as the reference's (its switch does nothing on this CPU and kernel), or None. The
        hypervisor's switches are never judged so: what a QEMU or a KVM changes, its guest need not report."""
        ref = self.cfg.instance[0].name
        if s.instance not in derived.study_variants(self.cfg) or not s.instance.startswith("no-") or any(
                p.instance != s.instance for p in s.points) or s.instance.removeprefix("no-") in switches.HYPERVISOR:
            return None
        facts = self.run.manifest.get("instances", {}).get(ref)
        if not isinstance(facts, dict) or not provenance.same_mitigations(facts, b.facts):
            return None
        return (f"its guest reports the same vulnerabilities, boot-log mitigations and CPU flags as {ref}'s: "
                f"{s.instance.removeprefix('no-')} changes nothing on this CPU and kernel")

    def _drop(self, name: str, iteration: int, why: str) -> None:
        """`name` measured no more: recorded (the plan offers none of its points again), and with it
        each study instance that the switches dropped so far leave standing for another."""
        st = self.cfg.study
        gone = plan.dropped(self.run.records()) | {name}
        off = {n.removeprefix("no-") for n in gone if n.startswith("no-")}
        more = [(other, f"it differs from {same} only in switches that change nothing here ({', '.join(sorted(off))}): "
                        f"{same}'s points stand for it")
                for other, same in derived.stand_ins(st.switches, st.one_on, off, self.cfg.instance[0].name).items()
                if other not in gone]
        for n, reason in [(name, why), *more]:
            self.say(f"{n} dropped before it is measured: {reason}")
            self.run.append({"kind": "dropped", "instance": n, "iteration": iteration, "reason": reason})

    def _boot(self, s: Session, inst: InstanceSection, lost: list[str]) -> session.Booted:
        """The session's guest, booted once more where the first was lost after its agent answered
        (stopped.GuestLost, said and kept in `lost`): one such guest would cost a host boot its measurement
        (an L2 under 7.3 in the rig's L1 ended so in two of four clean clones, its cause untraced)."""
        try:
            return session.boot(self.root, self.cfg, inst, self.image, self.say, self.owner)
        except stopped.GuestLost as exc:
            lost.append(exc.message)
            self.say(f"{s.instance}, iteration {s.iteration}: its guest was lost after its agent answered; "
                     f"booting it once more: {exc.message.splitlines()[0]}")
        return session.boot(self.root, self.cfg, inst, self.image, self.say, self.owner)

    def _session(self, s: Session, label: str) -> None:
        self.say(f"{label} {s.instance}, iteration {s.iteration}: booting its guest")
        inst = self._instance(s.instance)
        lost: list[str] = []
        try:
            b = self._boot(s, inst, lost)
        except HarnessError as exc:
            before = f" (booted once more: the first was lost: {lost[0].splitlines()[0]})" if lost else ""
            self._fail(s, f"the guest did not boot: {exc.message}{before}")
            return
        try:
            for name in dict.fromkeys([s.instance, *(p.instance for p in s.points)]):
                note_guest(self.run, self.cfg, b, name, s.instance)
            # the guest's release is known once it runs: attack vectors on a kernel without them are refused
            if why := vectors.refused(str(b.facts.get("cmdline") or inst.cmdline), str(b.facts.get("kernel") or "")):
                raise HarnessError(f"instance {s.instance}: {why}", vectors.HINT)
            if why := self._changes_nothing(s, b):
                self._drop(s.instance, s.iteration, why)
                return
            if b.pinning["ok"] is False:
                self.say(f"WARNING: the guest's QEMU threads are not held to the planned CPUs: {b.pinning}")
            g = self.cfg.guest
            cfg = dataclasses.replace(self.cfg, server=dataclasses.replace(
                self.cfg.server, listen=f"{b.address}:{g.port}", url=f"http://{b.address}:{g.port}/"))
            target = access.guest_target(b.guest.uri, b.guest.uuid, b.guest.name)
            vfio = profile.load(cfg.tuning.profile).vfio_irqs == "off-vcpus"  # the host's profile: its IRQs
            with tuning.tuned(inst.profile or cfg.tuning.profile, [tuning.Place("guest", target, (b.iface,))],
                              self.root, self.say, self.owner) as tuned, \
                    session.host_irqs(self.root, cfg, b, self.say, self.owner, vfio) as irqs:
                if irqs.get("note") and irqs["note"] not in self.said and cfg.guest.bdf:
                    self.said.add(irqs["note"])
                    self.say(f"note: {irqs['note']}")
                self.run.append({"kind": "session", "instance": s.instance, "iteration": s.iteration, "ok": True,
                                 "riders": sorted({p.instance for p in s.points} - {s.instance} |
                                                  {n for n, on in rides(self.cfg).items() if on == s.instance}),
                                 "kvm": b.guest.kvm, "boot_seconds": b.guest.boot_seconds,
                                 "address": b.address, "iface": b.iface,
                                 "kernel": b.facts.get("kernel"), "cmdline": b.facts.get("cmdline"),
                                 "pinning": b.pinning, "tuning": tuned, "host_irqs": irqs,
                                 "qemu": {**self.run.manifest.get("qemu", {}).get(s.instance, {}), "exe": b.emulator},
                                 **({"host_knobs": b.knobs.report} if b.knobs and b.knobs.report else {}),
                                 **({"lost_before": lost} if lost else {})})
                clock = provenance.clocksource(b.machine)  # after tuning, which may set it
                cap_for, cap_booted = self._capper(b, s.instance)
                got = sweep.Sweep(cfg, self.run, self.root, self.say, self.owner, server_on=b.machine,
                                  local_cpus=self._off_vcpus(b),
                                  vcpu_probe=lambda: running.vcpu_seconds(b.guest),
                                  qemu_threads=lambda: running.qemu_threads(b.guest),
                                  kvm_counters=(lambda: running.kvm_counters(b.guest)) if b.guest.kvm else None,
                                  host_on=for_uri(b.guest.uri), host_devices=g.bdf,
                                  before_point=cap_for, as_booted=cap_booted, shares=rides(self.cfg),
                                  idle_of=self._idle_of(s)).execute(list(s.points), self._more(s),
                                                                                        self._loads(s))
                self.run.append({"kind": "clock", "instance": s.instance, "iteration": s.iteration,
                                 "at_start": clock, "at_end": provenance.clocksource(b.machine)})
            self.tally["ok"] += got["ok"]
            self.tally["failed"] += got["failed"]
        except HarnessError as exc:
            self._fail(s, exc.message)
        finally:
            session.shutdown(self.root, b.guest, b.machine, self.cfg, self.say, b.knobs)

    def _kept(self, points: list[plan.Point]) -> list[plan.Point]:
        return points if self.keep is None else [p for p in points if self.keep(p)]

    def _measure(self) -> None:
        done = self.run.completed()
        todo = self._kept(plan.todo(self.cfg, self.run.records(), done) + at_peak.after_sweep(self.cfg,
                                                                                              self.run.records()))
        first = self.cfg.sweep.variants == "peak" and record_check.load_target(self.run.records()) is None
        self.say(f"{len(todo)} points to measure{' first (the others then at the peak they find)' if first else ''} "
                 f"({len(done)} already in {self.run.path})")
        offered = False  # the open-loop points left after the sweep (a failed boot's), offered once more
        before = 0  # the sessions of the rounds before this one
        with progress.Progress("guest sessions", None) as bar:
            while todo:
                groups = sessions(todo, rides(self.cfg))
                bar.grow(len(groups))
                for n, s in enumerate(groups, before + 1):
                    records = list(self.run.records())
                    tried = {r["key"] for r in records if r.get("kind") in POINTS}
                    # an earlier session measured them, or a study dropped the instance since the round began
                    if all(p.key in tried for p in s.points) or s.instance in plan.dropped(records):
                        bar.advance()
                        continue
                    self._session(s, f"[{n}/{before + len(groups)}]")
                    bar.advance()
                before += len(groups)
                todo, why = plan.after_round(self.cfg, self.run.records())
                todo = self._kept(todo)
                if why:
                    self.say(why)
                if not todo and not offered:
                    todo, offered = self._kept(at_peak.after_sweep(self.cfg, self.run.records())), True

    def execute(self, keep_host: bool) -> dict[str, int]:
        """Everything; the caller holds the host lock."""
        ops.reclaim(self.root, self.say)
        if self.keep is None:  # with host boots the host's state differs by design: the arrivals say it
            hostrecord.start(self.run, self.root, self.cfg.guest.uri)
        self.image = ensure_image(self.cfg, self.run, self.say)
        since = hostprep.prepare_host(self.root, self.cfg, self.say, self.owner)
        try:
            self.run.update_manifest(host={**provenance.facts(for_uri(self.cfg.guest.uri)),
                                           **provenance.libvirt_versions(self.cfg.guest.uri)})
            with tuning.tuned(self.cfg.tuning.profile, self._host_places(), self.root, self.say,
                              self.owner) as tuned:
                self.run.update_manifest(tuning=tuned)
                self._measure()
        finally:
            if keep_host and since is not None:
                hostprep.keep_host(self.root, since, self.owner)
                self.say("the host stays prepared (--keep-host): undo with vmharness host-restore")
            else:
                for problem in hostprep.restore_host(self.root, since, self.say):
                    self.say(f"NOT RESTORED: {problem}")
        if self.keep is None:
            hostrecord.end(self.run, self.root, self.cfg.guest.uri, self.say)
        self.run.update_manifest(ended=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), tally=self.tally)
        return self.tally
