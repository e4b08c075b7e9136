"""DFlash drafters' files: z-lab's published layout (e.g. z-lab/Qwen3-8B-DFlash-b16, z-lab/LLaMA3.1-8B-Instruct-
DFlash-UltraChat), which the drafters trained here share.

- config.json: a Qwen3Config of the draft layers with `block_size`, `num_target_layers` and `dflash_config`
  ({"target_layer_ids": [...], "mask_token_id": N}); ours add a "specviz" block (the target trained for, how).
- model.safetensors, or shards with model.safetensors.index.json (theirs) or model-0000k-of-0000n.safetensors
  (ours: every file under 12 MiB): fc.weight [H, len(target_layer_ids) x H], hidden_norm.weight, norm.weight and
  layers.{i}.self_attn.{q,k,v,o}_proj.weight, layers.{i}.self_attn.{q,k}_norm.weight,
  layers.{i}.mlp.{gate,up,down}_proj.weight, layers.{i}.{input,post_attention}_layernorm.weight. No embedding
  and no output layer: the target's are used. Ours may hold `draft_vocab`, the token ids the head scores.

A drafter is refused where it cannot fit its target: another hidden size, a target of another depth (it reads
layers by number), a mask token outside the vocabulary.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import DrafterMismatchError, ModelLoadError
from ..models.configs import text_config
from ..models.loading import LoadedModel
from ..options import EngineOptions
from .dflash_net import DFlashConfig, DFlashDrafter, DFlashNet
from .draft_head import DraftHead, TargetParts
from .drafter_files import (MAX_FILE_BYTES, check_fits, check_trained_for, draft_vocab_ids, read_config,
                            save_config, split_files)

WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "model-*.safetensors")


def read_weights(folder: Path) -> dict:
    """Every tensor of the folder's safetensors files (one file, an index of shards, or our numbered shards)."""
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file():
        files = [folder / "model.safetensors"]
    elif index.is_file():
        files = [folder / name for name in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    else:
        files = sorted(folder.glob("model-*.safetensors"))
    if not files:
        raise ModelLoadError(f"{folder} has no model.safetensors (nor shards of it): not a DFlash drafter folder")
    state = {}
    for file in files:
        if not file.is_file():
            raise ModelLoadError(f"{folder}: the index names {file.name}, which is missing")
        state.update(load_file(str(file)))
    return state


def check_target(what: str, config: DFlashConfig, target: LoadedModel) -> None:
    """The target's numbers the drafter depends on: its depth (the layers read), its vocabulary (the mask)."""
    layers = text_config(target.model.config).num_hidden_layers
    if config.num_target_layers != layers:
        raise DrafterMismatchError(
            f"{what} was trained for a target of {config.num_target_layers} layers, but '{target.name}' has {layers}: "
            "it reads the target's layers by number; use a drafter trained for this target (or train one with "
            "python -m specviz train-drafter --method dflash)")
    if not all(0 <= i < layers - 1 for i in config.target_layer_ids):
        raise DrafterMismatchError(f"{what} reads layers {config.target_layer_ids}, not all before the last of "
                                   f"'{target.name}''s {layers}")
    if not 0 <= config.mask_token_id < target.vocab_size:
        raise DrafterMismatchError(f"{what}'s mask token {config.mask_token_id} is outside the vocabulary of "
                                   f"'{target.name}' ({target.vocab_size} tokens)")


def load_dflash(folder: Path, target: LoadedModel, options: EngineOptions) -> DFlashDrafter:
    what = f"the DFlash drafter in {folder}"
    data = read_config(folder)
    try:
        config = DFlashConfig.from_json(data)
    except KeyError as error:
        raise ModelLoadError(f"{folder}/config.json lacks {error.args[0]}: not a DFlash drafter") from None
    check_trained_for(what, target, data)
    check_fits(what, target, config.hidden_size, data.get("vocab_size"))
    check_target(what, config, target)
    state = read_weights(folder)
    token_ids = draft_vocab_ids(state, target, what)
    for name in [k for k in state if k.endswith("rotary_emb.inv_freq")]:  # a buffer some versions saved
        del state[name]
    net = DFlashNet(config)
    missing, unexpected = net.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ModelLoadError(f"{folder}: its tensors do not match config.json's DFlash layers: missing "
                             f"{missing[:4]}, unexpected {unexpected[:4]}")
    net.to(target.device, target.dtype).eval().requires_grad_(False)
    parts = TargetParts(target.model, config.head_dim)
    return DFlashDrafter(net, parts, DraftHead.from_target(parts, token_ids, options.onednn), str(folder),
                         options.onednn)


def save_dflash(folder: Path, net: DFlashNet, token_ids: torch.Tensor | None, meta: dict,
                dtype: torch.dtype = torch.float16) -> list[Path]:
    """Our files: z-lab's config and tensor names, model-0000k-of-0000n.safetensors of at most MAX_FILE_BYTES each,
    plus draft_vocab and a specviz block."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("model*.safetensors"):
        old.unlink()
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in net.state_dict().items()}
    groups = split_files(state, MAX_FILE_BYTES)
    if token_ids is not None:
        groups[0]["draft_vocab"] = token_ids.detach().to("cpu", torch.int64).contiguous()
    save_config(folder, {**net.config.to_json(), "specviz": meta})
    files = []
    for index, group in enumerate(groups, 1):
        files.append(folder / f"model-{index:05d}-of-{len(groups):05d}.safetensors")
        save_file(group, str(files[-1]))
    return files
