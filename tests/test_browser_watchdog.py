"""The browser fixture's watchdog (tests/ui_server.py: bounded): a Playwright driver that outlives its time is
killed, so that a session's teardown cannot hang on its pipe; one that is done in time is left alone."""
import subprocess
import sys
import time
import uuid

import pytest

from ui_server import bounded

pytestmark = pytest.mark.quick


# a stand-in's own marker: the session's real driver (this worker's chromium fixture) must never be the one killed
MARKER = f"run-driver-stand-in-{uuid.uuid4().hex[:8]}"


def a_driver() -> subprocess.Popen:
    """A child process that reads as a Playwright driver (its marker an argument) and would hang."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", MARKER])


def test_a_driver_that_outlives_its_time_is_killed():
    driver = a_driver()
    with pytest.warns(UserWarning, match="killed"), bounded(0.5, MARKER):
        time.sleep(2)
    assert driver.wait(timeout=10) < 0  # killed by a signal


def test_a_block_done_in_time_leaves_the_driver_alone():
    driver = a_driver()
    try:
        with bounded(30, MARKER):
            pass
        time.sleep(0.5)
        assert driver.poll() is None
    finally:
        driver.kill()
        driver.wait()
