"""ZeroGPU on Hugging Face Spaces: handlers that run the engine are wrapped with spaces.GPU when the `spaces`
package is there (it attaches a GPU for the duration of each call), and left as they are everywhere else."""
from __future__ import annotations

try:  # pragma: no cover - only on Hugging Face Spaces
    import spaces

    def gpu(fn):
        return spaces.GPU(duration=120)(fn)
except ImportError:
    def gpu(fn):
        return fn
