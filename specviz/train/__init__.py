"""`specviz train-drafter`: self-distilled Medusa heads, an EAGLE (or EAGLE-3) drafter, a DFlash block drafter or a
small draft model for a target, from data the target writes itself (data.py), trained by trainer.py (dflash.py for
DFlash: its own loop over blocks); or, with --method retrieval, a datastore of those answers
(datastore.py: nothing to train). Meant for one GPU and minutes; runs on a CPU too (slowly: fine for a smoke
test)."""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from ..errors import InvalidSettingError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", required=True,
                        choices=("eagle", "eagle3", "medusa", "dflash", "draft-model", "retrieval"),
                        help="eagle3: an EAGLE-3 drafter (three target layers; the eagle method loads it with "
                             "--heads); "
                        "draft-model: a small causal LM for the draft method (--draft FOLDER); "
                        "retrieval: no training, a datastore of the target's own answers")
    parser.add_argument("--target", default="default", help="'default', a Hub id, a folder or a .gguf file")
    parser.add_argument("--out", required=True, help="folder for config.json, the weights, loss.png, checkpoint.pt")
    parser.add_argument("--data", default=None, help="dataset file: reused if it exists, else generated and saved "
                        "there (default: OUT/data.pt); several existing files, comma-separated, are read as one; a "
                        "retrieval datastore (its folder or datastore.npz) is read as its answers, nothing generated")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    group = parser.add_argument_group("data generation (when --data does not exist yet)")
    group.add_argument("--prompts", type=int, default=8000, help="Magpie prompts to sample")
    group.add_argument("--prompt-tokens", type=int, default=64, help="the longest user turn sampled, in tokens")
    group.add_argument("--response-tokens", type=int, default=384,
                       help="the longest answer the target writes, in tokens")
    group.add_argument("--long-share", type=float, default=0.25, help="extra long-context prompts per answered one")
    group.add_argument("--german-share", type=float, default=0.0,
                       help="answers the target translates into German and back, per answered prompt")
    group.add_argument("--extra-minutes", type=float, default=0.5,
                       help="time each later round (long contexts, German) may take after --gen-minutes")
    group.add_argument("--gen-batch", type=int, default=256, help="prompts the target answers at once")
    group.add_argument("--gen-minutes", type=float, default=None, help="stop answering new batches after this")
    group.add_argument("--gen-dtype", default="auto", help="dtype for generating (auto: bfloat16 on GPU)")
    group.add_argument("--data-only", action="store_true", help="write the data set and stop (train in a later call)")
    group = parser.add_argument_group("training")
    group.add_argument("--steps", type=int, default=None, help="optimizer steps (default: until --minutes)")
    group.add_argument("--minutes", type=float, default=None, help="training time budget")
    group.add_argument("--batch-tokens", type=int, default=16384, help="tokens a training batch holds (sequences "
                       "of similar length batched together)")
    group.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    group.add_argument("--draft-vocab", type=int, default=8192, help="tokens the draft head scores (0 = all)")
    group.add_argument("--ttt-steps", type=int, default=5, help="eagle, eagle3: draft steps unrolled in training")
    group.add_argument("--feature-weight", type=float, default=1.0, help="eagle: feature regression weight (eagle3 "
                       "has none: it predicts tokens only)")
    group.add_argument("--heads", type=int, default=5, help="medusa: number of heads")
    group.add_argument("--layers", type=int, default=None, help="medusa: residual blocks per head (default 1); "
                       "draft-model and dflash: decoder layers (default 2)")
    group.add_argument("--block-size", type=int, default=16, help="dflash: positions of a block (its first token, "
                       "then the drafts)")
    group.add_argument("--anchors", type=int, default=32, help="dflash: blocks trained a conversation and step")
    group.add_argument("--features", type=int, default=5, help="dflash: the target layers it reads")
    group.add_argument("--init-layers", default="first", help="draft-model: the target layers its layers start "
                       "from: first (the default: the first N), spread (the first, the last and evenly between), or "
                       "ids such as 0,29")
    group.add_argument("--chain", type=int, default=5, help="draft-model: draft length of the held-out tau estimate")
    group.add_argument("--eval-every", type=int, default=200, help="steps between held-out evaluations (and "
                       "checkpoints)")
    group.add_argument("--seed", type=int, default=0, help="seed of the data sampling and the weights' initialisation")
    group.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    group.add_argument("--init", default=None, help="medusa: start from the heads in this folder (same --heads and "
                       "--layers); dflash: from the drafter in this folder (its shape, layers read and draft "
                       "vocabulary); a warm start on new data, with a fresh schedule")


