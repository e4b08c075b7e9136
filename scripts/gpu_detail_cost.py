"""What the app's step detail costs in the library: the same prompt, method and settings run with lean records
(detail=False, the bench's) and with detailed ones (detail=True, the app's), in turns, one process; prints
each way's median tok/s and the loop that ran it (device or host).

    python3 scripts/gpu_detail_cost.py [--method ngram --gamma 8 --repeats 7]
"""
import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_app_check import PROMPT  # noqa: E402
from specviz.api import encode, make_proposer, run_once, warm_up  # noqa: E402
from specviz.models import load_model  # noqa: E402
from specviz.proposers import PlainProposer  # noqa: E402
from specviz.settings import DecodeSettings  # noqa: E402


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
    speeds, loops = {}, {}
    for _ in range(args.repeats):
        for detail in (False, True):
            for name, make in (("plain", PlainProposer), (args.method, lambda: make_proposer(args.method, target))):
                result = run_once(target, make(), ids, settings, PROMPT, detail=detail)
                speeds.setdefault((name, detail), []).append(len(result.token_ids) / result.metrics.wall_seconds)
                loops[(name, detail)] = result.settings["loop"]
    for name in ("plain", args.method):
        lean, full = (statistics.median(speeds[(name, d)]) for d in (False, True))
        print(f"{name}: lean {lean:.0f} tok/s ({loops[(name, False)]} loop), detail {full:.0f} tok/s "
              f"({loops[(name, True)]} loop), detail / lean {full / lean:.3f}")


if __name__ == "__main__":
    main()
