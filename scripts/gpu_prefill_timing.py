"""A prompt's prefill on the fast path, timed on the GPU: milliseconds for prompts of several lengths, with the
output layer (logits_for="last") and without ("none", as the engine's prefill now asks), in chunks of 256, 512
or 1024 positions, and as the runner chunks now (512 while more than 256 remain, then 256: "256+512").

    python -m scripts.gpu_prefill_timing            (on the GPU machine, the default model staged)
"""
from __future__ import annotations

import statistics
import time

import torch

from specviz import fast
from specviz.models import load_model

LENGTHS = (64, 200, 500, 800, 1500)


def main() -> None:
    target = load_model("default", device="cuda", dtype="bfloat16")
    vocab = target.model.get_output_embeddings().weight.shape[0]
    print(torch.cuda.get_device_name(), torch.__version__)
    print(f"{'chunk':>8} {'logits':>7} " + " ".join(f"{n:>8}" for n in LENGTHS) + "   (ms a prefill, median of 7)")
    for chunk, long_chunk in ((256, 256), (512, 512), (1024, 1024), (256, 512)):
        fast.PREFILL_CHUNK, fast.LONG_PREFILL_CHUNK = chunk, long_chunk
        label = str(chunk) if chunk == long_chunk else f"{chunk}+{long_chunk}"
        runner = fast.make_runner(target.model)
        runner.ensure_capacity(4096)
        for logits_for in ("last", "none"):
            row = []
            for length in LENGTHS:
                ids = torch.randint(0, vocab, (length,), generator=torch.Generator().manual_seed(length))
                times = []
                for attempt in range(9):  # the first two capture and warm up
                    runner.reset()
                    torch.cuda.synchronize()
                    begin = time.perf_counter()
                    runner.forward(ids, logits_for=logits_for)
                    torch.cuda.synchronize()
                    if attempt >= 2:
                        times.append((time.perf_counter() - begin) * 1e3)
                row.append(statistics.median(times))
            print(f"{label:>8} {logits_for:>7} " + " ".join(f"{t:8.2f}" for t in row))
        runner.release()


if __name__ == "__main__":
    main()
