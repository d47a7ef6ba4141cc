"""The real tools some tests drive (Debian packages, installed by `.ci/install-test-tools`,
which `make test` runs): a test that needs one and cannot find it skips, saying why."""

from __future__ import annotations

import shutil

import pytest

PACKAGES = {"prometheus": "prometheus", "promtool": "prometheus", "chromium": "chromium"}


def require(tool: str) -> str:
    """The tool's path, or skip the test naming the Debian package that provides it."""
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (Debian package {PACKAGES[tool]!r}; `.ci/install-test-tools` "
                    "installs it as root with apt-get, and `make test` runs that script)")
    return path
