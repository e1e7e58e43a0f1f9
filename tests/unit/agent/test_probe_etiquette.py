"""Unit: when the readiness probe connects and when it sends HTTP (fake clock, fake network)."""

from __future__ import annotations

from tunelab.agent.servers.probe import ProbeResult, ReadinessProbe


class World:
    def __init__(self) -> None:
        self.now = 0.0
        self.port_open = False
        self.status = 503
        self.gets: list[float] = []
        self.connects = 0

    def accepts(self, port: int) -> bool:
        self.connects += 1
        return self.port_open

    def get(self, port: int, path: str, model: str) -> ProbeResult:
        if not self.port_open:
            return ProbeResult(False, "GET /health: ConnectionRefusedError: refused", 0)
        self.gets.append(self.now)
        return ProbeResult(200 <= self.status < 300, f"HTTP {self.status}", 1)


def run(probe: ReadinessProbe, world: World, until: float, step: float = 0.01) -> bool:
    while world.now < until:
        result = probe.poll()
        if result is not None and result.ready:
            return True
        world.now = round(world.now + step, 6)
    return False


def make(world: World) -> ReadinessProbe:
    return ReadinessProbe(
        8000, "/health", clock=lambda: world.now, accepts=world.accepts, get=world.get
    )


def test_closed_port_gets_only_tcp_connects_then_one_get_when_it_opens() -> None:
    world = World()
    probe = make(world)
    assert not run(probe, world, 30.0)  # 30 s of a vLLM importing torch
    assert world.gets == [] and probe.http_requests == 0
    assert 500 <= world.connects <= 700  # every 50 ms
    world.port_open, world.status = True, 200
    opened = world.now
    assert run(probe, world, 31.0)
    assert probe.http_requests == 1 and world.now - opened <= 0.06


def test_open_but_not_ready_backs_off_and_the_ready_line_brings_it_back() -> None:
    world = World()
    world.port_open = True  # SGLang: port open, /health 503 while warming up
    probe = make(world)
    assert not run(probe, world, 20.0)
    gaps = [round(b - a, 2) for a, b in zip(world.gets, world.gets[1:], strict=False)]
    assert gaps[:3] == [0.5, 1.0, 2.0] and max(gaps) == 2.0
    assert len(world.gets) <= 12  # 20 s of warm-up: about a dozen GETs, not 400
    probe.nudge()  # "The server is fired up and ready to roll!"
    world.status = 200
    start = world.now
    assert run(probe, world, 21.0)
    assert world.now - start <= 0.06


def test_refused_after_a_nudge_goes_back_to_tcp_connects() -> None:
    world = World()
    probe = make(world)
    probe.nudge()  # a ready line before the port is open (vLLM prints it just before)
    run(probe, world, 1.0)
    assert probe.http_requests == 0 and world.gets == []
