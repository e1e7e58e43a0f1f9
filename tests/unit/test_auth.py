"""Unit: listen-address rules shared by the agent and the controller."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab.common.auth import (
    AuthConfigError,
    ServerAuth,
    is_loopback,
    read_token,
    split_host_port,
)


@pytest.mark.parametrize(
    ("address", "expected"),
    [("127.0.0.1:50051", ("127.0.0.1", 50051)), ("[::1]:9", ("::1", 9)), ("gpu-1:0", ("gpu-1", 0))],
)
def test_split_host_port(address: str, expected: tuple[str, int]) -> None:
    assert split_host_port(address) == expected


@pytest.mark.parametrize("address", ["50051", ":50051", "host:port", "host:70000"])
def test_split_host_port_rejects(address: str) -> None:
    with pytest.raises(ValueError):
        split_host_port(address)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("10.0.0.5", False)],
)  # fmt: skip
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_exposed_listener_needs_a_token_or_client_ca(tmp_path: Path) -> None:
    with pytest.raises(AuthConfigError, match=r"refusing to listen on 0\.0\.0\.0:1"):
        ServerAuth().check_listen("0.0.0.0:1")
    ServerAuth(token="t").check_listen("0.0.0.0:1")
    ServerAuth(tls_cert=tmp_path, tls_key=tmp_path, tls_client_ca=tmp_path).check_listen(
        "0.0.0.0:1"
    )
    ServerAuth().check_listen("127.0.0.1:1")
    with pytest.raises(AuthConfigError, match="together"):
        ServerAuth(tls_cert=tmp_path).check_listen("127.0.0.1:1")
    # server TLS alone encrypts but does not say who the caller is: not enough to expose it
    with pytest.raises(AuthConfigError):
        ServerAuth(tls_cert=tmp_path, tls_key=tmp_path).check_listen("0.0.0.0:1")


def test_read_token(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("  abc \n")
    assert read_token(tmp_path / "t") == "abc"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(AuthConfigError, match="empty"):
        read_token(tmp_path / "empty")
    with pytest.raises(AuthConfigError, match="missing"):
        read_token(tmp_path / "missing")
    assert read_token(None) is None
