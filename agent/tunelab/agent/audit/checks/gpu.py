"""GPU checks through NVML (``tunelab.agent.gpu``): driver, persistence, power limit, clock
events, ECC, and a GPU that reports work nobody is doing.

With ``--root`` these read nothing live: they SKIP unless a captured NVML snapshot is given.
"""

from __future__ import annotations

from collections.abc import Callable

from tunelab.agent.audit.checks.kernel import DRIVER_VERSION, parse_nvrm
from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.model import Evidence, Finding, Remediation, Status, ev, skip, worst
from tunelab.agent.gpu import GpuError, clock_event_names

# Throttle reasons that mean the board is protecting itself (DCGM ignores the rest by default).
CLOCK_EVENT_FAULTS = 0x8 | 0x20 | 0x40 | 0x80  # hw slowdown, sw thermal, hw thermal, power brake
FIRST_BLACKWELL_DEVICE_ID = 0x2900  # GB100 onwards; these GPUs need the open kernel module
# First driver whose open-module README lists the device (RTX PRO 6000 Blackwell).
MIN_DRIVER = {0x2BB5: "575.57.08", 0x2BB1: "570.133.07"}

PerGpu = Callable[[AuditContext, int, str, list[Evidence]], tuple[Status, str] | None]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def driver(ctx: AuditContext) -> Finding:
    gpus = ctx.pci.gpus
    if not gpus:
        return skip("no NVIDIA GPU on the PCI bus")
    version, is_open = parse_nvrm(ctx.system.read_text(DRIVER_VERSION))
    ids = {gpu.bdf: gpu.device or 0 for gpu in gpus}
    evidence = [
        ev(DRIVER_VERSION, version),
        *(ev(f"/sys/bus/pci/devices/{b}/device", f"0x{d:04x}") for b, d in ids.items()),
    ]
    if version is None:
        return Finding(
            Status.FAIL,
            f"{len(gpus)} NVIDIA GPU(s) on the bus but no driver loaded",
            "an NVIDIA driver bound to every GPU",
            evidence,
            Remediation(command="modprobe nvidia", persistent="install the driver for this kernel"),
        )
    flavor = "open kernel module" if is_open else "proprietary kernel module"
    problems: list[str] = []
    blackwell = [b for b, d in ids.items() if d >= FIRST_BLACKWELL_DEVICE_ID]
    if blackwell and not is_open:
        problems.append(f"{', '.join(blackwell)} need the open kernel module")
    for bdf, device_id in ids.items():
        floor = MIN_DRIVER.get(device_id)
        if floor and _version(version) < _version(floor):
            problems.append(f"{bdf} (10de:{device_id:04x}) needs driver >= {floor}")
    cuda = ""
    if ctx.gpu is not None and ctx.nvml_skip() is None:
        try:
            facts = ctx.gpu.system()
        except GpuError as exc:
            problems.append(f"NVML cannot talk to the driver: {exc}")
        else:
            cuda = f", CUDA {facts.get('cuda_driver_version')}"
            evidence.append(ev("nvml driver_version", facts.get("driver_version")))
            evidence.append(ev("nvml cuda_driver_version", facts.get("cuda_driver_version")))
    elif ctx.gpu is not None and ctx.system.is_live:
        problems.append(f"NVML unusable: {ctx.gpu.unavailable_reason() or 'no GPU visible'}")
    names = ", ".join(sorted({f"10de:{d:04x}" for d in ids.values()}))
    observed = f"{version} {flavor}{cuda}; {len(gpus)} GPU(s) {names}"
    if problems:
        return Finding(
            Status.FAIL,
            observed + ": " + "; ".join(problems),
            "a supported driver the GPUs and NVML can use",
            evidence,
            Remediation(persistent="install the nvidia-open driver branch that lists these GPUs"),
        )
    return Finding(Status.PASS, observed, "a supported driver the GPUs and NVML can use", evidence)


