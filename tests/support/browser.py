"""A real headless Chromium (Debian ``chromium``) for the report: load a page, read its DOM after
the scripts ran, take a screenshot. Network is cut (every host name fails to resolve), so a page
that needs anything from outside shows it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> str:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "no headless Chromium: install Debian's chromium package (apt-get install chromium)"
    )


def _argv(profile: Path) -> list[str]:
    return [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--disable-background-networking",
        "--hide-scrollbars",
    ]


def load_page(page: Path, profile: Path) -> tuple[str, str]:
    """(DOM after load, Chromium's log): console messages appear in the log as CONSOLE lines."""
    argv = [
        *_argv(profile),
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=3000",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def screenshot(page: Path, out: Path, profile: Path, width: int = 1200, height: int = 2400) -> None:
    argv = [
        *_argv(profile),
        f"--window-size={width},{height}",
        f"--screenshot={out}",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0 and out.stat().st_size > 10_000, done.stderr[-2000:]
