"""A local Ray cluster for the tests: two nodes on this machine (``ray.cluster_utils.Cluster``, one raylet each,
one CPU each), started once per test module by the ``ray_cluster`` fixture (tests/conftest.py) and joined by this
process, as the Ray docs advise for testing multi-node behaviour on one machine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cliffwatch.adapters.distributed.ray_launcher import RayCluster, connect, leave

SMALL_STORE = 80 * 1024 * 1024  # the object store holds nothing of ours: the least Ray accepts


@dataclass(frozen=True, kw_only=True)
class LocalRay:
    address: str  # the head's GCS address, as ``--ray`` and ``CLIFFWATCH_RAY_ADDRESS`` take it
    found: RayCluster  # as this (the test) process joined it


@contextmanager
def local_ray(nodes: int = 2) -> Iterator[LocalRay]:
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": SMALL_STORE, "include_dashboard": False},
    )
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=1, object_store_memory=SMALL_STORE)
        yield LocalRay(address=cluster.address, found=connect(cluster.address))
    finally:
        leave()  # ray.shutdown(), and its ports no longer denied: they are anyone's once the cluster is gone
        cluster.shutdown()
