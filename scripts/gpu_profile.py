"""Where a captured forward's time goes on the GPU : the default target's shape (SmolLM2-135M:
30 layers, hidden 576, 9 heads, 3 key-value heads, MLP 1536, vocabulary 49,152) with random weights, so no
model needs staging; the fast path's graphs over compiled layers; PyTorch's profiler (CUPTI traces the
kernels inside graph replays). Prints, for K = 1 and K = 9 positions and a 32-node tree, the forward's time,
its kernel count and the kernels that take the most time, grouped by name, with attention by
gpu_attention's kernel and by scaled_dot_product_attention side by side; and EAGLE-2 tree drafting's step
time, uncompiled and compiled, with a random drafter shaped like the shipped one.

    python3 -m scripts.gpu_profile [--dtype bfloat16] [--context 300] [--parts attention,runners,eagle]"""
from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict

import torch

from specviz.runners.static import StaticRunner


def default_shaped_model(dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         rope_theta=100000.0, tie_word_embeddings=True, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to("cuda", dtype).eval()


def profile_calls(run, reset, label: str, repeats: int = 20, top: int = 14) -> None:
    """Time `run` (then `reset`) on the host clock, then once more under the profiler: kernel count and the
    kernels that take the most time, grouped by name."""
    for _ in range(3):  # capture and warm
        run()
        reset()
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(repeats):
        run()
        reset()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - begin) / repeats * 1e3
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            run()
            reset()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name = defaultdict(lambda: [0, 0.0])
    for e in kernels:
        by_name[e.name][0] += 1
        by_name[e.name][1] += e.device_time
    busy = sum(v[1] for v in by_name.values()) / repeats / 1e3
    print(f"\n== {label}: {wall:.3f} ms a call (host clock), {len(kernels) / repeats:.0f} kernels, "
          f"{busy:.3f} ms of kernel time")
    for name, (count, total) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {total / repeats / 1e3:7.3f} ms  {count / repeats:5.0f}x  {total / count:7.1f} us each  {name[:90]}")


def profile_forwards(runner, context: int, feed, label: str) -> None:
    runner.rollback(context)
    profile_calls(feed, lambda: runner.rollback(context), label)


def compare_attention(model, context: int) -> None:
    """The runner with gpu_attention's kernel against one with scaled_dot_product_attention: same logits?"""
    vocab = model.config.vocab_size
    triton_runner, sdpa_runner = StaticRunner(model), StaticRunner(model, triton_attention=False)
    print(f"triton attention: {triton_runner.use_triton_attention} / {sdpa_runner.use_triton_attention}")
    prompt = torch.randint(0, vocab, (context,))
    feeds = [("prefill", dict(token_ids=prompt)), ("K = 1", dict(token_ids=torch.randint(0, vocab, (1,)))),
             ("K = 9", dict(token_ids=torch.randint(0, vocab, (9,)))),
             ("tree 32", dict(token_ids=torch.randint(0, vocab, (33,)), parents=[-1] + [i // 2 for i in range(31)]))]
    for label, feed in feeds:
        a, _ = triton_runner.forward(**feed)
        b, _ = sdpa_runner.forward(**feed)
        same = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
        print(f"  {label}: logits max |diff| {(a - b).abs().max().item():.4g}, same argmax {same:.0%}")
    for runner in (triton_runner, sdpa_runner):
        runner.release()


def profile_runner(model, context: int, **options) -> None:
    runner = StaticRunner(model, **options)
    print(f"\n#### runner {options or 'default'}: graphs {runner.use_graphs}, compile {runner.use_compile}, "
          f"triton attention {runner.use_triton_attention}")
    vocab = model.config.vocab_size
    runner.forward(torch.randint(0, vocab, (context,)), logits_for="last")
    one, nine = torch.randint(0, vocab, (1,)), torch.randint(0, vocab, (9,))
    tree_ids, parents = torch.randint(0, vocab, (33,)), [-1] + [i // 2 for i in range(31)]
    profile_forwards(runner, context, lambda: runner.forward(one), "K = 1")
    profile_forwards(runner, context, lambda: runner.forward(nine), "K = 9")
    profile_forwards(runner, context, lambda: runner.forward(tree_ids, parents=parents), "tree of 32 nodes")
    runner.release()


def profile_eagle_drafting(model, context: int, compiled: bool) -> None:
    """EAGLE-2 tree drafting (eagle_tree.py) with a random drafter shaped like the shipped one (one decoder
    layer like the target's, a 16,384-token draft vocabulary): one tree step's time, graph replay and the
    host copy of the tree included."""
    from specviz.proposers.draft_head import DraftHead, TargetParts
    from specviz.proposers.eagle_net import EagleConfig, EagleDrafter, EagleNet
    from specviz.proposers.eagle_tree import TreeDrafting

    os.environ["SPECVIZ_COMPILE"] = "1" if compiled else "0"
    config = EagleConfig.like_target(model.config)
    torch.manual_seed(1)
    net = EagleNet(config).to("cuda", model.dtype).eval()
    parts = TargetParts(model, config.head_dim)
    drafter = EagleDrafter(net, parts, DraftHead.from_target(parts, torch.arange(16384)), "random")
    hidden = model.config.hidden_size
    print(f"\n#### EAGLE tree drafting, compiled {compiled}")
    for gamma, budget in ((6, 31), (7, 63)):
        rows = gamma + 1
        trees = TreeDrafting(drafter, 2048, rows)
        trees.prefill(torch.randn(context, hidden, device="cuda", dtype=model.dtype),
                      torch.randint(0, 16384, (context,), device="cuda"))
        features = torch.randn(3, hidden, device="cuda", dtype=model.dtype)
        token_ids = torch.randint(0, 16384, (3,), device="cuda")
        begin = time.perf_counter()
        trees.step(features, token_ids, gamma, 8, budget)  # capture (and compile)
        print(f"  first step (capture{', compile' if compiled else ''}): {time.perf_counter() - begin:.1f} s")
        trees.length = context

        def reset():
            trees.length = context

        profile_calls(lambda: trees.step(features, token_ids, gamma, 8, budget), reset,
                      f"tree step, gamma {gamma}, budget {budget}", top=20)
        trees.release()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--parts", default="attention,runners,eagle",
                        help="what to run: attention (kernel against SDPA), runners (profiles), eagle (tree drafting)")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    model = default_shaped_model(dtype)
    parts = args.parts.split(",")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}")
    with torch.inference_mode():
        if "attention" in parts:
            compare_attention(model, args.context)
        if "runners" in parts:
            profile_runner(model, args.context, triton_attention=False)
            profile_runner(model, args.context)
        if "eagle" in parts:
            profile_eagle_drafting(model, args.context, compiled=False)
            profile_eagle_drafting(model, args.context, compiled=True)


if __name__ == "__main__":
    main()
