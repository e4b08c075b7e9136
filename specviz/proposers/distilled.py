"""A small draft model distilled from its target: the classic method's drafter, made without a download.

It is a causal LM of the target's own architecture with a few decoder layers and a KV cache of its own. It
reads tokens only, never the target's hidden states (that is what separates it from EAGLE), so the `draft`
method runs it like any other draft model (draft_model.ModelDrafter).

What it stores and what it borrows:
- stored: its decoder layers and final norm (float16 safetensors, split into files of at most
  MAX_FILE_BYTES), and `draft_vocab`, the token ids its output layer scores;
- borrowed from the target when loaded: the token embedding (the same tensor, not a copy) and the target's
  output rows for `draft_vocab`. On a CPU the target's 49,152-row output layer would cost a small drafter
  more than its layers; verification stays exact, because the target scores the full vocabulary.

Training (train/trainer.py, `train-drafter --method draft-model`) starts its layers from copies of some of
the target's and fits them to the target's next-token distributions on text the target wrote itself.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from torch import nn

from ..models.configs import text_config
from ..errors import DrafterMismatchError, ModelLoadError
from .drafter_files import MAX_FILE_BYTES, split_files

DISTILLED = "distilled"  # the drafter name that means "the distilled draft model shipped for this target"
WEIGHTS_GLOB = "model*.safetensors"


def spread_layers(target_layers: int, layers: int) -> list[int]:
    """Which of the target's layers start a drafter of `layers` layers: the first and the last, and the
    others evenly between (the first reads embeddings, the last writes what the output layer reads)."""
    if not 1 <= layers <= target_layers:
        raise ValueError(f"a drafter of {layers} layers cannot start from a target of {target_layers}")
    if layers == 1:
        return [0]
    step = (target_layers - 1) / (layers - 1)
    return [round(i * step) for i in range(layers)]


def draft_config(target_config, layers: int):
    """The target's config with `layers` decoder layers and an untied output layer."""
    config = copy.deepcopy(text_config(target_config))
    config.num_hidden_layers = layers
    config.tie_word_embeddings = False
    for key in ("layer_types", "max_window_layers"):  # per-layer lists and counts sized for the target's depth
        if isinstance(getattr(config, key, None), list):
            setattr(config, key, getattr(config, key)[:layers])
    return config


def output_rows(target_model: nn.Module, token_ids: torch.Tensor | None) -> nn.Linear:
    """A linear layer holding the target's output rows for token_ids (all rows when None)."""
    weight = target_model.get_output_embeddings().weight.detach()
    rows = weight if token_ids is None else weight[token_ids.to(weight.device)]
    head = nn.Linear(rows.shape[1], rows.shape[0], bias=False, device=rows.device, dtype=rows.dtype)
    head.weight = nn.Parameter(rows.clone(), requires_grad=False)
    return head


def build_draft_model(target_model: nn.Module, config, token_ids: torch.Tensor | None) -> nn.Module:
    """A draft model of `config`'s shape with the target's embedding (shared) and output rows; its decoder
    layers and norm are freshly initialised (copy or load them afterwards)."""
    from transformers import AutoModelForCausalLM

    weight = target_model.get_input_embeddings().weight
    config = copy.deepcopy(config)
    config.vocab_size = weight.shape[0]
    model = AutoModelForCausalLM.from_config(config, dtype=weight.dtype).to(weight.device)
    model.set_input_embeddings(target_model.get_input_embeddings())
    model.set_output_embeddings(output_rows(target_model, token_ids))
    model.register_buffer("draft_vocab", None if token_ids is None else token_ids.to(weight.device).long(),
                          persistent=False)
    model.get_input_embeddings().requires_grad_(False)
    return model