def run(args) -> int:
    if args.init and args.method not in ("medusa", "dflash"):
        raise InvalidSettingError("--init starts Medusa heads or a DFlash drafter from a folder; it is not available "
                                  f"for --method {args.method}")
    if args.init and args.resume:
        raise InvalidSettingError("--init starts a new training run; --resume goes on with OUT/checkpoint.pt: give one")
    if args.steps is None and args.minutes is None and not args.data_only and args.method != "retrieval":
        raise InvalidSettingError("give --steps N or --minutes M (or both: training stops at whichever comes first)")
    # the arguments are sound: only now the imports that take seconds (torch, transformers)
    import torch

    from ..models.loading import load_model
    from .data import DataPlan, build_dataset, datastore_dataset, is_datastore, load_dataset, save_dataset
    from .trainer import TrainOptions, train, write_json

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data_files = [Path(name) for name in args.data.split(",")] if args.data else [out / "data.pt"]
    data_file = data_files[0]
    command = "python -m specviz " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else ""
    log = lambda message: print(f"[train-drafter {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    generator_model = None  # the model that writes the data, when it has to be written
    missing = [str(file) for file in data_files if not file.is_file()]
    if len(data_files) > 1 and missing:
        raise InvalidSettingError(f"--data: no such file: {', '.join(missing)} (several files are only read, "
                                  "never generated)")
    target = None  # the model trained for, loaded here where the data needs it
    if len(data_files) == 1 and is_datastore(data_files[0]):
        target = load_model(args.target, args.device, torch.float32)  # its chat template frames the answers
        data = datastore_dataset(data_files[0], target)
        log(f"data: the {len(data['sequences'])} answers of the datastore {args.data}")
    elif not missing:
        data = merge_datasets([load_dataset(file) for file in data_files])
        log(f"data: {args.data} ({len(data['sequences'])} conversations)")
    else:
        generator_model = load_model(args.target, args.device, args.gen_dtype)
        plan = DataPlan(prompts=args.prompts, prompt_tokens=args.prompt_tokens, response_tokens=args.response_tokens,
                        long_share=args.long_share, german_share=args.german_share, batch_size=args.gen_batch,
                        minutes=args.gen_minutes, extra_minutes=args.extra_minutes, seed=args.seed)
        data = build_dataset(generator_model, plan, log)
        data["stats"]["device"] = str(generator_model.device)
        data["stats"]["dtype"] = str(generator_model.dtype).replace("torch.", "")
        data_file.parent.mkdir(parents=True, exist_ok=True)
        save_dataset(data, data_file)
        log(f"data saved to {data_file}")
    if not data["sequences"]:
        raise InvalidSettingError("the data set is empty; ask for more --prompts or more --gen-minutes")
    if args.data_only:
        return 0
    if args.method == "retrieval":
        # the vocabulary comes from the target: the model that wrote the data where there is one, not a second load
        target = generator_model or target or load_model(args.target, args.device, args.gen_dtype)
        return write_datastore(target, data, out, command, log)

    # features in float32, as the engine computes them on a CPU (and as exact greedy runs use)
    target = target or load_model(args.target, args.device, torch.float32)
    options = TrainOptions(
        method=args.method, steps=args.steps, minutes=args.minutes, batch_tokens=args.batch_tokens, lr=args.lr,
        draft_vocab=args.draft_vocab, ttt_steps=args.ttt_steps, feature_weight=args.feature_weight,
        medusa_heads=args.heads, medusa_layers=args.layers or 1, draft_layers=args.layers or 2,
        init_layers=args.init_layers, chain=args.chain, eval_every=args.eval_every, seed=args.seed,
        command=command, save_every=args.eval_every, init=args.init, block_size=args.block_size,
        anchors=args.anchors, target_features=args.features,
    )
    if args.method == "dflash":
        from ..proposers.dflash_net import MASK_TOKEN
        from .dflash import train_dflash

        options.mask_token_id = mask_token_id(target, MASK_TOKEN)
        meta = train_dflash(target, data, out, options, resume=args.resume, log=log)
    else:
        meta = train(target, data, out, options, resume=args.resume, log=log)
    write_json(out / "train_log.json", meta)
    log(f"wrote {out}: config.json, weights, loss.png, train_log.json, checkpoint.pt")
    return 0


def mask_token_id(target, name: str) -> int:
    """The id of a DFlash drafter's mask token: `name` where the tokenizer has it as one token, else its last id
    (a tiny test model's word tokenizer has no special tokens to spare)."""
    tokenizer = target.tokenizer
    ids = tokenizer.encode(name, add_special_tokens=False) if tokenizer is not None else []
    return int(ids[0]) if len(ids) == 1 else target.vocab_size - 1


def merge_datasets(parts: list[dict]) -> dict:
    """Several data files read as one (their conversations one after another)."""
    if len(parts) == 1:
        return parts[0]
    merged = {key: [item for part in parts for item in part[key]] for key in ("sequences", "prompt_lengths")}
    merged["stats"] = {"parts": [part.get("stats", {}) for part in parts]}
    return merged


def write_datastore(target, data: dict, out: Path, command: str, log) -> int:
    """OUT/datastore.npz and OUT/config.json: every answer of the data set (the prompts are left out: drafts
    guess what the target writes). `target` (a LoadedModel) gives the vocabulary; where it wrote the data, it
    is the model already loaded for that."""
    from ..proposers.datastore import Datastore

    answers = [ids[length:] for ids, length in zip(data["sequences"], data["prompt_lengths"])]
    meta = {"trained_for": {"name": target.name, "vocab_size": target.vocab_size}, "command": command,
            "answers": len(answers), "data": data.get("stats", {})}
    store = Datastore.from_texts(answers, target.vocab_size, meta)
    file = store.save(out)
    log(f"wrote {file}: {store.size} tokens from {len(answers)} answers ({file.stat().st_size / 2 ** 20:.1f} MiB)")
    return 0
