# `make test` on a fresh Debian 12 machine: installs what it needs, then runs every test.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := python3-venv qemu-system-x86 qemu-utils qemu-guest-agent busybox-static kmod cpio \
                zstd pciutils pci.ids libvirt-daemon-system libvirt-clients libvirt-dev pkg-config \
                mmdebstrap e2fsprogs nginx-light wrk openssh-server openssh-client \
                ethtool chromium libhugetlbfs-bin linux-perf texlive-latex-base texlive-latex-recommended \
                slurm-wlm munge

.PHONY: deps venv oha inferno qemu-10 image test check lint bench demo clean
deps:
	@missing=$$(for p in $(APT_PACKAGES); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "installing:" $$missing; \
	    $(SUDO) apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]' --config-settings editable_mode=compat
	touch $@

venv: $(VENV)/.installed

# Tools built with cargo live once per machine, outside every clone: TOOLS/NAME-VERSION/bin, built the
# first time a clone asks for that version (a version bump builds the new one beside the old), then
# copied into the clone's .venv/bin, where a local client finds them. The build goes into a folder of
# its own and is renamed into place whole, under a lock, so two clones building at once neither race
# nor leave half a tool behind. --locked: the versions its release was tested with (a newer
# dependency may want a newer rustc than the machine's).
TOOLS := $(or $(VMHARNESS_TOOLS),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/vmharness/tools)
CARGO := $(shell command -v cargo || echo $(HOME)/.cargo/bin/cargo)
# $(call cargo-tool,CRATE,VERSION): the tool's folder in TOOLS, built there if it is not yet
define cargo-tool
	@[ -x "$(CARGO)" ] || { echo "cargo is needed to build $(1) (rustup.rs, or apt-get install cargo)"; exit 1; }
	@mkdir -p "$(TOOLS)"
	@flock "$(TOOLS)/.lock-$(1)" bash -c 'set -e; dst="$(TOOLS)/$(1)-$(2)"; [ -d "$$dst/bin" ] && exit 0; \
	    echo "building $(1) $(2) into $$dst (once per machine)"; tmp=$$(mktemp -d "$(TOOLS)/.build-$(1)-XXXXXX"); \
	    trap "rm -rf $$tmp" EXIT; chmod 755 "$$tmp"; PATH="$(dir $(CARGO)):$$PATH" "$(CARGO)" install --locked --quiet --root "$$tmp" $(1)@$(2); \
	    rm -f "$$tmp/.crates.toml" "$$tmp/.crates2.json"; mv -T "$$tmp" "$$dst"; trap - EXIT'
endef

# oha, the open-loop load generator (docs/load.md: measured against vegeta, autocannon and a paced wrk).
OHA_VERSION := 1.16.0
$(VENV)/bin/oha: | $(VENV)/.installed
	$(call cargo-tool,oha,$(OHA_VERSION))
	install -m 0755 "$(TOOLS)/oha-$(OHA_VERSION)/bin/oha" $@

oha: $(VENV)/bin/oha

# inferno, the flame-graph tools ([explain] profile: collapse-perf folds the guest's `perf script`,
# diff-folded and flamegraph draw each variant against the baseline).
INFERNO_VERSION := 0.12.8
$(VENV)/bin/inferno-flamegraph: | $(VENV)/.installed
	$(call cargo-tool,inferno,$(INFERNO_VERSION))
	install -m 0755 "$(TOOLS)/inferno-$(INFERNO_VERSION)"/bin/inferno-* $(VENV)/bin/

inferno: $(VENV)/bin/inferno-flamegraph

