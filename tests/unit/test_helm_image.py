"""deploy/Dockerfile agrees with the repository and the chart (no Docker here to build it):
what it copies exists and is not ignored, the plugin lands where the agent's init container
looks, the user is the chart's non-root uid, the base is pinned."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"
CHART = ROOT / "deploy" / "helm" / "commwatch"
PLUGIN = "libnccl-profiler-commwatch.so"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def ignored(path: str) -> bool:
    patterns = [p.strip() for p in IGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")]
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        pattern = pattern.removeprefix("**/")
        if any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(Path(p).name, pattern) for p in prefixes):
            return True
    return False


def test_copied_sources_exist_and_are_in_the_build_context():
    copies = [rest for word, rest in instructions() if word == "COPY" and not rest.startswith("--from")]
    assert copies
    for rest in copies:
        *sources, _dest = rest.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert not ignored(source.rstrip("/")), f"{source} is excluded by {IGNORE.name}"
    assert ignored("nccl-patch/build/" + PLUGIN) and ignored(".venv/bin/python")


def test_plugin_is_built_and_lands_where_the_agent_copies_it_from():
    steps = instructions()
    assert any(w == "RUN" and "make -C nccl-patch" in r for w, r in steps)
    assert f"LIBNAME := {PLUGIN}" in (ROOT / "nccl-patch" / "Makefile").read_text()
    copied = [r.split()[-1] for w, r in steps if w == "COPY" and r.startswith("--from=plugin")]
    assert copied == [f"/opt/commwatch/lib/{PLUGIN}"]
    agent = (CHART / "templates" / "agent.yaml").read_text()
    assert f"cp -f /opt/commwatch/lib/{PLUGIN}" in agent


def test_runs_as_the_charts_non_root_user():
    steps = instructions()
    uid = next(r.split("=")[1] for w, r in steps if w == "ARG" and r.startswith("COMMWATCH_UID="))
    assert [r for w, r in steps if w == "USER"] == ["${COMMWATCH_UID}:${COMMWATCH_UID}"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert int(uid) == values["podSecurityContext"]["runAsUser"] != 0
    assert [r for w, r in steps if w == "ENTRYPOINT"] == ['["commwatch"]']


def test_base_image_is_pinned_and_matches_the_python_requirement():
    steps = instructions()
    base = next(r.split("=", 1)[1] for w, r in steps if w == "ARG" and r.startswith("PYTHON_IMAGE="))
    m = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-\w+", base)
    assert m, f"{base} is not pinned to a patch release"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={m.group(1)}.{m.group(2)}"
    froms = [r for w, r in steps if w == "FROM"]
    assert len(froms) == 3 and all(f.startswith("${PYTHON_IMAGE}") for f in froms)


def test_chart_app_version_is_the_package_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]
