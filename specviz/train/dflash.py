"""Training a DFlash block drafter (proposers/dflash_net.py) on the target's own answers.

A training example is a block: an anchor position a of an answer, the block [x_a, mask, ..., mask] at positions
a .. a + B - 1, the target's features of every position before a as its context, and as labels the answer's
tokens x_{a+1} .. x_{a+B-1} (the target wrote them: at inference the drafts must be what it writes). Each step takes
a batch of conversations, runs the target over them once (its hidden states at the layers the drafter reads),
samples `anchors` anchors per conversation in its answer and trains all their blocks in one forward, with a mask
that shows each block the context before its anchor and its own positions (DFlash's training, in dense form). The
loss at block position k is weighted exp(-(k - 1) / decay), since a late position only counts when every earlier
one was accepted.

Held out: blocks at every anchor of held-out conversations whose whole block lies in the answer; the share whose
first k drafts all equal the answer's tokens (what greedy verification accepts) and the tokens a step that
implies, 1 + the sum of those shares.
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from ..models.loading import LoadedModel
from ..proposers.dflash_files import save_dflash
from ..proposers.dflash_net import DFlashConfig, DFlashNet, drafter_rotary
from ..proposers.draft_head import TargetParts
from .plot import save_loss_curve
from .trainer import TrainOptions, device_name, length_batches, no_autocast, schedule, split_rows


def target_features(target: LoadedModel, ids: torch.Tensor, layers: list[int]) -> torch.Tensor:
    """ids [B, S] (right-padded: a causal mask keeps the padding out of every real position) -> the outputs of
    the target's `layers`, side by side [B, S, len(layers) x H]: what the engine's runner hands a DFlash drafter."""
    with torch.no_grad():
        states = target.model.get_decoder()(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    return torch.cat([states[i + 1] for i in layers], dim=-1)


def sample_anchors(lengths: torch.Tensor, prompt_lengths: torch.Tensor, width: int, count: int,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` distinct anchors per conversation, uniformly among its answer's positions a (from the prompt's
    last token, whose block drafts the answer's first tokens, to the last but one): (anchors [B, count], which are
    real [B, count]; a conversation with fewer positions gets them all, the rest marked unreal)."""
    positions = torch.arange(width, device=lengths.device)
    allowed = (positions[None, :] >= (prompt_lengths[:, None] - 1).clamp(min=0)) & (
        positions[None, :] <= lengths[:, None] - 2
    )
    scores = torch.rand(lengths.shape[0], width, generator=generator, device=lengths.device)
    scores = torch.where(allowed, scores, -1.0)
    picked, anchors = scores.topk(min(count, width), dim=1)
    return anchors, picked >= 0


def block_batch(ids: torch.Tensor, lengths: torch.Tensor, anchors: torch.Tensor, real: torch.Tensor,
                block: int, mask_token: int) -> dict:
    """The blocks of anchors [B, A] laid side by side (N = A x block rows a conversation): their token ids and
    positions [B, N], labels [B, N] (-1: none: a block's first row, past the conversation's end, or an unreal
    anchor), each row's position in its block [N], and the attention mask [B, N, S + N]."""
    batch, width = ids.shape
    count = anchors.shape[1]
    offsets = torch.arange(block, device=ids.device)
    positions = anchors[:, :, None] + offsets  # [B, A, block]
    tokens = torch.full_like(positions, mask_token)
    tokens[:, :, 0] = ids.gather(1, anchors)
    labels = ids.gather(1, positions.clamp(max=width - 1).flatten(1)).view_as(positions)
    labelled = (offsets > 0) & (positions < lengths[:, None, None]) & real[:, :, None]
    labels = torch.where(labelled, labels, -1)
    row_anchor = anchors[:, :, None].expand(-1, -1, block).reshape(batch, -1)  # [B, N]
    context = torch.arange(width, device=ids.device)[None, None, :] < row_anchor[:, :, None]  # [B, N, S]
    own = torch.arange(count, device=ids.device).repeat_interleave(block)  # each row's block
    same = (own[:, None] == own[None, :]).expand(batch, -1, -1)  # [B, N, N]: a block sees all of itself
    return {"tokens": tokens.flatten(1), "positions": positions.flatten(1), "labels": labels.flatten(1),
            "offsets": offsets.repeat(count), "mask": torch.cat([context, same], dim=-1)}