def _per_gpu(ctx: AuditContext, judge: PerGpu, expected: str, fix: Remediation) -> Finding:
    """Run ``judge`` per NVML device; the worst status wins, each GPU's line is kept."""
    skipped = ctx.nvml_skip()
    if skipped is not None or ctx.gpu is None:
        return skipped or skip("NVML not consulted")
    evidence: list[Evidence] = []
    lines: list[tuple[Status, str]] = []
    for index in range(ctx.gpu.device_count()):
        verdict = judge(ctx, index, ctx.gpu_label(index), evidence)
        if verdict is not None:
            lines.append(verdict)
    if not lines:
        return skip("not supported on these GPUs", evidence)
    status = worst(s for s, _ in lines)
    shown = (
        [text for s, text in lines if s is not Status.PASS]
        if status is not Status.PASS
        else [t for _, t in lines]
    )
    remediation = fix if status in (Status.WARN, Status.FAIL) else Remediation()
    return Finding(status, "; ".join(shown), expected, evidence, remediation)


def _persistence(
    ctx: AuditContext, i: int, label: str, evidence: list[Evidence]
) -> tuple[Status, str] | None:
    value = ctx.nvml_read(i, "persistence_mode")
    evidence.append(ev(f"nvml persistence_mode ({label})", value))
    if value is None:
        return None
    return (Status.PASS, f"{label} on") if value else (Status.WARN, f"{label} off")


def persistence(ctx: AuditContext) -> Finding:
    return _per_gpu(
        ctx,
        _persistence,
        "persistence on (driver state kept between processes)",
        Remediation(
            command="nvidia-smi -pm 1",
            persistent="systemctl enable --now nvidia-persistenced",
        ),
    )


def _power(
    ctx: AuditContext, i: int, label: str, evidence: list[Evidence]
) -> tuple[Status, str] | None:
    limit = ctx.nvml_read(i, "power_limit_watts")
    default = ctx.nvml_read(i, "power_default_limit_watts")
    evidence += [
        ev(f"nvml power_limit_watts ({label})", limit),
        ev(f"nvml power_default_limit_watts ({label})", default),
    ]
    if not isinstance(limit, int | float) or not isinstance(default, int | float):
        return None
    text = f"{label} {limit:g} W of default {default:g} W"
    return (Status.WARN, text) if limit < default else (Status.PASS, text)


def power_limit(ctx: AuditContext) -> Finding:
    commands = []
    if ctx.gpu is not None and ctx.nvml_skip() is None:
        for i in range(ctx.gpu.device_count()):
            limit, default = (
                ctx.nvml_read(i, "power_limit_watts"),
                ctx.nvml_read(i, "power_default_limit_watts"),
            )
            if (
                isinstance(limit, int | float)
                and isinstance(default, int | float)
                and limit < default
            ):
                commands.append(f"nvidia-smi -i {i} -pl {default:g}")
    return _per_gpu(
        ctx,
        _power,
        "enforced limit = default limit",
        Remediation(
            command="; ".join(commands),
            persistent="remove the power cap from whatever sets it at boot (nvidia-smi -pl in a "
            "unit, a DCGM policy)",
        ),
    )


def _clocks(
    ctx: AuditContext, i: int, label: str, evidence: list[Evidence]
) -> tuple[Status, str] | None:
    mask = ctx.nvml_read(i, "clock_event_reasons")
    evidence.append(
        ev(f"nvml clock_event_reasons ({label})", f"0x{mask:x}" if isinstance(mask, int) else mask)
    )
    if not isinstance(mask, int):
        return None
    names = ", ".join(clock_event_names(mask)) or "none"
    if mask & CLOCK_EVENT_FAULTS:
        faults = ", ".join(clock_event_names(mask & CLOCK_EVENT_FAULTS))
        return Status.WARN, f"{label} throttled by {faults}"
    return Status.PASS, f"{label} {names}"


def clock_events(ctx: AuditContext) -> Finding:
    return _per_gpu(
        ctx,
        _clocks,
        "no thermal, power-brake or hardware slowdown",
        Remediation(
            persistent="check cooling, airflow and PSU capacity; nvidia-smi -q -d PERFORMANCE"
        ),
    )


