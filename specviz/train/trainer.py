"""The training loop shared by both drafters: target features computed once, length-bucketed batches, AdamW
with warmup and a cosine schedule over a step or time budget, checkpoints to resume from, a progress bar,
a loss curve, and a validation estimate of tau on held-out conversations."""
from __future__ import annotations

import json
import math
import platform
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import InvalidSettingError
from ..models.loading import LoadedModel
from ..proposers.checkpoints import read_medusa_blocks, save_eagle, save_medusa
from ..proposers.eagle3_files import default_layers, save_eagle3
from ..proposers.distilled import build_draft_model, draft_config, save_distilled, spread_layers, start_from_target
from ..proposers.draft_head import TargetParts
from ..proposers.eagle_net import EagleConfig, EagleNet
from ..proposers.medusa_net import MedusaHeads
from .losses import draft_logits, draft_model_loss, eagle_loss, medusa_loss, ttt_forward
from .plot import save_loss_curve


@dataclass
class TrainOptions:
    method: str  # "eagle", "eagle3", "medusa", "draft-model" or "dflash"
    steps: int | None = None  # optimizer steps; None = until `minutes`
    minutes: float | None = None  # time budget for training (the schedule follows whichever ends first)
    batch_tokens: int = 16384  # tokens per batch (sequences of similar length are batched together)
    lr: float = 1e-3
    warmup: int = 50
    weight_decay: float = 0.0
    draft_vocab: int = 8192  # tokens the draft head scores (most frequent in the answers); 0 = all
    ttt_steps: int = 5  # EAGLE: draft steps unrolled in training
    feature_weight: float = 1.0  # EAGLE: weight of the feature regression next to the cross-entropy
    step_decay: float = 0.8  # weight of unrolled step / head k: decay ** k
    medusa_heads: int = 5
    medusa_layers: int = 1
    draft_layers: int = 2  # draft-model: decoder layers
    init_layers: str = "first"  # draft-model: target layers to start from: spread, first, or ids "0,29"
    chain: int = 5  # draft-model: draft length the held-out estimate of tau is computed for
    block_size: int = 16  # dflash: a block's positions (its first token and the drafts after it)
    anchors: int = 32  # dflash: blocks trained a conversation and step
    target_features: int = 5  # dflash: the target layers it reads
    position_decay: float = 7.0  # dflash: block position k weighs exp(-(k - 1) / position_decay) in the loss
    mask_token_id: int | None = None  # dflash: the token of the block's masked positions
    val_share: float = 0.02
    log_every: int = 10
    eval_every: int = 200
    save_every: int = 200
    seed: int = 0
    init: str | None = None  # medusa: a folder of heads to start from
    command: str = ""
    extra: dict = field(default_factory=dict)


def compute_features(target: LoadedModel, sequences: list[list[int]], batch_tokens: int,
                     layers: tuple[int, ...] | None = None) -> tuple[torch.Tensor, list[int]]:
    """Target features (hidden states after the final norm) of every position, flat [N, H] float32 on the
    target's device, and each sequence's offset in it; with `layers` (EAGLE-3's), those layers' outputs after
    them, [N, H + len(layers) * H]. Right padding with a causal mask never changes a real position's features."""
    from tqdm.auto import tqdm

    decoder = target.model.get_decoder()
    offsets, total = [], 0
    for s in sequences:
        offsets.append(total)
        total += len(s)
    hidden = target.model.get_output_embeddings().weight.shape[1]
    flat = torch.empty(total, hidden * (1 + len(layers or ())), dtype=torch.float32, device=target.device)
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    with torch.inference_mode(), tqdm(total=total, desc="target features", unit="tok") as bar:
        for group in length_batches([len(sequences[i]) for i in order], batch_tokens):
            rows = [order[g] for g in group]
            width = max(len(sequences[r]) for r in rows)
            ids = torch.zeros(len(rows), width, dtype=torch.long)
            for b, r in enumerate(rows):
                ids[b, : len(sequences[r])] = torch.tensor(sequences[r])
            result = decoder(input_ids=ids.to(target.device), use_cache=False, output_hidden_states=bool(layers))
            # hidden_states[i + 1] is layer i's output, as the runners hand it over (runners.causal.layer_features)
            out = torch.cat([result.last_hidden_state, *(result.hidden_states[i + 1] for i in layers or ())],
                            -1).float()
            for b, r in enumerate(rows):
                flat[offsets[r]: offsets[r] + len(sequences[r])] = out[b, : len(sequences[r])]
            bar.update(sum(len(sequences[r]) for r in rows))
    return flat, offsets


