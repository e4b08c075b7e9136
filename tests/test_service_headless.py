"""The run service, ZeroGPU's worker and its emulation, and scripts.zero_gpu_bench import where gradio and plotly are
not installed (the GPU machine has none): one fresh interpreter with those packages blocked imports each. The
control: the web app's shell, under the same block, fails to import."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEADLESS = ["specviz.service.calls", "specviz.service.gpu", "specviz.service.gpu_worker",
            "specviz.service.zero_emulation", "specviz.service.live",
            "scripts.zero_gpu_bench"]
CODE = """
import importlib, json, sys
for blocked in ("gradio", "gradio_client", "plotly"):
    sys.modules[blocked] = None  # `import gradio` now raises ImportError, as where it is not installed
outcome = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        outcome[name] = "imported"
    except ImportError as error:
        outcome[name] = f"ImportError: {error}"
print(json.dumps(outcome))
"""


@pytest.mark.subprocess
def test_the_service_and_zero_gpus_worker_import_without_gradio():
    proc = subprocess.run([sys.executable, "-c", CODE, *HEADLESS, "specviz.ui.app"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {name: outcome[name] for name in HEADLESS} == {name: "imported" for name in HEADLESS}
    assert outcome["specviz.ui.app"].startswith("ImportError")  # the control: the block bites