def _ecc(
    ctx: AuditContext, i: int, label: str, evidence: list[Evidence]
) -> tuple[Status, str] | None:
    fields = (
        "ecc_mode",
        "ecc_mode_pending",
        "ecc_uncorrected_volatile",
        "remapped_rows_pending",
        "remapped_rows_failure",
    )
    values = {f: ctx.nvml_read(i, f) for f in fields}
    evidence += [ev(f"nvml {f} ({label})", v) for f, v in values.items()]
    mode = values["ecc_mode"]
    if mode is None:
        return None
    if values["remapped_rows_failure"]:
        return Status.FAIL, f"{label} row remapping failed (the GPU needs replacing)"
    if values["remapped_rows_pending"]:
        return Status.FAIL, f"{label} row remap pending (reset the GPU)"
    uncorrected = values["ecc_uncorrected_volatile"]
    if isinstance(uncorrected, int) and uncorrected > 0:
        return Status.FAIL, f"{label} {uncorrected} uncorrected ECC errors since boot"
    pending = values["ecc_mode_pending"]
    if pending is not None and pending != mode:
        return (
            Status.WARN,
            f"{label} ECC {'on' if mode else 'off'}, {'on' if pending else 'off'} after reset",
        )
    if not mode:
        return Status.WARN, f"{label} ECC off"
    return Status.PASS, f"{label} ECC on, 0 uncorrected"


def ecc(ctx: AuditContext) -> Finding:
    return _per_gpu(
        ctx,
        _ecc,
        "ECC on, no uncorrected errors, no pending remap",
        Remediation(
            persistent="drain the GPU, then reset it (nvidia-smi -r -i <index>); a failed remap "
            "means replacing the GPU; turn ECC on with nvidia-smi -e 1 and a reset"
        ),
    )


def _stale(
    ctx: AuditContext, i: int, label: str, evidence: list[Evidence]
) -> tuple[Status, str] | None:
    util = ctx.nvml_read(i, "utilization_ratio")
    used = ctx.nvml_read(i, "memory_used_bytes")
    reserved = ctx.nvml_read(i, "memory_reserved_bytes")
    uuid = ctx.nvml_read(i, "uuid")
    procs = (
        [p for p in ctx.gpu.compute_processes() if p.gpu_index == i or p.uuid == uuid]
        if ctx.gpu
        else []
    )
    evidence += [
        ev(f"nvml utilization_ratio ({label})", util),
        ev(f"nvml memory_used_bytes ({label})", used),
        ev(f"nvml memory_reserved_bytes ({label})", reserved),
        ev(f"nvml compute processes ({label})", ", ".join(str(p.pid) for p in procs) or "none"),
    ]
    if not isinstance(util, int | float) or not isinstance(used, int):
        return None
    if isinstance(reserved, int):  # NVML v2: used is what processes hold, as nvidia-smi shows
        held = f"{used / 2**20:.0f} MiB used (+{reserved / 2**20:.0f} MiB driver-reserved)"
        allowance = ctx.options.stale_used_bytes
    else:  # v1: the driver's reservation is counted as used
        held = f"{used / 2**20:.0f} MiB used (driver reservation included: no NVML v2)"
        allowance = ctx.options.driver_reserved_bytes
    text = f"{label} util {util:.0%}, {held}, {len(procs)} process(es)"
    stale = util >= ctx.options.stale_utilization and not procs and used < allowance
    return (
        (Status.WARN, text + ": busy with no work (stale driver state)")
        if stale
        else (Status.PASS, text)
    )


def stale_state(ctx: AuditContext) -> Finding:
    return _per_gpu(
        ctx,
        _stale,
        "utilisation only while a process holds memory",
        Remediation(
            persistent="reset the GPU once nothing holds it (nvidia-smi -r -i <index>); keep "
            "nvidia-persistenced running so driver state survives idle periods"
        ),
    )
