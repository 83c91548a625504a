"""The cores `auto` counts: the affinity, narrowed by a cgroup CPU quota (v2 `cpu.max`, v1 CFS files), read
from cgroup trees laid out as the kernel mounts them (cgroup-v2.rst, sched-bwc.rst in the kernel's docs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cliffwatch.adapters.distributed.cpu_limit import cpu_quota, usable_cores


def tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def membership(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proc-self-cgroup"
    path.write_text(text)
    return path


def test_a_v2_quota_is_quota_over_period_and_max_is_no_limit(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    tree(root, {"cpu.max": "250000 100000\n"})
    assert cpu_quota(root, membership(tmp_path, "0::/\n")) == 2.5
    tree(root, {"cpu.max": "max 100000\n"})
    assert cpu_quota(root, membership(tmp_path, "0::/\n")) is None


def test_the_smallest_limit_along_the_cgroup_path_counts(tmp_path: Path) -> None:
    """A parent's limit binds its children: kubepods.slice at 4 CPUs, the pod at 1.5."""
    root = tmp_path / "cgroup"
    tree(root, {"kubepods.slice/cpu.max": "400000 100000", "kubepods.slice/pod7/cpu.max": "150000 100000",
                "kubepods.slice/pod7/app/cpu.max": "max 100000"})  # fmt: skip
    assert cpu_quota(root, membership(tmp_path, "0::/kubepods.slice/pod7/app\n")) == 1.5


def test_a_v1_cfs_quota_counts_and_minus_one_is_no_limit(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    tree(root, {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "300000\n",
                "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"})  # fmt: skip
    text = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n"
    assert cpu_quota(root, membership(tmp_path, text)) == 3.0
    tree(root, {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "-1\n"})
    assert cpu_quota(root, membership(tmp_path, text)) is None


def test_inside_a_container_the_mount_itself_is_the_cgroup_its_path_names(tmp_path: Path) -> None:
    """Without a cgroup namespace the path names the host's hierarchy; the container sees its own at the
    mount point."""
    root = tmp_path / "cgroup"
    tree(root, {"cpu/cpu.cfs_quota_us": "200000", "cpu/cpu.cfs_period_us": "100000"})
    assert cpu_quota(root, membership(tmp_path, "3:cpu:/docker/0123abcd\n")) == 2.0


@pytest.mark.parametrize("text", ["", "0::/\n", "garbage\n", "1:cpu:/\n"])
def test_nothing_readable_is_no_limit(tmp_path: Path, text: str) -> None:
    assert cpu_quota(tmp_path / "cgroup", membership(tmp_path, text)) is None
    assert cpu_quota(tmp_path / "cgroup", tmp_path / "missing") is None


def test_a_malformed_file_is_no_limit(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    tree(root, {"cpu.max": "lots\n"})
    assert cpu_quota(root, membership(tmp_path, "0::/\n")) is None


def test_usable_cores_is_the_affinity_narrowed_by_the_quota_rounded_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    root, proc = tmp_path / "cgroup", membership(tmp_path, "0::/\n")
    tree(root, {"cpu.max": "250000 100000"})
    assert usable_cores(root, proc) == 2  # a pod limited to 2.5 CPUs on a 64-core node
    tree(root, {"cpu.max": "50000 100000"})
    assert usable_cores(root, proc) == 1  # half a CPU: still one core to send from
    tree(root, {"cpu.max": "max 100000"})
    assert usable_cores(root, proc) == 64
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    tree(root, {"cpu.max": "800000 100000"})
    assert usable_cores(root, proc) == 2  # a quota above the affinity does not add cores


def test_this_machine_reads_without_error() -> None:
    assert 1 <= usable_cores() <= len(os.sched_getaffinity(0))
