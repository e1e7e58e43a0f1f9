"""NVML's clock-event (throttle) reason bits and their names: read by the agent (its /metrics)
and by the controller's timeline events, so one table serves both."""

from __future__ import annotations

# Clock-event (throttle) reason bits, as NVML defines them, with the label values we export.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def clock_event_names(mask: int) -> list[str]:
    """Decode a clock-event bitmask into reason names (unknown bits as hex)."""
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    if unknown:
        names.append(f"0x{unknown:x}")
    return names
