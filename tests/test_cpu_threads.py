"""In the served app torch's OpenMP threads sleep when they wait (app.py sets it before torch loads), as
libgomp itself reports it (OMP_DISPLAY_ENV=VERBOSE prints its settings as it starts): GOMP_SPINCOUNT 0, not
300,000 spins; the library keeps libgomp's default (faster on a quiet machine)."""
import os
from pathlib import Path

import pytest

from app import sleep_when_waiting

ROOT = Path(__file__).resolve().parents[1]
FORWARD = "import torch; torch.ones(64, 64) @ torch.ones(64, 64)"  # a matrix product: libgomp starts its team


def libgomp_settings(fresh_python, code: str, **env) -> str:
    """What libgomp prints of its settings in a fresh Python running `code`, from the repository's root."""
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    environ.update(OMP_DISPLAY_ENV="VERBOSE", **env)
    done = fresh_python(code, cwd=ROOT, env=environ, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


def test_the_app_makes_torchs_threads_sleep_when_they_wait_and_the_library_keeps_the_default(fresh_python):
    assert "GOMP_SPINCOUNT = '0'" in libgomp_settings(fresh_python, "import app; " + FORWARD)
    # the control: the library (and torch alone) spin, as the app did before it set the policy
    assert "GOMP_SPINCOUNT = '300000'" in libgomp_settings(fresh_python, "import specviz; " + FORWARD)


def test_a_policy_chosen_in_the_environment_is_kept(fresh_python):
    chosen = libgomp_settings(fresh_python, "import app; " + FORWARD, OMP_WAIT_POLICY="ACTIVE")
    assert "GOMP_SPINCOUNT = '300000'" not in chosen
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in chosen


@pytest.mark.quick
def test_the_policy_is_set_only_where_nobody_chose_one_and_torch_is_not_loaded():
    environ = {}
    assert sleep_when_waiting(environ, loaded={}) and environ == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert not sleep_when_waiting({"GOMP_SPINCOUNT": "1000"}, loaded={})
    late = {}
    assert not sleep_when_waiting(late, loaded={"torch": object()}) and late == {}  # libgomp has read it already
