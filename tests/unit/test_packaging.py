"""`pip install .` (not editable) gives a harness that finds its data inside the installed package:
the wheel is built from a copy of the sources (the checkout is left as it is), installed into a fresh
venv, and run from a folder outside the checkout. The runtime dependencies come from this venv's
site-packages by a .pth line (a line in a .pth adds the folder only: this venv's editable vmharness,
itself a .pth, is not followed), so nothing is downloaded."""

from __future__ import annotations

import json
import shutil
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness.guest.recipe import load_recipe
from vmharness.system import proc

SOURCES = Path(__file__).resolve().parents[2]


class Installed:
    def __init__(self, venv: Path, site: Path, work: Path) -> None:
        self.venv, self.site, self.work = venv, site, work

    def run(self, *argv: str | Path) -> proc.Result:
        # the environment of a user's shell: nothing points back at the checkout
        return proc.run([str(a) for a in argv], timeout=120, check=False, cwd=self.work,
                        env={"PYTHONPATH": "", "PYTHONDONTWRITEBYTECODE": "1"})


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("packaging")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(SOURCES / name, src / name)
    shutil.copytree(SOURCES / "vmharness", src / "vmharness", ignore=shutil.ignore_patterns("__pycache__"))
    proc.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
              "-w", tmp / "wheel", src], timeout=300)
    wheel = next((tmp / "wheel").glob("vmharness-*.whl"))
    venv = tmp / "venv"
    proc.run([sys.executable, "-m", "venv", "--without-pip", venv], timeout=120)
    proc.run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", "--no-deps",
              "--no-index", wheel], timeout=300)
    site = Path(proc.run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         timeout=60).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp / "elsewhere"
    work.mkdir()
    return Installed(venv, site, work)


def test_the_installed_command_answers_help(installed: Installed) -> None:
    res = installed.run(installed.venv / "bin" / "vmharness", "--help")
    assert res.ok, res.stderr
    assert "usage: vmharness" in res.stdout and "host-prepare" in res.stdout


def test_the_data_files_resolve_inside_the_installed_package(installed: Installed) -> None:
    script = textwrap.dedent("""
        import json
        import vmharness
        from vmharness import data
        from vmharness.bench import bench, server, wrk
        from vmharness.guest.recipe import load_recipe
        recipe = load_recipe()
        print(json.dumps({
            "package": vmharness.__file__,
            "files": [str(p) for p in (data.NGINX_TEMPLATE, wrk.REPORT_LUA, data.DEFAULT_RUN,
                                       data.IMAGE_RECIPE / "recipe.toml", data.IMAGE_RECIPE / "hooks" / "customize.sh",
                                       data.IMAGE_RECIPE / "overlay" / "usr" / "local" / "sbin" / "vmh-init")],
            "recipe_key": recipe.key(),
            "nginx": server.render(server.ServerConfig()),
            "harness": bench.harness_version(),
        }))
    """)
    res = installed.run(installed.venv / "bin" / "python", "-c", script)
    assert res.ok, res.stderr
    got = json.loads(res.stdout)
    assert Path(got["package"]).resolve().is_relative_to(installed.site.resolve())
    for name in got["files"]:
        path = Path(name)
        assert path.is_file(), name
        assert path.resolve().is_relative_to(installed.site.resolve()), f"{name} is not in the installed package"
    executable = [Path(got["files"][4]), Path(got["files"][5])]
    assert all(p.stat().st_mode & 0o111 for p in executable), "the hook and the minimal init stay executable"
    assert got["recipe_key"] == load_recipe().key(), "the same recipe files as in the checkout"
    assert "worker_processes auto;" in got["nginx"]
    assert got["harness"]["git"] == "unknown", "an installed copy names no commit"


def test_the_built_in_experiment_prints_its_domains_from_the_installed_package(installed: Installed,
                                                                               tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "root", nodes=1, cpus_per_node=4)
    res = installed.run(installed.venv / "bin" / "vmharness", "run", "--print-xml", "--host-root", host.base)
    assert res.ok, res.stderr
    assert "Traceback" not in res.stderr
    assert res.stdout.count("<domain ") == 5, "the built-in study's five instances (the control too)"
    assert f'image="{load_recipe().key()}"' in res.stdout, "the shipped recipe names the image"


def test_a_folder_that_is_no_checkout_has_an_unknown_commit(tmp_path: Path) -> None:
    from vmharness.bench import bench

    assert bench.harness_version()["git"] != "unknown", "this checkout names its commit"
    (tmp_path / ".git").mkdir()  # a repository without the project in it
    assert bench.harness_version(tmp_path)["git"] == "unknown"
    assert bench.harness_version(tmp_path / "absent")["git"] == "unknown"
