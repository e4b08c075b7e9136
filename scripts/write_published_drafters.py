"""Writes EAGLE-1 and Medusa-1 drafter folders with random weights in the published file layouts
(specviz/models/published_layouts.py: yuhuili/EAGLE-Vicuna-7B-v1.3 and FasterDecoding/medusa-vicuna-7b-v1.3) to
OUT/eagle and OUT/medusa, for the random target of the same shape (`--target random:vicuna-7b`):

    python3 -m scripts.write_published_drafters --shape vicuna-7b --out DIR   # 1.5 GB each
    python3 -m scripts.write_published_drafters --shape tiny --out DIR        # for the tests,
                                                                              # --target random:llama-tiny,kv_heads=4
"""
from __future__ import annotations

import argparse
import json
import sys

from specviz.models.published_layouts import SHAPES, write_published


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="vicuna-7b", choices=sorted(SHAPES))
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(json.dumps(write_published(args.out, args.shape, seed=args.seed), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