def block_outputs(net: DFlashNet, rotary, parts: TargetParts, features: torch.Tensor, blocks: dict) -> torch.Tensor:
    """The drafter over a batch's blocks: [B, N, H], after its final norm."""
    batch, width = features.shape[:2]
    device = features.device
    context_cos, context_sin = (t.reshape(1, width, -1) for t in rotary(torch.arange(width, device=device)))
    positions = blocks["positions"]
    block_cos, block_sin = (t.reshape(*positions.shape, -1) for t in rotary(positions.flatten()))
    embeds = parts.embed(blocks["tokens"]).to(features.dtype)
    return net.train_forward(features, context_cos.to(features.dtype), context_sin.to(features.dtype), embeds,
                             block_cos.to(features.dtype), block_sin.to(features.dtype), blocks["mask"])


def dflash_loss(net, rotary, parts, head_weight, draft_index, features, blocks, block: int, decay: float):
    """Position-weighted cross-entropy over the labelled rows; stats: the share right at each block position."""
    labels = blocks["labels"]
    rows = labels >= 0
    hidden = block_outputs(net, rotary, parts, features, blocks)[rows]
    logits = F.linear(hidden, head_weight).float()
    offsets = blocks["offsets"].expand_as(labels)[rows]
    target = draft_index[labels[rows]]  # -1: a token the head does not score
    scored = target >= 0
    weights = torch.exp(-(offsets - 1).float() / decay) * scored
    ce = F.cross_entropy(logits, target.clamp(min=0), reduction="none")
    loss = (ce * weights).sum() / weights.sum().clamp_min(1e-6)
    right = (logits.argmax(-1) == target) & scored
    acc = [float(right[offsets == k].float().mean()) if bool((offsets == k).any()) else 0.0 for k in range(1, block)]
    return loss, {"acc": acc}


