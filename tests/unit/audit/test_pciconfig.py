"""Golden tests: the config-space decoder against what lspci printed for the same bytes."""

from __future__ import annotations

import re

import pytest

from tests.fixtures.audit.hostbuilder import PCI, h200_config
from tunelab.agent.audit.pciconfig import (
    DEVCTL_FLR_BIT,
    AcsCap,
    ConfigSpaceError,
    PcieCap,
    Truncated,
    decode,
    setpci_readrq_command,
)
from tunelab.agent.audit.pcidump import DumpError, parse_dump

DUMPS = sorted(PCI.glob("lspci-*.txt"))
FUNCTIONS = [(d.name, f) for d in DUMPS for f in parse_dump(d.read_text())]
_SPEED = re.compile(r"Speed ([\d.]+)GT/s")
_WIDTH = re.compile(r"Width x(\d+)")


def _line(text: list[str], prefix: str) -> str | None:
    return next((line for line in text if line.startswith(prefix)), None)


@pytest.mark.parametrize(
    ("dump", "function"), FUNCTIONS, ids=[f"{d}:{f.bdf}" for d, f in FUNCTIONS]
)
def test_decode_matches_lspci_text(dump: str, function: object) -> None:
    from tunelab.agent.audit.pcidump import DumpedFunction

    assert isinstance(function, DumpedFunction)
    cap = decode(function.config).pcie()
    assert isinstance(cap, PcieCap)
    devctl = _line(function.text, "MaxPayload")
    if devctl is None:  # the PLX dump has hex only: its source line states the decode
        assert (cap.offset, cap.devctl, cap.max_payload, cap.max_read_request) == (
            0x68,
            0x0820,
            256,
            128,
        )
        assert (cap.link_speed_max, cap.link_width_max, cap.link_speed, cap.link_width) == (
            8.0,
            16,
            8.0,
            16,
        )
        return
    assert devctl == f"MaxPayload {cap.max_payload} bytes, MaxReadReq {cap.max_read_request} bytes"
    lnkcap, lnksta = _line(function.text, "LnkCap:"), _line(function.text, "LnkSta:")
    assert lnkcap is not None and lnksta is not None
    assert float(_SPEED.findall(lnkcap)[0]) == cap.link_speed_max
    assert int(_WIDTH.findall(lnkcap)[0]) == cap.link_width_max
    assert float(_SPEED.findall(lnksta)[0]) == cap.link_speed
    assert int(_WIDTH.findall(lnksta)[0]) == cap.link_width


def test_acs_control_matches_lspci_acsctl() -> None:
    _, root_port = next((d, f) for d, f in FUNCTIONS if f.bdf == "0000:00:02.0")
    acs = decode(root_port.config).acs()
    assert isinstance(acs, AcsCap)
    acsctl = _line(root_port.text, "ACSCtl:")
    assert acsctl is not None
    printed_on = [flag[:-1] for flag in acsctl.split()[1:] if flag.endswith("+")]
    assert acs.enabled == printed_on
    assert (acs.offset, acs.control) == (0x110, 0x001F)


def test_endpoints_have_no_acs_and_caps_sit_where_lspci_said() -> None:
    where = {f.bdf: decode(f.config).pcie() for _, f in FUNCTIONS}
    offsets = {bdf: cap.offset for bdf, cap in where.items() if isinstance(cap, PcieCap)}
    # ConnectX-3 at 0x60 (the "68.w" folklore), GP108M at 0x78, Intel NIC at 0xa0.
    assert offsets == {
        "0000:01:00.0": 0xA0,
        "0000:02:00.0": 0x78,
        "0000:00:02.0": 0x90,
        "0000:03:00.0": 0x60,
        "0000:07:00.0": 0x68,
    }
    gp108m = next(f for _, f in FUNCTIONS if f.bdf == "0000:02:00.0")
    assert decode(gp108m.config).acs() is None


def test_extended_chain_is_walked_in_link_order_not_ascending() -> None:
    plx = next(f for _, f in FUNCTIONS if f.bdf == "0000:07:00.0")
    offsets = [offset for offset, _ in decode(plx.config).extended_capabilities()]
    assert offsets == [0x100, 0xFB4, 0x138, 0x10C, 0x148, 0xE00, 0xB00, 0xB70]


def test_h200_capture_decodes_to_what_the_host_reported() -> None:
    cfg = decode(h200_config())
    cap = cfg.pcie()
    assert isinstance(cap, PcieCap)
    assert (cfg.vendor_id, cfg.device_id) == (0x10DE, 0x2335)
    assert (cap.offset, cap.devctl, cap.max_read_request, cap.max_payload) == (
        0x60,
        0x5134,
        4096,
        256,
    )
    assert (cap.link_speed_max, cap.link_width_max, cap.link_speed, cap.link_width) == (
        32.0,
        16,
        32.0,
        16,
    )


def test_first_64_bytes_are_reported_as_truncated() -> None:
    cfg = decode(h200_config()[:64])
    assert cfg.pcie() == Truncated(64)
    assert cfg.acs() == Truncated(64)
    with pytest.raises(ConfigSpaceError):
        decode(h200_config()[:32])


def test_a_capability_loop_is_an_error_not_a_hang() -> None:
    raw = bytearray(h200_config())
    first = raw[0x34]
    raw[first + 1] = first  # the first capability points at itself
    with pytest.raises(ConfigSpaceError, match="broken"):
        decode(bytes(raw)).pcie()


@pytest.mark.parametrize("size", [128, 256, 512, 1024, 2048, 4096])
def test_setpci_write_is_masked_to_readrq_and_never_sets_flr(size: int) -> None:
    command = setpci_readrq_command("0000:41:00.0", size)
    value, mask = (int(x, 16) for x in command.rsplit("=", 1)[1].split(":"))
    assert command.startswith("setpci -s 0000:41:00.0 CAP_EXP+8.w=")
    assert mask == 0x7000 and not (value | mask) & DEVCTL_FLR_BIT
    assert 128 << (value >> 12) == size


def test_setpci_rejects_sizes_devctl_cannot_hold() -> None:
    with pytest.raises(ValueError, match="4096"):
        setpci_readrq_command("0000:41:00.0", 8192)


def test_dump_parser_rejects_a_gap_in_the_rows() -> None:
    dump = "01:00.0 Thing\n00: " + " ".join(["00"] * 16) + "\n20: " + " ".join(["00"] * 16) + "\n"
    with pytest.raises(DumpError, match="jump"):
        _ = parse_dump(dump)[0].config
