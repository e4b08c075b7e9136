"""Several GPUs: a Llama-architecture target of ~3B parameters (random weights, built from a config straight
onto a GPU) sharded over two GPUs with accelerate's device map, against the same model on one GPU.

Checks that sharded greedy output equals one-GPU greedy output (plain and speculative, drafter on one GPU)
and measures tokens/s sharded against one GPU, side by side in one process. Needs 2 CUDA GPUs.

    python -m scripts.gpu_sharded_check --out results.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from specviz import DecodeSettings, load_model
from specviz.models.loading import unload_all
from specviz.api import make_proposer, run_once
from specviz.proposers import PlainProposer
from specviz.models.random_target import word_tokenizer


MAX_MEMORY = {"bfloat16": "0=3GiB,1=60GiB", "float32": "0=6GiB,1=60GiB"}  # forces a split of both GPUs


def build(folder: Path, vocab: int, hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=4096, tie_word_embeddings=False, bos_token_id=None,
                         eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    with torch.device("cuda:0"):  # random weights made on the GPU, not on the host
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder)
    word_tokenizer(vocab).save_pretrained(folder)
    del model
    torch.cuda.empty_cache()
    return params


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=4)
    args = parser.parse_args(argv)
    assert torch.cuda.device_count() >= 2, "needs two GPUs"
    work = Path(tempfile.mkdtemp())
    vocab = 32000
    t0 = time.time()
    target_params = build(work / "target", vocab, 3072, 8192, 28, 24, 8, seed=0)
    draft_params = build(work / "draft", vocab, 1024, 2816, 4, 16, 4, seed=1)
    print(f"built target {target_params / 1e9:.2f}B and drafter {draft_params / 1e6:.0f}M params in "
          f"{time.time() - t0:.0f}s", flush=True)

    generator = torch.Generator().manual_seed(0)
    prompts = []
    for _ in range(args.prompts):  # a repeated motif, so that n-gram lookup has something to find
        motif = torch.randint(1, vocab, (8,), generator=generator).tolist()
        prompts.append((motif * 4)[:30])
    settings = DecodeSettings(max_new_tokens=args.new_tokens, gamma=4)
    rows, per_device = [], {}
    for dtype in ("bfloat16", "float32"):
        single = load_model(str(work / "target"), device="cuda:0", dtype=dtype)
        sharded = load_model(str(work / "target"), dtype=dtype, device_map="auto", max_memory=MAX_MEMORY[dtype])
        drafter0 = load_model(str(work / "draft"), device="cuda:0", dtype=dtype)
        drafter1 = load_model(str(work / "draft"), device="cuda:1", dtype=dtype)
        per_device = {}
        for module, device in sharded.model.hf_device_map.items():
            per_device[str(device)] = per_device.get(str(device), 0) + 1
        print(dtype, "sharded over", per_device, flush=True)
        for model in (single, sharded):  # untimed warm-up
            run_once(model, PlainProposer(), prompts[0][:8], DecodeSettings(max_new_tokens=4))
        configurations = [
            ("one GPU", single, "plain", None), ("sharded", sharded, "plain", None),
            ("one GPU", single, "draft", drafter0), ("sharded", sharded, "draft", drafter0),
            ("sharded", sharded, "draft", drafter1), ("one GPU", single, "early-exit", None),
            ("sharded", sharded, "early-exit", None), ("one GPU", single, "ngram", None),
            ("sharded", sharded, "ngram", None), ("sharded", sharded, "adaptive", None),
        ]
        reference = {i: run_once(single, PlainProposer(), p, settings).token_ids for i, p in enumerate(prompts)}
        for placement_name, model, method, drafter in configurations:
            tokens = seconds = 0.0
            identical = accepted = drafted = 0
            for i, prompt in enumerate(prompts):
                result = run_once(model, make_proposer(method, model, drafter), prompt, settings)
                identical += result.token_ids == reference[i]
                tokens += result.metrics.new_tokens
                seconds += result.metrics.wall_seconds
                accepted += result.metrics.accepted
                drafted += result.metrics.drafted
            label = method if drafter is None else f"draft (drafter on {drafter.device})"
            rows.append({"dtype": dtype, "placement": placement_name, "method": label,
                         "tokens_per_second": tokens / seconds,
                         "identical_to_one_gpu_plain": f"{identical}/{len(prompts)}",
                         "acceptance_rate": accepted / drafted if drafted else None})
            print(rows[-1], flush=True)
        unload_all()

    cli = subprocess.run(
        [sys.executable, "-m", "specviz", "generate", "--target", str(work / "target"), "--raw-prompt",
         "--prompt", " ".join(f"w{t}" for t in prompts[0]), "--method", "draft", "--draft", str(work / "draft"),
         "--device-map", "auto", "--max-memory", MAX_MEMORY["float32"], "--dtype", "float32",
         "--max-new-tokens", "32", "--json", "--compare-plain"],
        capture_output=True, text=True, cwd=str(Path(__file__).resolve().parents[1]))
    cli_out = json.loads(cli.stdout) if cli.returncode == 0 else {"error": cli.stderr[-2000:]}
    report = {
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        "target_params": target_params, "draft_params": draft_params, "placement": per_device,
        "new_tokens": args.new_tokens, "prompts": len(prompts), "rows": rows,
        "cli": {k: cli_out.get(k) for k in ("identical_to_plain", "speedup", "error")},
    }
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(
        f"\n{'dtype':<10}{'placement':<10}{'method':<30}{'tok/s':>8}{'vs 1-GPU plain':>16}{'identical':>11}{'alpha':>7}"
    )
    for row in rows:
        base = next(r["tokens_per_second"] for r in rows if r["dtype"] == row["dtype"])
        alpha = "-" if row["acceptance_rate"] is None else f"{row['acceptance_rate']:.2f}"
        print(f"{row['dtype']:<10}{row['placement']:<10}{row['method']:<30}{row['tokens_per_second']:>8.1f}"
              f"{row['tokens_per_second'] / base:>15.2f}x{row['identical_to_one_gpu_plain']:>11}{alpha:>7}")
    print("cli:", report["cli"])


if __name__ == "__main__":
    main()
