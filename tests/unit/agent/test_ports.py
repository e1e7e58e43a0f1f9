"""Auto ports: below the ephemeral range, outside the reserved ports, never twice while held.

A fixture root stands in for /proc/sys/net/ipv4 and a set stands in for what listens, so no
socket is bound (the layer of tests/unit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab.agent.errors import Unavailable
from tunelab.agent.servers.ports import PORT_RANGE, RESERVED_PORTS, WINDOW_LOW, PortPool
from tunelab.agent.system import System


def host(tmp_path: Path, port_range: str = "32768\t60999", reserved: str = "") -> System:
    for name, text in ((PORT_RANGE, port_range), (RESERVED_PORTS, reserved)):
        path = tmp_path / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return System(tmp_path)


def test_auto_ports_are_below_the_ephemeral_range_and_outside_the_reserved_ports(
    tmp_path: Path,
) -> None:
    system = host(tmp_path, "30000 60999", f"{WINDOW_LOW},{WINDOW_LOW + 2}-{WINDOW_LOW + 4}")
    listening = {WINDOW_LOW + 1}
    pool = PortPool(system, in_use=listening.__contains__, start=0)

    ports = [pool.take(f"run-{i}") for i in range(4)]

    assert ports == [WINDOW_LOW + 5, WINDOW_LOW + 6, WINDOW_LOW + 7, WINDOW_LOW + 8]
    assert all(p < 30000 for p in ports)


def test_a_held_port_is_never_handed_out_twice_and_comes_back_last_once_released(
    tmp_path: Path,
) -> None:
    system = host(tmp_path, f"{WINDOW_LOW + 3} 60999")  # a window of three ports
    pool = PortPool(system, in_use=lambda port: False, start=0)

    first, second = pool.take("a"), pool.take("b")
    assert pool.take("a") == first  # the holder's own port, not a second one
    third = pool.take("c", exclude=set())
    assert len({first, second, third}) == 3
    with pytest.raises(Unavailable, match="no free auto port"):
        pool.take("d")

    pool.release("b")
    assert pool.take("d") == second
    pool.hold("resumed", WINDOW_LOW + 10)  # a run adopted after a restart keeps its port
    assert pool.held()["resumed"] == WINDOW_LOW + 10


def test_ports_of_live_servers_are_skipped(tmp_path: Path) -> None:
    pool = PortPool(host(tmp_path), in_use=lambda port: False, start=0)
    assert pool.take("a", exclude={WINDOW_LOW, WINDOW_LOW + 1}) == WINDOW_LOW + 2


def test_two_pools_on_one_host_start_at_different_places(tmp_path: Path) -> None:
    """Two agents on one host once both picked the window's first port for servers that had
    not bound it yet (one failed ADDRESS_IN_USE): a pool now starts at a random offset."""
    system = host(tmp_path)
    firsts = {PortPool(system, in_use=lambda port: False).take("r") for _ in range(20)}
    assert len(firsts) > 1
    assert all(WINDOW_LOW <= port < 32768 for port in firsts)


def test_a_low_ephemeral_range_moves_the_window_down_but_never_below_1024(tmp_path: Path) -> None:
    pool = PortPool(host(tmp_path, "10000 60999"), in_use=lambda port: False)
    assert pool.window() == range(1024, 10000)
    assert PortPool(host(tmp_path, "1024 60999"), in_use=lambda port: False).window() == range(
        1024, 1024
    )


def test_an_unreadable_range_falls_back_to_the_kernel_default(tmp_path: Path) -> None:
    pool = PortPool(System(tmp_path / "empty"), in_use=lambda port: False)
    assert pool.window() == range(WINDOW_LOW, 32768)
