"""CPU frequency and idle checks: governor, EPP, boost, and the effective C-state exit latency.

An inference server's CPU side (tokenisation, scheduling, kernel launches) stalls when a core
must first ramp its clock or wake from a deep idle state; these checks find both.
"""

from __future__ import annotations

import shlex
import struct
from collections import defaultdict

from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.environment import VM
from tunelab.agent.audit.model import Evidence, Finding, Remediation, Status, ev, skip

CPU = "/sys/devices/system/cpu"
PM_QOS = "/dev/cpu_dma_latency"
PM_QOS_NO_CONSTRAINT = 2_000_000_000  # PM_QOS_CPU_LATENCY_DEFAULT_VALUE, 2000 s in µs


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def cpu_ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 5] → ``0-2,5``: the kernel's cpulist format, short for 128 CPUs."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def _grouped(values: dict[int, str]) -> str:
    by_value: dict[str, list[int]] = defaultdict(list)
    for cpu, value in values.items():
        by_value[value].append(cpu)
    return "; ".join(f"{value} on {cpu_ranges(cpus)}" for value, cpus in sorted(by_value.items()))


def _no_cpufreq(ctx: AuditContext, what: str) -> Finding:
    driver = ctx.system.read_attr(f"{CPU}/cpuidle/current_driver")
    evidence = [ev(f"{CPU}/cpu0/cpufreq", "absent"), ev(f"{CPU}/cpuidle/current_driver", driver)]
    if ctx.environment.kind == VM or ctx.environment.virtualized:
        return skip(f"no cpufreq in this VM: the hypervisor sets {what}", evidence)
    return skip(
        f"no cpufreq driver loaded: firmware sets {what} (check the BIOS power profile)", evidence
    )


def governor(ctx: AuditContext) -> Finding:
    cpus = ctx.system.online_cpus()
    found: dict[int, str] = {}
    for cpu in cpus:
        value = ctx.system.read_attr(f"{CPU}/cpu{cpu}/cpufreq/scaling_governor")
        found[cpu] = value if value is not None else "no cpufreq"
    if all(v == "no cpufreq" for v in found.values()):
        return _no_cpufreq(ctx, "CPU frequency")
    driver = ctx.system.read_attr(f"{CPU}/cpu{cpus[0]}/cpufreq/scaling_driver")
    evidence = [
        ev(f"{CPU}/cpu*/cpufreq/scaling_governor", _grouped(found)),
        ev(f"{CPU}/cpu{cpus[0]}/cpufreq/scaling_driver", driver),
    ]
    odd = [cpu for cpu, value in found.items() if value != "performance"]
    if not odd:
        return Finding(
            Status.PASS, f"{len(cpus)} CPUs: performance ({driver})", "performance", evidence
        )
    return Finding(
        Status.FAIL,
        f"{len(odd)} of {len(cpus)} CPUs not on performance: "
        + _grouped({c: found[c] for c in odd}),
        "performance on every online CPU",
        evidence,
        Remediation(
            command="for f in /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor; "
            'do echo performance > "$f"; done',
            persistent="tuned-adm profile accelerator-performance (or cpupower.service with "
            "GOVERNOR=performance)",
        ),
    )


def epp(ctx: AuditContext) -> Finding:
    policies = [p for p in ctx.system.names(f"{CPU}/cpufreq") if p.startswith("policy")]
    values: dict[int, str] = {}
    for policy in policies:
        value = ctx.system.read_attr(f"{CPU}/cpufreq/{policy}/energy_performance_preference")
        if value is not None and policy[6:].isdigit():
            values[int(policy[6:])] = value
    if not policies:
        return _no_cpufreq(ctx, "the energy/performance preference")
    if not values:
        driver = ctx.system.read_attr(f"{CPU}/cpufreq/{policies[0]}/scaling_driver")
        return skip(
            f"scaling driver {driver or 'unknown'} has no energy_performance_preference "
            "(only intel_pstate and amd-pstate-epp in active mode expose one)",
            [ev(f"{CPU}/cpufreq/{policies[0]}/scaling_driver", driver)],
        )
    evidence = [ev(f"{CPU}/cpufreq/policy*/energy_performance_preference", _grouped(values))]
    odd = {p: v for p, v in values.items() if v != "performance"}
    if not odd:
        return Finding(Status.PASS, f"{len(values)} policies: performance", "performance", evidence)
    return Finding(
        Status.WARN,
        f"{len(odd)} of {len(values)} policies not performance: {_grouped(odd)}",
        "performance",
        evidence,
        Remediation(
            command="for f in /sys/devices/system/cpu/cpufreq/policy*/"
            'energy_performance_preference; do echo performance > "$f"; done',
            persistent="tuned profile with [cpu] energy_performance_preference=performance",
        ),
    )


