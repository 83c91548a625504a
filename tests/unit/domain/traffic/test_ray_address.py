"""Ray addresses: the forms cliffwatch joins, and a reason for every other."""

from __future__ import annotations

import pytest

from cliffwatch.domain.traffic.ray_address import ray_address_problem


@pytest.mark.parametrize(
    "address", ["auto", "127.0.0.1:6379", "ray-head.ray.svc:6379", "ray://10.0.0.7:10001", "[::1]:6379"]
)
def test_the_forms_ray_joins_are_accepted(address: str) -> None:
    assert ray_address_problem(address) is None


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("", "is not auto, HOST:PORT or ray://HOST:PORT"),
        ("head", "is not auto, HOST:PORT or ray://HOST:PORT"),
        (":6379", "is not auto, HOST:PORT or ray://HOST:PORT"),
        ("my head:6379", "is not auto, HOST:PORT or ray://HOST:PORT"),
        ("head:port", "the port must be a number from 1 to 65535"),
        ("head:0", "the port must be a number from 1 to 65535"),
        ("ray://head:70000", "the port must be a number from 1 to 65535"),
    ],
)
def test_anything_else_is_refused_with_its_reason(address: str, reason: str) -> None:
    problem = ray_address_problem(address)
    assert problem is not None
    assert reason in problem
    assert repr(address) in problem
