"""Where a captured forward's time goes on the GPU (issue 5): the default target's shape (SmolLM2-135M:
30 layers, hidden 576, 9 heads, 3 key-value heads, MLP 1536, vocabulary 49,152) with random weights, so no
model needs staging; the fast path's graphs over compiled layers; PyTorch's profiler (CUPTI traces the
kernels inside graph replays). Prints, for K = 1 and K = 9 positions and a 32-node tree, the forward's time,
its kernel count and the kernels that take the most time, grouped by name.

    python3 scripts/gpu_profile.py [--dtype bfloat16] [--context 300]"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from specviz.fast import StaticRunner  # noqa: E402


def default_shaped_model(dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         rope_theta=100000.0, tie_word_embeddings=True, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to("cuda", dtype).eval()


def profile_forwards(runner, context: int, feed, label: str, repeats: int = 20) -> None:
    runner.rollback(context)
    for _ in range(3):  # capture and warm
        feed()
        runner.rollback(context)
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(repeats):
        feed()
        runner.rollback(context)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - begin) / repeats * 1e3
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            feed()
            runner.rollback(context)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name = defaultdict(lambda: [0, 0.0])
    for e in kernels:
        by_name[e.name][0] += 1
        by_name[e.name][1] += e.device_time
    busy = sum(v[1] for v in by_name.values()) / repeats / 1e3
    print(f"\n== {label}: {wall:.3f} ms a forward (host clock), {len(kernels) / repeats:.0f} kernels, "
          f"{busy:.3f} ms of kernel time")
    for name, (count, total) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:14]:
        print(f"  {total / repeats / 1e3:7.3f} ms  {count / repeats:5.0f}x  {total / count:7.1f} us each  {name[:90]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--context", type=int, default=300)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    model = default_shaped_model(dtype)
    runner = StaticRunner(model)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}, graphs {runner.use_graphs}, "
          f"compile {runner.use_compile}")
    with torch.inference_mode():
        runner.forward(torch.randint(0, 49152, (args.context,)), logits_for="last")
        one, nine = torch.randint(0, 49152, (1,)), torch.randint(0, 49152, (9,))
        tree_ids, parents = torch.randint(0, 49152, (33,)), [-1] + [i // 2 for i in range(31)]
        profile_forwards(runner, args.context, lambda: runner.forward(one), "K = 1")
        profile_forwards(runner, args.context, lambda: runner.forward(nine), "K = 9")
        profile_forwards(runner, args.context, lambda: runner.forward(tree_ids, parents=parents), "tree of 32 nodes")


if __name__ == "__main__":
    main()