def length_batches(lengths: list[int], batch_tokens: int) -> list[list[int]]:
    """Indices (into `lengths`, assumed sorted ascending) grouped so that rows x longest <= batch_tokens."""
    batches, current = [], []
    for index, length in enumerate(lengths):
        if current and (len(current) + 1) * length > batch_tokens:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


class Batches:
    """Padded batches of (tokens, features, teacher distributions, masks) for a set of sequences."""

    def __init__(self, data: dict, rows: list[int], features: torch.Tensor, offsets: list[int], parts: TargetParts,
                 head_weight: torch.Tensor, batch_tokens: int, device):
        """features [N, H] (the final hidden states), or [N, H + F] with EAGLE-3's layers after them: then the
        batches' features are those layers, and the final ones only give the teacher."""
        self.data, self.features, self.offsets = data, features, offsets
        self.parts, self.head_weight, self.device = parts, head_weight, device
        rows = sorted(rows, key=lambda r: len(data["sequences"][r]))
        self.groups = [[rows[i] for i in g]
                       for g in length_batches([len(data["sequences"][r]) for r in rows], batch_tokens)]

    def __len__(self):
        return len(self.groups)

    @torch.no_grad()
    def make(self, group: list[int]) -> dict:
        sequences, prompt_lengths = self.data["sequences"], self.data["prompt_lengths"]
        width = max(len(sequences[r]) for r in group)
        hidden = self.features.shape[1]
        ids = torch.zeros(len(group), width, dtype=torch.long)
        features = torch.zeros(len(group), width, hidden, device=self.device)
        valid = torch.zeros(len(group), width, dtype=torch.bool)
        for b, r in enumerate(group):
            n = len(sequences[r])
            ids[b, :n] = torch.tensor(sequences[r])
            features[b, :n] = self.features[self.offsets[r]: self.offsets[r] + n]
            # p_j (predicting x_{j+1}) counts when x_{j+1} belongs to the answer
            valid[b, max(0, prompt_lengths[r] - 1): n] = True
        ids, valid = ids.to(self.device), valid.to(self.device)
        final = self.head_weight.shape[1]
        teacher = F.linear(features[..., :final], self.head_weight).softmax(-1)
        if hidden > final:  # EAGLE-3: the drafter reads the layers after the final hidden state
            features = features[..., final:]
        return {"ids": ids, "features": features, "embeds": self.parts.embed(ids).float(), "teacher": teacher,
                "valid": valid}


def init_layer_ids(choice: str, target_layers: int, layers: int) -> list[int]:
    """The target layers a draft model starts from: "spread" (first, last and evenly between), "first" (the
    first `layers`), or explicit ids "0,29"."""
    if choice == "spread":
        return spread_layers(target_layers, layers)
    if choice == "first":
        return list(range(layers))
    ids = [int(part) for part in choice.split(",")]
    if len(ids) != layers or not all(0 <= i < target_layers for i in ids):
        raise InvalidSettingError(f"--init-layers {choice}: give {layers} layer ids between 0 and {target_layers - 1}")
    return ids


def split_rows(data: dict, share: float) -> tuple[list[int], list[int]]:
    """Held-out rows: greedy answers to Magpie prompts (the decoding drafters are measured on). Training
    rows: all others, except long-context prompts that quote a held-out answer (that would leak it)."""
    count = len(data["sequences"])
    greedy = data.get("greedy") or [True] * count
    sources = data.get("sources") or [[] for _ in range(count)]
    candidates = [r for r in range(count) if greedy[r] and not sources[r]]
    val_rows = candidates[-max(1, int(count * share)):]
    held_ids = {data["row_ids"][r] for r in val_rows} if "row_ids" in data else set()
    held = set(val_rows)
    train_rows = [r for r in range(count) if r not in held and not held_ids.intersection(sources[r])]
    return val_rows, train_rows or val_rows


def schedule(step: int, fraction: float, options: TrainOptions) -> float:
    warm = min(1.0, (step + 1) / max(1, options.warmup))
    return options.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, fraction))))