def boost(ctx: AuditContext) -> Finding:
    knobs = {
        f"{CPU}/intel_pstate/no_turbo": "0",
        f"{CPU}/cpufreq/boost": "1",
    }
    for policy in ctx.system.names(f"{CPU}/cpufreq"):
        if policy.startswith("policy"):
            knobs[f"{CPU}/cpufreq/{policy}/boost"] = "1"
    seen = {path: ctx.system.read_attr(path) for path in knobs}
    present = {path: value for path, value in seen.items() if value is not None}
    if not present:
        return _no_cpufreq(ctx, "turbo/boost")
    evidence = [ev(path, value) for path, value in present.items()]
    wrong = [path for path, value in present.items() if value != knobs[path]]
    if not wrong:
        return Finding(Status.PASS, "boost enabled", "boost on (no_turbo=0, boost=1)", evidence)
    fixes = "; ".join(f"echo {knobs[path]} > {shlex.quote(path)}" for path in wrong)
    return Finding(
        Status.WARN,
        "boost disabled: " + ", ".join(f"{p}={present[p]}" for p in wrong),
        "boost on (no_turbo=0, boost=1)",
        evidence,
        Remediation(command=fixes, persistent="tuned profile with [cpu] boost=1; BIOS turbo on"),
    )


def _pm_qos(ctx: AuditContext) -> tuple[int | None, Evidence]:
    raw = ctx.system.read_bytes(PM_QOS)
    if raw is None or len(raw) < 4:
        return None, ev(PM_QOS, "unreadable (needs root)" if raw is None else raw)
    value: int = struct.unpack("<i", raw[:4])[0]
    shown = "no constraint" if value >= PM_QOS_NO_CONSTRAINT else f"{value} µs"
    return value, ev(PM_QOS, f"{value} ({shown})")


def cstates(ctx: AuditContext) -> Finding:
    limit = ctx.options.cstate_max_latency_us
    driver = ctx.system.read_attr(f"{CPU}/cpuidle/current_driver")
    qos, qos_evidence = _pm_qos(ctx)
    evidence = [ev(f"{CPU}/cpuidle/current_driver", driver), qos_evidence]
    max_cstate: int | None = None
    for module in ("intel_idle", "processor"):
        param = _int(ctx.system.read_attr(f"/sys/module/{module}/parameters/max_cstate"))
        if param is not None:
            evidence.append(ev(f"/sys/module/{module}/parameters/max_cstate", param))
            if module == "intel_idle" and driver == "intel_idle":
                max_cstate = param
            if module == "processor" and driver == "acpi_idle":
                max_cstate = param
    states: dict[tuple[int, str, int, int], list[int]] = defaultdict(list)
    worst: dict[int, int] = {}
    state_names: dict[tuple[int, int], str] = {}
    for cpu in ctx.system.online_cpus():
        base = f"{CPU}/cpu{cpu}/cpuidle"
        for entry in ctx.system.names(base):
            if not entry.startswith("state") or not entry[5:].isdigit():
                continue
            index = int(entry[5:])
            latency = _int(ctx.system.read_attr(f"{base}/{entry}/latency"))
            disabled = _int(ctx.system.read_attr(f"{base}/{entry}/disable"))
            if latency is None:
                continue
            name = state_names.get((index, latency))
            if name is None:  # one read per distinct state, not per CPU
                name = ctx.system.read_attr(f"{base}/{entry}/name") or entry
                state_names[(index, latency)] = name
            states[(index, name, latency, disabled or 0)].append(cpu)
            usable = not disabled and (max_cstate is None or index <= max_cstate)
            if usable:
                worst[cpu] = max(worst.get(cpu, 0), latency)
    if not states:
        where = "this VM" if ctx.environment.virtualized else "this host"
        return skip(
            f"no cpuidle states in {where} (driver {driver or 'none'}): idle depth is not "
            "under the kernel's control here",
            evidence,
        )
    for (index, name, latency, disabled), cpus in sorted(states.items()):
        evidence.append(
            ev(
                f"{CPU}/cpu{{{cpu_ranges(cpus)}}}/cpuidle/state{index}",
                f"{name} latency={latency}µs disable={disabled}",
            )
        )
    deepest = max(worst.values(), default=0)
    effective = deepest if qos is None else min(deepest, qos)
    bound = f"PM QoS {qos} µs" if qos is not None and qos < deepest else "deepest enabled state"
    observed = f"worst-case exit latency {effective} µs ({bound})"
    if effective <= limit:
        return Finding(Status.PASS, observed, f"<= {limit} µs", evidence)
    deep = sorted({idx for (idx, _, lat, dis) in states if lat > limit and not dis})
    deep_cpus = sorted(cpu for cpu, lat in worst.items() if lat > limit)
    names = sorted({name for (idx, name, lat, dis) in states if lat > limit and not dis})
    return Finding(
        Status.WARN,
        f"{observed}; {', '.join(names)} enabled on CPUs {cpu_ranges(deep_cpus)}",
        f"<= {limit} µs",
        evidence,
        Remediation(
            command=f"for k in {' '.join(map(str, deep))}; do for f in "
            '/sys/devices/system/cpu/cpu*/cpuidle/state$k/disable; do echo 1 > "$f"; done; done',
            persistent=f"tuned profile with [cpu] force_latency={limit} (held while tuned runs), "
            "or limit C-states in the BIOS",
        ),
    )
