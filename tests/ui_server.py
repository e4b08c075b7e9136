"""Serving the app on loopback inside the test process, for the gradio_client and browser tests."""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import warnings
from pathlib import Path


@contextlib.contextmanager
def serve_app():
    """The app on 127.0.0.1 (a free port), queue and concurrency as `python app.py` sets them. Yields its URL."""
    from specviz.ui.app import build_demo, launch

    demo = build_demo()
    _, url, _ = launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        yield url.rstrip("/")
    finally:
        demo.close()


def wait_done(job, timeout: float = 300.0):
    """Wait for a gradio_client job; fail (not hang) past the timeout."""
    deadline = time.monotonic() + timeout
    while not job.done():
        if time.monotonic() > deadline:
            raise AssertionError(f"job not done after {timeout} s: {job.status()}")
        time.sleep(0.05)
    return job.outputs()


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def require_chromium() -> None:
    """At a browser test module's import: without Debian's chromium, fail in CI (it must run there) and skip
    elsewhere."""
    import os
    from pathlib import Path

    import pytest

    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} is missing: apt-get install chromium (bash setup.sh --dev does it as root)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message, allow_module_level=True)


def _children(pid: int) -> list[int]:
    """The processes whose parent is pid (read from /proc: the tests run on Linux)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def kill_playwright_driver(marker: str = "run-driver") -> None:
    """Kill this process's Playwright driver (node ... run-driver: an argument equal to `marker`) and what it
    started (chromium): its pipe then ends, and a stop that waits on it returns."""
    for pid in _children(os.getpid()):
        with contextlib.suppress(OSError):
            if marker.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                continue
            for child in _children(pid):
                os.kill(child, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
            warnings.warn("Playwright's driver did not stop within its time and was killed")


@contextlib.contextmanager
def bounded(seconds: float, marker: str = "run-driver"):
    """Run the block with a watchdog: past `seconds`, the Playwright driver is killed so that a close or a stop
    that hangs on its pipe (seen at the end of a session in CI, for 900 s) returns instead."""
    watchdog = threading.Timer(seconds, kill_playwright_driver, (marker,))
    watchdog.daemon = True
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()