class Conversations:
    """Length-bucketed groups of conversations, padded to a batch on the device."""

    def __init__(self, data: dict, rows: list[int], batch_tokens: int, device):
        self.data, self.device = data, device
        rows = sorted(rows, key=lambda r: len(data["sequences"][r]))
        self.groups = [[rows[i] for i in g]
                       for g in length_batches([len(data["sequences"][r]) for r in rows], batch_tokens)]

    def make(self, group: list[int]):
        sequences, prompts = self.data["sequences"], self.data["prompt_lengths"]
        width = max(len(sequences[r]) for r in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        for b, r in enumerate(group):
            ids[b, :len(sequences[r])] = torch.tensor(sequences[r])
        lengths = torch.tensor([len(sequences[r]) for r in group])
        prompt_lengths = torch.tensor([prompts[r] for r in group])
        return ids.to(self.device), lengths.to(self.device), prompt_lengths.to(self.device)


@torch.no_grad()
def evaluate_dflash(net, rotary, parts, head_weight, draft_index, target, layers, conversations: Conversations,
                    config: DFlashConfig, autocast) -> dict:
    """Held out: the share of blocks whose first k drafts all equal the answer (k = 1 .. block - 1) and the
    expected tokens a step at the whole block (1 + their sum)."""
    block = config.block_size
    joint, total = torch.zeros(block - 1, dtype=torch.float64), 0
    for group in conversations.groups:
        ids, lengths, prompt_lengths = conversations.make(group)
        width = ids.shape[1]
        positions = torch.arange(width, device=ids.device)
        whole = (positions[None, :] >= (prompt_lengths[:, None] - 1).clamp(min=0)) & \
            (positions[None, :] + block - 1 <= lengths[:, None] - 1)
        with autocast():
            features = target_features(target, ids, layers)
        for begin in range(0, width, 32):  # anchors in slices: the mask grows with their number
            anchors = positions[begin:begin + 32].expand(ids.shape[0], -1)
            real = whole[:, begin:begin + 32]
            if not bool(real.any()):
                continue
            blocks = block_batch(ids, lengths, anchors.contiguous(), real, block, config.mask_token_id)
            with autocast():
                hidden = block_outputs(net, rotary, parts, features, blocks)
            logits = F.linear(hidden.float(), head_weight.float())
            guess = logits.argmax(-1).view(*anchors.shape, block)[:, :, 1:]
            labels = draft_index[blocks["labels"].clamp(min=0)].view(*anchors.shape, block)[:, :, 1:]
            right = (guess == labels)[real]  # [blocks, block - 1]
            joint += right.int().cumprod(-1).sum(0).double().cpu()
            total += int(right.shape[0])
    chain = (joint / max(1, total)).tolist()
    return {"chain_acceptance": [round(c, 4) for c in chain], "expected_tau": round(1 + sum(chain), 3),
            "blocks": total}


def draft_index_of(token_ids: torch.Tensor | None, vocab_size: int, device) -> torch.Tensor:
    """[V]: each token's row in the draft head (-1 where it scores none)."""
    index = torch.full((vocab_size,), -1, dtype=torch.long, device=device)
    if token_ids is None:
        return torch.arange(vocab_size, device=device)
    index[token_ids.to(device)] = torch.arange(token_ids.shape[0], device=device)
    return index


def start_from(folder: Path, target: LoadedModel):
    """A drafter folder to start training from (--init): its config, its draft vocabulary and its weights."""
    from ..options import EngineOptions
    from ..proposers.dflash_files import load_dflash, read_weights

    load_dflash(folder, target, EngineOptions())  # the checks that it fits this target, with their messages
    state = read_weights(folder)
    token_ids = state.pop("draft_vocab", None)
    return DFlashConfig.from_json(json.loads((folder / "config.json").read_text())), token_ids, state


def draft_coverage(data: dict, vocab_size: int, token_ids: torch.Tensor | None) -> float:
    """The share of the answers' tokens that a draft vocabulary holds."""
    from .data import token_frequencies

    counts = token_frequencies(data, vocab_size)
    return 1.0 if token_ids is None else float(counts[token_ids.long()].sum()) / max(1, int(counts.sum()))


def train_dflash(target: LoadedModel, data: dict, out: Path, options: TrainOptions, resume: bool = False,
                 log=print) -> dict:
    """Train a DFlash drafter for `target` on `data` and write it to `out` (config.json, weights, loss.png,
    checkpoint.pt to resume)."""
    from tqdm.auto import tqdm

    from .data import draft_vocabulary

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(options.seed)
    device = target.device
    checkpoint_file = out / "checkpoint.pt"
    checkpoint = torch.load(checkpoint_file, map_location=device, weights_only=False) \
        if resume and checkpoint_file.is_file() else None
    start = start_from(Path(options.init), target) if options.init and checkpoint is None else None
    if checkpoint is not None:
        config = DFlashConfig(**checkpoint["config"])
        token_ids, coverage = checkpoint["token_ids"], checkpoint["coverage"]
    elif start is not None:
        config, token_ids, state = start
        coverage = draft_coverage(data, target.vocab_size, token_ids)
    else:
        config = DFlashConfig.like_target(target.model.config, layers=options.draft_layers,
                                          features=options.target_features, mask_token_id=options.mask_token_id,
                                          block_size=options.block_size)
        token_ids, coverage = draft_vocabulary(data, target.vocab_size, options.draft_vocab)
    parts = TargetParts(target.model, config.head_dim)
    rotary = drafter_rotary(config, parts)
    head_weight = parts.output.weight.detach().float()
    head_weight = head_weight[token_ids.to(device)] if token_ids is not None else head_weight
    draft_index = draft_index_of(token_ids, target.vocab_size, device)
    log(f"draft vocabulary: {head_weight.shape[0]} tokens, covering {coverage:.2%} of answer tokens; reading the "
        f"target's layers {config.target_layer_ids}, blocks of {config.block_size}")

    net = DFlashNet(config)
    if start is not None:
        net.load_state_dict(start[2])
        log(f"started from the drafter in {options.init}")
    net = net.to(device).float().train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=options.lr, betas=(0.9, 0.95), weight_decay=options.weight_decay)
    step, elapsed, history, evals, commands = 0, 0.0, [], [], []
    if checkpoint is not None:
        net.load_state_dict(checkpoint["model"])
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

    val_rows, train_rows = split_rows(data, options.val_share)
    train_set = Conversations(data, train_rows, options.batch_tokens, device)
    val_set = Conversations(data, val_rows, options.batch_tokens, device)
    log(f"{len(train_rows)} training conversations in {len(train_set.groups)} batches, {len(val_rows)} held out")
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else no_autocast
    rng = random.Random(options.seed + step)
    generator = torch.Generator(device).manual_seed(options.seed + step)
    budget = options.minutes * 60 if options.minutes else None
    anchors, decay = options.anchors, options.position_decay

    def fraction() -> float:
        return max(step / options.steps if options.steps else 0.0, elapsed / budget if budget else 0.0)

    def evaluate() -> dict:
        net.eval()
        result = evaluate_dflash(net, rotary, parts, head_weight, draft_index, target, config.target_layer_ids,
                                 val_set, config, autocast)
        net.train()
        return {"step": step, **result}

    def save_checkpoint():
        torch.save({"model": net.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "elapsed": elapsed,
                    "history": history, "evals": evals, "token_ids": token_ids, "coverage": coverage,
                    "config": asdict(config), "options": asdict(options), "commands": commands}, checkpoint_file)

    order: list[list[int]] = []
    bar = tqdm(total=options.steps or (round(budget) if budget else None), desc="train dflash",
               unit="step" if options.steps else "s", initial=step if options.steps else round(elapsed))
    while fraction() < 1.0:
        started = time.monotonic()
        if not order:
            order = list(train_set.groups)
            rng.shuffle(order)
        ids, lengths, prompt_lengths = train_set.make(order.pop())
        picked, real = sample_anchors(lengths, prompt_lengths, ids.shape[1], anchors, generator)
        blocks = block_batch(ids, lengths, picked, real, config.block_size, config.mask_token_id)
        lr = schedule(step, fraction(), options)
        for group in optimizer.param_groups:
            group["lr"] = lr
        with autocast():
            features = target_features(target, ids, config.target_layer_ids)
            loss, stats = dflash_loss(net, rotary, parts, head_weight, draft_index, features, blocks,
                                      config.block_size, decay)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        step += 1
        if device.type == "cuda":
            torch.cuda.synchronize()
        spent = time.monotonic() - started
        elapsed += spent
        bar.update(1 if options.steps else spent)
        if step % options.log_every == 0 or step == 1:
            history.append({"step": step, "seconds": round(elapsed, 1), "loss": round(float(loss.detach()), 4),
                            "lr": lr, "acc": [round(a, 4) for a in stats["acc"]]})
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", acc=" ".join(f"{a:.2f}" for a in stats["acc"][:3]))
        if step % options.eval_every == 0:
            evals.append(evaluate())
            log(f"step {step}: held-out {evals[-1]}")
        if step % options.save_every == 0:
            save_checkpoint()
    bar.close()
    final = evaluate()
    evals.append(final)
    save_checkpoint()
    log(f"final held-out: {final}")
    if not math.isfinite(history[-1]["loss"] if history else 0.0):
        log("warning: the last training loss is not finite")

    meta = {
        "trained_for": {"target": target.name, "description": target.describe(), "hidden_size": parts.hidden_size,
                        "vocab_size": parts.vocab_size},
        "method": "dflash", "command": options.command, "commands": commands,
        "data": {**{k: v for k, v in data.get("stats", {}).items() if k != "examples"}, "plan": data.get("plan")},
        "draft_vocab": {"size": head_weight.shape[0], "answer_token_coverage": round(coverage, 4)},
        "training": {"steps": step, "seconds": round(elapsed, 1), "options": asdict(options),
                     "device": device_name(device), "torch": torch.__version__,
                     "final_loss": history[-1]["loss"] if history else None, "held_out": final, "evals": evals},
    }
    save_dflash(out, net, token_ids, meta)
    save_loss_curve(history, evals, out / "loss.png", f"dflash drafter for {target.name}")
    return meta