def start_from_target(model: nn.Module, target_model: nn.Module, sources: list[int]) -> None:
    """Copy target layers `sources` (and the final norm) into the draft model's layers, in order."""
    target_layers = target_model.get_decoder().layers
    for layer, source in zip(model.get_decoder().layers, sources):
        layer.load_state_dict(target_layers[source].state_dict())
    model.get_decoder().norm.load_state_dict(target_model.get_decoder().norm.state_dict())


def trained_state(model: nn.Module, dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
    """What a draft model stores: its layers and final norm (the embedding and output rows are the target's)."""
    decoder = model.get_decoder()
    state = {f"layers.{k}": v for k, v in decoder.layers.state_dict().items()}
    state.update({f"norm.{k}": v for k, v in decoder.norm.state_dict().items()})
    return {k: v.detach().to("cpu", dtype).contiguous() for k, v in state.items()}


def save_distilled(folder: Path, model: nn.Module, token_ids: torch.Tensor | None, meta: dict,
                   dtype: torch.dtype = torch.float16) -> list[Path]:
    """config.json (the draft's model config, with a specviz block) and model-0000k-of-0000n.safetensors."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(WEIGHTS_GLOB):
        old.unlink()
    state = trained_state(model, dtype)
    groups = split_files(state, MAX_FILE_BYTES)
    if token_ids is not None:
        groups[0]["draft_vocab"] = token_ids.detach().to("cpu", torch.int64).contiguous()
    config = model.config.to_dict()
    config["specviz"] = meta
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    files = []
    for index, group in enumerate(groups, 1):
        file = folder / f"model-{index:05d}-of-{len(groups):05d}.safetensors"
        save_file(group, str(file))
        files.append(file)
    return files


def is_distilled_folder(folder: Path) -> bool:
    config = folder / "config.json"
    if not config.is_file():
        return False
    try:
        return (json.loads(config.read_text()).get("specviz") or {}).get("method") == "draft-model"
    except json.JSONDecodeError:
        return False


def load_distilled(folder: Path, target_model: nn.Module) -> nn.Module:
    """The draft model in `folder`, on the target's device and in its dtype, sharing its embedding."""
    from safetensors.torch import load_file
    from transformers import AutoConfig

    data = json.loads((folder / "config.json").read_text())
    meta = data.pop("specviz", {}) or {}
    files = sorted(folder.glob(WEIGHTS_GLOB))
    if not files:
        raise ModelLoadError(f"{folder} has no {WEIGHTS_GLOB}: not a distilled draft model")
    state = {}
    for file in files:
        state.update(load_file(str(file)))
    trained_for = meta.get("trained_for") or {}
    embed = target_model.get_input_embeddings().weight
    for name, have in (("hidden_size", embed.shape[1]), ("vocab_size", embed.shape[0])):
        if trained_for.get(name) not in (None, have):
            raise DrafterMismatchError(f"the draft model in {folder} was trained for a target with {name} "
                                       f"{trained_for[name]}, but this target has {have}; train one for it with "
                                       "python -m specviz train-drafter --method draft-model")
    token_ids = state.pop("draft_vocab", None)
    if token_ids is not None and (int(token_ids.max()) >= embed.shape[0] or int(token_ids.min()) < 0):
        raise DrafterMismatchError(f"the draft model in {folder} scores token ids outside this target's vocabulary")
    config = AutoConfig.for_model(**data)
    model = build_draft_model(target_model, config, token_ids)
    decoder = model.get_decoder()
    layers = {k[len("layers."):]: v for k, v in state.items() if k.startswith("layers.")}
    norm = {k[len("norm."):]: v for k, v in state.items() if k.startswith("norm.")}
    try:
        decoder.layers.load_state_dict({k: v.to(embed.dtype) for k, v in layers.items()})
        decoder.norm.load_state_dict({k: v.to(embed.dtype) for k, v in norm.items()})
    except RuntimeError as error:
        raise ModelLoadError(f"the weights in {folder} do not match its config.json: "
                             f"{str(error).splitlines()[0]}") from None
    return model.eval().requires_grad_(False)
