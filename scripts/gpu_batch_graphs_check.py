"""The batched runner's CUDA graphs on a GPU, before timing anything with them:

    python3 -m scripts.gpu_batch_graphs_check [--sizes 8,32]

1. float32: each row of a batch of 4 (6 prompts through the refill queue) equals its batch-1 output, for plain,
   ngram, retrieval and draft (the target drafting for itself);
2. bfloat16: ms a forward of ngram:8 batches, eager (SPECVIZ_GRAPHS=0) against graphed, each size run twice
   (the first captures)."""
import argparse
import os

import torch

from specviz.api import batch_drafting, encode, make_proposer, run_once
from specviz.batch import decode_batch
from specviz.models import load_model
from specviz.settings import DecodeSettings

PROMPTS = ["Write a Python function that checks whether a number is prime.", "List the planets.",
           "Tell me a joke about caches, then explain it.", "Summarize the plot of Hamlet in three sentences.",
           "What is 17 times 23? Show the steps.", "Translate 'good morning, my friend' into French and German."]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="8,32")
    args = parser.parse_args()
    target = load_model("default", device="cuda", dtype=torch.float32)
    ids = [encode(target, p) for p in PROMPTS]
    settings = DecodeSettings(max_new_tokens=48, gamma=4)
    for method in ("plain", "ngram", "retrieval", "draft"):
        draft = target if method == "draft" else None
        run = decode_batch(target, batch_drafting(method, target, draft), ids, settings, batch_size=4)
        single = [run_once(target, make_proposer(method, target, draft), i, settings, detail=False).token_ids
                  for i in ids]
        equal = sum(a == b for a, b in zip(run.token_ids, single))
        print(f"float32 {method}: {equal} of {len(ids)} rows equal their batch-1 output", flush=True)
    target = load_model("default", device="cuda", dtype=torch.bfloat16)
    ids = [encode(target, p) for p in PROMPTS] * 6
    for graphs in ("0", "1"):
        os.environ["SPECVIZ_GRAPHS"] = graphs
        for size in (int(s) for s in args.sizes.split(",")):
            for _ in range(2):
                run = decode_batch(target, batch_drafting("ngram", target, None), ids,
                                   DecodeSettings(max_new_tokens=32, gamma=8), batch_size=size)
            ms = (run.wall_seconds - run.prefill_seconds) / run.forwards * 1e3
            print(f"bfloat16 ngram:8 batch {size} {'graphs' if graphs == '1' else 'eager'}: {ms:.2f} ms a forward",
                  flush=True)


if __name__ == "__main__":
    main()
