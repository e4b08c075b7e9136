"""What the app's step detail costs in the library: the same prompt, method and settings run with lean records
(detail=False, the bench's), with detailed ones (detail=True, the app's), and with detailed ones on the host
loop (SPECVIZ_DEVICE_LOOP=0, how the app ran before the device loop kept detail), in turns, one process;
prints each way's median tok/s and the loop that ran it.

    python3 -m scripts.gpu_detail_cost [--method ngram --gamma 8 --repeats 7]
"""
import argparse
import os
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from scripts.gpu_app_check import PROMPT
from specviz.api import encode, make_proposer, run_once, warm_up
from specviz.models import load_model
from specviz.proposers import PlainProposer
from specviz.settings import DecodeSettings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--method", default="ngram")
    parser.add_argument("--gamma", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    target = load_model("default")
    settings = DecodeSettings(max_new_tokens=args.max_new_tokens, gamma=args.gamma)
    ids = encode(target, PROMPT)
    for detail in (False, True):
        warm_up(target, args.gamma + 1, len(ids) + args.max_new_tokens + args.gamma + 1,
                [make_proposer(args.method, target)], device_loop=True, detail=detail)
    ways = {"lean": (False, "1"), "detail": (True, "1"), "detail, host loop": (True, "0")}
    speeds, loops = {}, {}
    for _ in range(args.repeats):
        for way, (detail, device_loop) in ways.items():
            os.environ["SPECVIZ_DEVICE_LOOP"] = device_loop
            for name, make in (("plain", PlainProposer), (args.method, lambda: make_proposer(args.method, target))):
                result = run_once(target, make(), ids, settings, PROMPT, detail=detail)
                speeds.setdefault((name, way), []).append(len(result.token_ids) / result.metrics.wall_seconds)
                loops[(name, way)] = result.settings["loop"]
    for name in ("plain", args.method):
        lean = statistics.median(speeds[(name, "lean")])
        print(f"{name}: " + ", ".join(f"{way} {statistics.median(speeds[(name, way)]):.0f} tok/s "
                                      f"({loops[(name, way)]} loop, {statistics.median(speeds[(name, way)]) / lean:.3f})"
                                      for way in ways))


if __name__ == "__main__":
    main()
