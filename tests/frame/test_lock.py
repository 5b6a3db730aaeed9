"""The locks `make` and CI install from still satisfy pyproject.toml: a range changed without `make lock` fails."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCKS = sorted((REPO / "requirements").glob("lock-py3*.txt"))
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s\\;]+)")


def pins(lock: Path) -> dict[str, Version]:
    found = {}
    for line in lock.read_text().splitlines():
        match = PIN.match(line)
        if match:
            found[canonicalize_name(match.group(1))] = Version(match.group(2))
    return found


def requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(text) for text in project["dependencies"] + extras["cpu"] + extras["ray"] + extras["dev"]]


def test_there_is_a_lock_for_every_supported_python_and_this_one():
    assert [lock.name for lock in LOCKS] == [f"lock-py3{minor}.txt" for minor in (10, 11, 12, 13)]
    assert (REPO / "requirements" / f"lock-py{sys.version_info[0]}{sys.version_info[1]}.txt") in LOCKS


@pytest.mark.parametrize("lock", LOCKS, ids=lambda path: path.name)
def test_every_locked_pin_satisfies_pyproject(lock: Path):
    locked = pins(lock)
    python = lock.stem.removeprefix("lock-py")
    environment = {"python_version": f"{python[0]}.{python[1:]}", "sys_platform": "linux", "platform_machine": "x86_64"}
    for requirement in requirements():
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{lock.name}: {requirement.name} is not locked; run `make lock`"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"{lock.name}: {name}=={locked[name]} is outside {requirement}; run `make lock`"
        )


@pytest.mark.parametrize("lock", LOCKS, ids=lambda path: path.name)
def test_every_pin_has_hashes(lock: Path):
    blocks = re.split(r"\n(?=[A-Za-z0-9_.\-]+==)", lock.read_text())
    pinned = [block for block in blocks if PIN.match(block.strip())]
    assert pinned and all("--hash=sha256:" in block for block in pinned)