@torch.no_grad()
def evaluate(method: str, model, batches: Batches, parts: TargetParts, options: TrainOptions, autocast) -> dict:
    """On held-out conversations: for each draft length k + 1, the share of draft chains whose first k + 1
    tokens all equal the target's greedy choice (what greedy verification accepts), and the tokens per step
    that implies. A chain starts wherever its first draft token belongs to an answer."""
    depth = {"eagle": options.ttt_steps, "eagle3": options.ttt_steps, "medusa": options.medusa_heads}.get(method,
                                                                                                          options.chain)
    joint, starts_total = [0.0] * depth, 0.0
    for group in batches.groups:
        batch = batches.make(group)
        choice, valid = batch["teacher"].argmax(-1), batch["valid"]  # target's pick for x_{j+1}; does it count
        starts = valid[:, 1:]  # chain start s: its first draft is x_{s+2}, chosen from p_{s+1}
        hits = [torch.zeros_like(starts) for _ in range(depth)]  # hits[k][s]: draft k + 1 of chain s is right
        with autocast():
            if method in ("eagle", "eagle3"):
                length = starts.shape[1]
                cos, sin = parts.rotary(torch.arange(length, device=starts.device))
                outs = ttt_forward(model, batch["features"][:, :-1], batch["embeds"][:, 1:], cos.float(), sin.float(),
                                   depth)
                for k, out in enumerate(outs):  # step k at position s + k
                    right = (draft_logits(model, out, batches.head_weight).argmax(-1) == choice[:, 1:]) & starts
                    hits[k][:, : length - k] = right[:, k:]
            elif method == "draft-model":  # teacher-forced: a chain reads the target's own (accepted) tokens
                right = (model(input_ids=batch["ids"], use_cache=False).logits.argmax(-1) == choice) & valid
                length = starts.shape[1]
                for k in range(min(depth, length)):  # draft k + 1 of chain s comes from position s + 1 + k
                    hits[k][:, : length - k] = right[:, 1 + k:]
            else:
                length = valid.shape[1]
                for k, block in enumerate(model.blocks):  # head k at position s predicts from p_{s+k+1}
                    shift = k + 1
                    if length <= shift:
                        break
                    logits = F.linear(block(batch["features"][:, :-shift]), batches.head_weight)
                    hits[k][:, : length - shift] = (logits.argmax(-1) == choice[:, shift:]) & valid[:, shift:]
        running = starts.clone()
        starts_total += float(starts.sum())
        for k in range(depth):
            running &= hits[k]
            joint[k] += float(running.sum())
    chain = [j / max(1.0, starts_total) for j in joint]
    return {"chain_acceptance": [round(c, 4) for c in chain], "expected_tau": round(1 + sum(chain), 3)}