# A second QEMU beside the system's 7.2 (docs/run.md, "QEMU per instance"): 10.0 from bookworm-backports,
# unpacked once per machine into QEMU_CACHE/qemu-VERSION (tests/fetch-qemu.sh), where libvirt's QEMU user
# can run it (not under /root, where ~/.cache is when root runs make). tests/integration/test_two_qemus.py
# runs it beside 7.2 and fails if it is not there.
QEMU_CACHE := $(or $(VMHARNESS_QEMU_CACHE),/var/cache/vmharness)
# The mirror: the host's own for bookworm, as the guest image's (guest/recipe.py host_mirror).
qemu-10: venv
	@$(SUDO) bash tests/fetch-qemu.sh "$(QEMU_CACHE)" bookworm-backports 10 \
	    "$$($(PY) -c 'from vmharness.guest.recipe import host_mirror; print(host_mirror("bookworm"))')"

# The suite as two streams side by side (tests/streams.py: the nested-VM rig's tests beside the rest);
# PYTEST_ARGS go to every pytest. `$(VENV)/bin/pytest` alone runs it all one test at a time. The guest
# image is built while cargo builds the tools, instead of after them (tests.streams then finds it built).
test: deps venv
	$(MAKE) --no-print-directory -j3 --output-sync=target oha inferno image qemu-10
	$(PY) -m tests.streams $(PYTEST_ARGS)

image: venv
	$(PY) -m vmharness.cli image build

# The fast tier, for every edit: the unit tests, ruff, mypy, the import contracts and the size check; no
# VM, no daemon (inferno, which the profile tests run, is copied from the per-machine cache first). Two
# pytests side by side (tests/streams.py --check): the modules that use this machine's /run/vmharness
# and /tmp in one, the rest in the other; docs/testing.md ("The fast tier's time") has the figures.
# Python's bytecode is kept once per machine outside the clone (PYCACHE), also where the environment
# says PYTHONDONTWRITEBYTECODE, which had every interpreter of the run compile the harness again.
PYCACHE := $(or $(VMHARNESS_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/vmharness)/pycache
check: venv inferno
	env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX="$(PYCACHE)" \
	    $(PY) -m tests.streams --check -q

# The built-in experiment (vmharness run with no configuration): guests with mitigations=off, with
# pti=on forced, and the positive control, under libvirt (started for the run if none answers), nginx
# in them loaded by wrk here, and the report; it prints where the report is.
demo: deps venv oha inferno
	$(PY) -m vmharness.host.libvirt.daemon $(VENV)/bin/vmharness run

# Figures, not pass/fail: the fixed costs of a guest's life beside virtme-ng's (libvirtd is started if
# none answers), what batching the commands into a guest saves at each boot, how closely `bench` reproduces plain wrk, with what its samplers cost, and the time
# the adaptive search takes to the answer against the grid, the open-loop generators side by side, the
# hostile tables' commands forked from a preloaded server against fresh interpreters, a command's
# start with its own group's parser against every group's, the rig's L1 switched with kexec, and an
# image of a researcher's kernel built by mmdebstrap against one from the recipe's kept base tree.
GENERATORS := .cache/generators
bench: deps venv oha
	$(PY) -m pip install -q -e '.[test,bench]' --config-settings editable_mode=compat
	install -D -m 0755 "$(TOOLS)/oha-$(OHA_VERSION)/bin/oha" $(GENERATORS)/bin/oha
	GOBIN=$(CURDIR)/$(GENERATORS)/bin go install github.com/tsenart/vegeta/v12@v12.13.0
	npm install --silent --prefix $(GENERATORS) autocannon@8.0.0
	$(PY) benchmarks/load_generators.py --bin $(GENERATORS)
	$(PY) -m vmharness.cli image build
	$(PY) -m vmharness.host.libvirt.daemon $(PY) benchmarks/boot_to_agent.py --boots 3
	$(PY) -m vmharness.host.libvirt.daemon $(PY) benchmarks/guest_round_trips.py
	$(PY) benchmarks/bench_fidelity.py
	$(PY) benchmarks/time_to_answer.py
	$(PY) benchmarks/hostile_cases.py
	$(PY) benchmarks/command_start.py
	$(PY) -m benchmarks.l2_accel
	$(PY) -m benchmarks.host_switch
	$(PY) -m benchmarks.kernel_image

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache .pytest_cache
