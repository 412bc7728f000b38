"""Debian's Chromium driven by Playwright (never Playwright's own browser download).

Shared by the browser tests and scripts/screenshots.py. The flags keep Chromium off the
network it cannot reach here (background services, QUIC, component updates), and each
launch gets a fresh profile directory.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from playwright.sync_api import BrowserContext, Playwright

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def chromium_path() -> Path:
    """The Debian Chromium binary; an error naming the install command if it is missing."""
    found = CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")
    if not found:
        raise RuntimeError(
            "Chromium is not installed: `apt-get install -y --no-install-recommends chromium` "
            "(scripts/test installs it); the browser tests cannot run without it")
    return Path(found)


def launch(playwright: Playwright, profile_dir: Path, *, width: int = 1400,
           height: int = 900, scale: float = 1.0) -> BrowserContext:
    return playwright.chromium.launch_persistent_context(
        str(profile_dir), executable_path=str(chromium_path()), headless=True, args=FLAGS,
        viewport={"width": width, "height": height}, device_scale_factor=scale,
    )