def train(target: LoadedModel, data: dict, out: Path, options: TrainOptions, resume: bool = False,
          log=print) -> dict:
    """Train a drafter for `target` on `data` (train/data.py) and write it to `out` (config.json, weights,
    loss.png, checkpoint.pt to resume)."""
    from tqdm.auto import tqdm

    from .data import draft_vocabulary

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(options.seed)
    device = target.device
    parts = TargetParts(target.model, EagleConfig.like_target(target.model.config).head_dim)
    checkpoint_file = out / "checkpoint.pt"
    checkpoint = torch.load(checkpoint_file, map_location=device,
                            weights_only=False) if resume and checkpoint_file.is_file() else None

    if checkpoint is not None:
        token_ids = checkpoint["token_ids"]
        coverage = checkpoint["coverage"]
    else:
        token_ids, coverage = draft_vocabulary(data, parts.vocab_size, options.draft_vocab)
    head_weight = parts.output.weight.detach().float()
    head_weight = head_weight[token_ids.to(device)] if token_ids is not None else head_weight
    log(f"draft vocabulary: {head_weight.shape[0]} tokens, covering {coverage:.2%} of answer tokens")

    depth = len(target.model.get_decoder().layers)
    layers = None
    if options.method == "eagle":
        config = EagleConfig.like_target(target.model.config)
        model = EagleNet(config)
    elif options.method == "eagle3":
        layers = default_layers(depth)
        config = EagleConfig.like_target(target.model.config, target_layers=layers,
                                         draft_vocab_size=head_weight.shape[0])
        model = EagleNet(config)
        with torch.no_grad():  # its own output layer starts as the target's rows for the draft vocabulary
            model.lm_head.weight.copy_(head_weight)
        log(f"EAGLE-3 drafter reading the outputs of the target's layers {list(layers)}")
    elif options.method == "draft-model":
        model = build_draft_model(target.model, draft_config(target.model.config, options.draft_layers),
                                  token_ids.to(device) if token_ids is not None else None)
        if checkpoint is None:
            sources = init_layer_ids(options.init_layers, len(target.model.get_decoder().layers), options.draft_layers)
            start_from_target(model, target.model, sources)
            log(f"draft model of {options.draft_layers} layers, started from the target's layers {sources}")
    else:
        model = MedusaHeads(parts.hidden_size, options.medusa_heads, options.medusa_layers)
        if options.init and checkpoint is None:
            read_medusa_blocks(Path(options.init), model)
            log(f"started from the heads in {options.init}")
    model.to(device).float().train()
    # a draft model's embedding and output rows are the target's
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=options.lr, betas=(0.9, 0.95),
                                  weight_decay=options.weight_decay)
    step, elapsed, history, evals, commands = 0, 0.0, [], [], []
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        step, elapsed, history, evals = (
            checkpoint["step"],
            checkpoint["elapsed"],
            checkpoint["history"],
            checkpoint["evals"],
        )
        commands = checkpoint.get("commands", [])
        log(f"resumed at step {step} ({elapsed:.0f}s trained)")
    commands = commands + [options.command]

    features, offsets = compute_features(target, data["sequences"], options.batch_tokens * 2, layers)
    val_rows, train_rows = split_rows(data, options.val_share)
    train_batches = Batches(data, train_rows, features, offsets, parts, head_weight, options.batch_tokens, device)
    val_batches = Batches(data, val_rows, features, offsets, parts, head_weight, options.batch_tokens, device)
    log(f"{len(train_rows)} training conversations in {len(train_batches)} batches, {len(val_rows)} held out")

    use_amp = device.type == "cuda"
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_amp else no_autocast
    rng = random.Random(options.seed + step)
    budget = options.minutes * 60 if options.minutes else None

    def fraction() -> float:
        parts_done = [step / options.steps if options.steps else 0.0, elapsed / budget if budget else 0.0]
        return max(parts_done)

    def save_checkpoint():
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                    "elapsed": elapsed, "history": history, "evals": evals, "token_ids": token_ids,
                    "coverage": coverage, "options": asdict(options), "commands": commands}, checkpoint_file)

    order: list[list[int]] = []
    bar = tqdm(total=options.steps or (round(budget) if budget else None), desc=f"train {options.method}",
               unit="step" if options.steps else "s", initial=step if options.steps else round(elapsed))
    while fraction() < 1.0:
        started = time.monotonic()
        if not order:
            order = list(train_batches.groups)
            rng.shuffle(order)
        batch = train_batches.make(order.pop())
        lr = schedule(step, fraction(), options)
        for group in optimizer.param_groups:
            group["lr"] = lr
        with autocast():
            if options.method in ("eagle", "eagle3"):
                length = batch["ids"].shape[1] - 1
                cos, sin = parts.rotary(torch.arange(length, device=device))
                loss, stats = eagle_loss(model, batch, head_weight, cos.float(), sin.float(), options.ttt_steps,
                                         options.feature_weight, options.step_decay)
            elif options.method == "draft-model":
                loss, stats = draft_model_loss(model, batch)
            else:
                loss, stats = medusa_loss(model, batch, head_weight, options.step_decay)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        step += 1
        if device.type == "cuda":
            torch.cuda.synchronize()
        spent = time.monotonic() - started
        elapsed += spent
        bar.update(1 if options.steps else spent)
        if step % options.log_every == 0 or step == 1:
            history.append({"step": step, "seconds": round(elapsed, 1), "loss": round(float(loss.detach()), 4),
                            "lr": lr,
                            **{k: [round(v, 4) for v in vals] for k, vals in stats.items()}})
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", acc=" ".join(f"{a:.2f}" for a in stats["acc"][:3]))
        if step % options.eval_every == 0:
            model.eval()
            evals.append({"step": step, **evaluate(options.method, model, val_batches, parts, options, autocast)})
            model.train()
            log(f"step {step}: held-out {evals[-1]}")
        if step % options.save_every == 0:
            save_checkpoint()
    bar.close()
    model.eval()
    final = evaluate(options.method, model, val_batches, parts, options, autocast)
    evals.append({"step": step, **final})
    save_checkpoint()
    log(f"final held-out: {final}")

    meta = {
        "trained_for": {"target": target.name, "description": target.describe(), "hidden_size": parts.hidden_size,
                        "vocab_size": parts.vocab_size, "num_layers": depth},
        "method": options.method,
        "command": options.command,
        "commands": commands,  # every run that trained these weights, the first one first (--resume)
        "data": {**{k: v for k, v in data.get("stats", {}).items() if k != "examples"}, "plan": data.get("plan")},
        "draft_vocab": {"size": head_weight.shape[0], "answer_token_coverage": round(coverage, 4)},
        "training": {"steps": step, "seconds": round(elapsed, 1), "options": asdict(options),
                     "device": device_name(device), "torch": torch.__version__,
                     "final_loss": history[-1]["loss"] if history else None, "held_out": final,
                     "evals": evals},
    }
    if options.method == "eagle":
        save_eagle(out, model, token_ids, meta)
    elif options.method == "eagle3":
        save_eagle3(out, model, token_ids, parts.vocab_size, meta)
    elif options.method == "draft-model":
        save_distilled(out, model, token_ids, meta)
    else:
        save_medusa(out, model, token_ids, meta)
    save_loss_curve(history, evals, out / "loss.png", f"{options.method} drafter for {target.name}")
    return meta


class no_autocast:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n")
