"""Average two sets of Medusa heads made for one target, weight by weight (a "model soup", Wortsman et al.
2022). It works when the second set was trained from the first (train-drafter --init): both then lie in one
basin, and their average can beat each of them (the shipped heads are made so; assets/drafters/README.md).

    python -m scripts.average_medusa FIRST SECOND --out FOLDER [--weight 0.5]

The residual blocks are averaged (weight: the second set's share; checkpoints.average_medusa_blocks). Heads
trained here share the target's output layer, so the blocks do not depend on the draft vocabulary; the average
keeps the second set's (the newer data's). config.json is the second set's, with the first one's record and this
command added under "averaged"; loss.png is the second set's.
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path

from safetensors.torch import save_file

from specviz.errors import ModelLoadError
from specviz.proposers.checkpoints import MEDUSA_WEIGHTS, average_medusa_blocks
from specviz.proposers.drafter_files import read_config, read_state

WEIGHTS = MEDUSA_WEIGHTS[0]  # the safetensors file that train-drafter writes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--weight", type=float, default=0.5, help="the second set's share (0..1)")
    args = parser.parse_args(argv)
    if not 0 <= args.weight <= 1:
        sys.exit("--weight must be between 0 and 1")
    try:  # the loader's own readers, with its messages
        states = [read_state(folder, MEDUSA_WEIGHTS)[0] for folder in (args.first, args.second)]
        configs = [read_config(folder) for folder in (args.first, args.second)]
        if configs[0]["specviz"]["trained_for"] != configs[1]["specviz"]["trained_for"]:
            sys.exit("the two sets of heads were made for different targets")
        merged = average_medusa_blocks(*states, args.weight)
    except ModelLoadError as error:
        sys.exit(f"cannot average these heads: {error}")
    except KeyError:
        sys.exit("cannot average these heads: a config.json has no specviz record (not heads trained by specviz)")
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(merged, str(args.out / WEIGHTS))
    config = configs[1]
    config["specviz"]["averaged"] = {
        "command": "python -m scripts.average_medusa " + shlex.join(sys.argv[1:]),
        "weight_of_second": args.weight,
        "first": configs[0]["specviz"],  # how the first set was made (the second's is the config's own record)
    }
    (args.out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    if (args.second / "loss.png").is_file() and args.second.resolve() != args.out.resolve():
        shutil.copy(args.second / "loss.png", args.out / "loss.png")
    print(f"wrote {args.out / WEIGHTS}: {sum(k != 'draft_vocab' for k in merged)} tensors averaged, "
          f"the draft vocabulary of {args.second}")


if __name__ == "__main__":
    main()
