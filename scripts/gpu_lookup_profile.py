"""GPU time of the device loop's lookups (proposers/*_device.py, tree_device.py), each part alone, captured in a CUDA graph as the loop
captures them: microseconds a replay (mean of 500, replayed back to back) and kernels a replay. No model
needed: the shipped datastore and a stretch of its own text as the sequence.

    python -m scripts.gpu_lookup_profile            (on the GPU machine)
"""
from __future__ import annotations

from pathlib import Path

import torch

from specviz import device_loop as dl
from specviz import tree_device
from specviz.proposers import ngram_device, retrieval_device
from specviz.datastore import Datastore
from scripts.gpu_bandwidth_probe import capture

STORE = Path(__file__).resolve().parents[1] / "assets" / "drafters" / "smollm2-135m-instruct" / "retrieval"


def time_graph(fn, replays: int = 500) -> tuple[float, int]:
    graph = capture(fn)
    for _ in range(20):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    micros = start.elapsed_time(end) * 1e3 / replays
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return micros, len(kernels)


def main() -> None:
    device = torch.device("cuda")
    store = Datastore.load(STORE, 49152)
    on_device = retrieval_device.device_datastore(store, device)
    capacity, gamma = 4096, 16
    text = [t if t < 49152 else 2 for t in store.tokens[5000:6500].tolist()]
    sequence = torch.zeros(capacity + gamma + 2, dtype=torch.long, device=device)
    sequence[:len(text)] = torch.tensor(text, device=device)
    length = torch.tensor([len(text)], device=device)
    starts = ngram_device.latest_matches(sequence, length, (3, 2, 1), 8)
    own, own_valid = ngram_device.gather_runs(sequence, starts, gamma, length)
    stored, stored_valid, n = on_device.continuations(sequence, length, gamma, 32)
    tokens = torch.cat([own.reshape(-1, gamma), stored])
    valid = torch.cat([own_valid.reshape(-1, gamma), stored_valid])
    weights = torch.rand(tokens.shape[0], device=device, dtype=torch.float64).mul(100).round()
    logits = torch.randn(gamma + 1, 49152, device=device, dtype=torch.bfloat16)  # as the loop passes them
    inputs = torch.zeros(gamma + 2, dtype=torch.long, device=device)
    draft_length = torch.tensor(5, device=device)
    log = torch.zeros(2 * gamma + 3, dtype=torch.long, device=device)
    saved_sequence, saved_length = sequence.clone(), length.clone()

    def restore():
        sequence.copy_(saved_sequence)
        length.copy_(saved_length)

    parts = {
        "latest_matches (3 sizes x 8)": lambda f: f(sequence, length, (3, 2, 1), 8),
        "datastore continuations": lambda f: f(sequence, length, gamma, 32),
        "heaviest_line (56 x 16)": lambda f: f(tokens, valid, weights),
        "ngram_draft": lambda f: f(sequence, length, gamma, (3, 2, 1)),
        "retrieval_draft": lambda f: f(sequence, length, gamma, (3, 2, 1), on_device, 32, 1.0),
        "advance (accept, append)": lambda f: (f(logits, sequence, length, inputs, draft_length, log), restore()),
    }
    functions = {
        "latest_matches (3 sizes x 8)": ngram_device.latest_matches,
        "datastore continuations": on_device.continuations,
        "heaviest_line (56 x 16)": tree_device.heaviest_line,
        "ngram_draft": ngram_device.ngram_draft,
        "retrieval_draft": retrieval_device.retrieval_draft,
        "advance (accept, append)": dl.advance,
    }
    print(torch.cuda.get_device_name(), torch.__version__)
    print(f"{'part':36} {'eager us':>9} {'kernels':>8} {'compiled us':>12} {'kernels':>8}")
    for name, call in parts.items():
        fn = functions[name]
        eager = time_graph(lambda: call(fn))
        try:
            compiled_fn = torch.compile(fn, dynamic=False)
            compiled = time_graph(lambda: call(compiled_fn))
        except Exception as error:  # report and go on
            compiled = (float("nan"), 0)
            print(f"  compile failed for {name}: {type(error).__name__}: {str(error)[:200]}")
        print(f"{name:36} {eager[0]:9.1f} {eager[1]:8d} {compiled[0]:12.1f} {compiled[1]:8d}")


if __name__ == "__main__":
    main()
