"""Serving the app on loopback inside the test process, for the gradio_client and browser tests."""
from __future__ import annotations

import contextlib
import time


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
