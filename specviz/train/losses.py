"""Training objectives for the drafters, on batches of target features (self-distillation).

Notation for one sequence x_0 .. x_{T-1} with target features f_0 .. f_{T-1} (f_j after reading x_0..x_j,
the target's hidden state after its final norm): the teacher's distribution for x_{j+1} is
p_j = softmax(W f_j) over the draft vocabulary (W: the target's output rows for those tokens).

EAGLE with training-time test (EAGLE-3's idea; on EAGLE-1's feature drafter and on EAGLE-3's): at inference the
drafter's second and later steps read its own predicted features, so training unrolls the same chain. Step 0 is
teacher-forced: position i reads (f_i, x_{i+1}) and predicts f_{i+1} (regression) and p_{i+1} (cross-entropy).
Step k at position i reads (o^{k-1}_{i-1}, x_{i+1}), its own output from the step before at the previous
position, which is what a chain started at s = i - k reads at its k-th draft. Its attention must see what the
chain would see: the cache of true positions j <= s (step 0's keys) and the chain's own earlier positions
s + m, each computed at step m (m = 1..k). `ttt_mask` says exactly that, over the keys of all steps laid side
by side. Tokens are teacher-forced: when a draft token differs from x_{i+1}, the target rejects it anyway.

EAGLE-3 reads, in place of f_i, three of the target's layers at position i (fused by its fc), and from step 1 on
its own outputs as they are; it is trained on tokens alone (the cross-entropy), as its paper does.

Medusa: head k reads f_t and predicts p_{t+k+1} (the token k + 2 places after t).

A distilled draft model (proposers/distilled.py) reads the tokens x_0..x_j only and is fitted to p_j by the
forward KL divergence KL(p_j || q_j). Sampled verification accepts with probability 1 - TV(p, q), and
Pinsker's inequality bounds TV by sqrt(KL / 2), so a small KL means high acceptance when sampling; its
minimiser q = p also picks p's argmax, which is what greedy verification accepts. Training on the target's
own answers (on-policy data) is what DistillSpec (Zhou et al. 2023) found matters most.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..proposers.eagle_net import EagleNet, attend


def ttt_mask(length: int, step: int, device) -> torch.Tensor:
    """[T, (step + 1) * T] bool: query i of `step` may see step 0's key j when j <= i - step, and step m's key j
    (m = 1..step) only when j == i - step + m (its own chain)."""
    i = torch.arange(length, device=device).unsqueeze(1)
    j = torch.arange(length, device=device).unsqueeze(0)
    blocks = [j <= i - step] + [j == i - step + m for m in range(1, step + 1)]
    return torch.cat(blocks, dim=1)


def ttt_forward(net: EagleNet, features, embeds, cos, sin, steps: int) -> list[torch.Tensor]:
    """features [B, T, F] (f_i at position i: the final hidden state, or EAGLE-3's three layers), embeds [B, T, H]
    (embedding of x_{i+1}), cos and sin [1, T, d]. Returns each step's outputs [B, T, H]: step k at position i is
    the k-th draft of the chain started at position i - k (meaningless for i < k). From step 1 on the inputs are
    the drafter's own outputs [B, T, H], which EAGLE-3 reads unfused (EagleNet.start)."""
    batch, length, _ = features.shape
    keys = [[] for _ in net.layers]
    values = [[] for _ in net.layers]
    inputs, outputs = features, []
    for step in range(steps):
        x, layer_embeds = net.start(inputs, embeds)
        mask = ttt_mask(length, step, x.device)
        for index, layer in enumerate(net.layers):
            q, k, v = layer.project(x, cos, sin, layer_embeds)
            keys[index].append(k)
            values[index].append(v)
            x = layer.finish(x, attend(q, torch.cat(keys[index], dim=2), torch.cat(values[index], dim=2), mask))
        outputs.append(x)
        inputs = torch.cat([x.new_zeros(batch, 1, x.shape[-1]), x[:, :-1]], dim=1)  # o^k_{i-1} feeds position i
    return outputs


def draft_logits(net: EagleNet, out, head_weight):
    """A drafter's scores over the draft vocabulary: EAGLE-1's feature through the target's output rows, EAGLE-3's
    output through its own final norm and output layer."""
    if net.config.eagle3:
        return net.lm_head(net.norm(out))
    return F.linear(out, head_weight)


def soft_cross_entropy(student_logits, teacher_probs):
    """-sum p log q per position: [..., K] -> [...]."""
    return -(teacher_probs * F.log_softmax(student_logits.float(), dim=-1)).sum(-1)


def masked_mean(values, mask):
    return (values * mask).sum() / mask.sum().clamp_min(1)


def eagle_loss(net, batch: dict, head_weight, cos, sin, steps: int, feature_weight: float, step_decay: float):
    """batch: features [B, T, F], embeds [B, T, H] (of x_j), teacher [B, T, K] (p_j), valid [B, T] (p_j counts).
    Returns (loss, {"ce": [...], "acc": [...], "reg": [...]}) with one entry per unrolled step. EAGLE-3 predicts
    tokens only (its output is not the target's feature): no regression, "reg" 0."""
    features, embeds, teacher, valid = batch["features"], batch["embeds"], batch["teacher"], batch["valid"]
    outputs = ttt_forward(net, features[:, :-1], embeds[:, 1:], cos, sin, steps)
    target_features, target_probs, target_valid = features[:, 1:], teacher[:, 1:], valid[:, 1:]
    positions = torch.arange(target_valid.shape[1], device=target_valid.device)
    total, weights, stats = 0.0, 0.0, {"ce": [], "acc": [], "reg": []}
    for step, out in enumerate(outputs):
        mask = (target_valid & (positions >= step)).float()
        logits = draft_logits(net, out, head_weight)
        ce = masked_mean(soft_cross_entropy(logits, target_probs), mask)
        reg = out.new_zeros(()) if net.config.eagle3 else masked_mean(
            F.smooth_l1_loss(out.float(), target_features, reduction="none").mean(-1), mask)
        acc = masked_mean((logits.argmax(-1) == target_probs.argmax(-1)).float(), mask)
        weight = step_decay ** step
        total = total + weight * (ce + feature_weight * reg)
        weights += weight
        stats["ce"].append(float(ce.detach()))
        stats["acc"].append(float(acc.detach()))
        stats["reg"].append(float(reg.detach()))
    return total / weights, stats


def medusa_loss(heads, batch: dict, head_weight, step_decay: float):
    """Head k at position t: student W(head_k(f_t)) against p_{t+k+1}."""
    features, teacher, valid = batch["features"], batch["teacher"], batch["valid"]
    total, weights, stats = 0.0, 0.0, {"ce": [], "acc": []}
    for k, block in enumerate(heads.blocks):
        shift = k + 1
        if features.shape[1] <= shift:
            break
        logits = F.linear(block(features[:, :-shift]), head_weight)
        target_probs, mask = teacher[:, shift:], valid[:, shift:].float()
        ce = masked_mean(soft_cross_entropy(logits, target_probs), mask)
        acc = masked_mean((logits.argmax(-1) == target_probs.argmax(-1)).float(), mask)
        weight = step_decay ** k
        total = total + weight * ce
        weights += weight
        stats["ce"].append(float(ce.detach()))
        stats["acc"].append(float(acc.detach()))
    return total / weights, stats



def forward_kl(student_logits, teacher_probs):
    """KL(p || q) per position, p the teacher's distribution, q = softmax(student_logits): [..., K] -> [...].
    Its cross-entropy part drives the training; the entropy of p only makes the number read as a divergence."""
    entropy = -(teacher_probs * teacher_probs.clamp_min(1e-30).log()).sum(-1)
    return soft_cross_entropy(student_logits, teacher_probs) - entropy


def draft_model_loss(model, batch: dict):
    """A token-only draft model reading x_0..x_j, against the target's p_j at every position that counts.
    Returns (loss, {"kl": [kl], "acc": [share of positions where both pick the same token]})."""
    ids, teacher, valid = batch["ids"], batch["teacher"], batch["valid"]
    logits = model(input_ids=ids, use_cache=False).logits
    mask = valid.float()
    kl = masked_mean(forward_kl(logits, teacher), mask)
    acc = masked_mean((logits.argmax(-1) == teacher.argmax(-1)).float(), mask)
    return kl, {"kl": [float(kl.detach())], "acc": [float(acc.detach())]}
