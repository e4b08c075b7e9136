"""EAGLE-3 drafters' files: SafeAILab's published layout (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, as vLLM's
llama_eagle3.py and SGLang load it), which the drafters trained here share.

- config.json: a LlamaConfig of one layer (hidden_size, intermediate_size, num_attention_heads,
  num_key_value_heads, rms_norm_eps, vocab_size: the target's) with `draft_vocab_size`; optionally
  `target_hidden_size` and the target layers read, `eagle_aux_hidden_state_layer_ids` (at the top or inside
  `eagle_config`), in vLLM's numbering: id j is the input of the target's layer j, the output of layer j - 1.
  Without them, EAGLE-3's choice: ids 2, L // 2 and L - 3 of an L-layer target. Ours add a "specviz" block.
- pytorch_model.bin or model.safetensors (ours: model-0000k-of-0000n.safetensors, every file under 12 MiB):
  fc.weight [H, 3H] (no bias), midlayer.self_attn.{q,k,v}_proj.weight [., 2H], midlayer.self_attn.o_proj.weight,
  midlayer.mlp.{gate,up,down}_proj.weight, midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight,
  norm.weight, lm_head.weight [K, H], d2t [K] int64 (draft id d is target id d + d2t[d]) and t2d [V] bool (the
  target ids in the draft vocabulary). No embedding (it is the target's, frozen while training); one kept
  anyway is checked and dropped. Without d2t the draft vocabulary is the target's whole vocabulary.

A drafter that cannot fit its target is refused with the reason: another hidden size or vocabulary, layers the
target does not have, a draft vocabulary whose maps disagree or leave the target's vocabulary.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..errors import DrafterMismatchError, ModelLoadError
from ..models.configs import text_config
from ..models.loading import LoadedModel
from ..options import EngineOptions
from ..runners.onednn import pack_linears
from .draft_head import DraftHead, TargetParts
from .drafter_files import MAX_FILE_BYTES, check_fits, check_trained_for, save_config, split_files
from .eagle_net import EagleConfig, EagleDrafter, EagleNet

FEATURE_LAYERS = 3  # low, middle, high


def is_eagle3(state: dict) -> bool:
    return any(key.startswith("midlayer.") for key in state) or "d2t" in state


def default_layers(target_layers: int) -> tuple[int, ...]:
    """EAGLE-3's three layers for a target of this depth, as layer outputs (specviz's numbering): the inputs of
    layers 2, L // 2 and L - 3, i.e. the outputs of layers 1, L // 2 - 1 and L - 4. A target too shallow for
    those gets three distinct layers spread over all but its last."""
    layers = (1, target_layers // 2 - 1, target_layers - 4)
    if layers[0] < layers[1] < layers[2]:
        return layers
    if target_layers - 1 < FEATURE_LAYERS:
        raise ValueError(f"a target of {target_layers} layers has no {FEATURE_LAYERS} layers before its last to read")
    return tuple(round(i * (target_layers - 2) / (FEATURE_LAYERS - 1)) for i in range(FEATURE_LAYERS))


def to_aux_ids(layers) -> list[int]:
    """specviz's layer outputs -> vLLM's eagle_aux_hidden_state_layer_ids (the input of the next layer)."""
    return [int(i) + 1 for i in layers]


def layers_of(what: str, data: dict, target_layers: int) -> tuple[int, ...]:
    """The target layers (outputs) a drafter's config.json says it reads, else EAGLE-3's default for the target."""
    ids = data.get("eagle_aux_hidden_state_layer_ids") or (data.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids")
    if not ids:
        try:
            return default_layers(target_layers)
        except ValueError:
            raise DrafterMismatchError(f"{what} reads three of the target's layers before its last, but the target "
                                       f"has {target_layers} layers") from None
    if 0 in ids:
        raise DrafterMismatchError(f"{what} reads the target's embedding (layer id 0), which specviz's runners do "
                                   "not hand over; only layer outputs")
    return tuple(int(j) - 1 for j in ids)


def check_layers(what: str, layers: tuple[int, ...], target: LoadedModel, data: dict) -> None:
    depth = text_config(target.model.config).num_hidden_layers
    trained = ((data.get("specviz") or {}).get("trained_for") or {}).get("num_layers")
    if trained is not None and trained != depth:
        raise DrafterMismatchError(f"{what} was trained for a target of {trained} layers, but '{target.name}' has "
                                   f"{depth}: it reads the target's layers by number; use a drafter trained for "
                                   "this target (or train one with python -m specviz train-drafter --method eagle3)")
    if len(layers) != FEATURE_LAYERS or sorted(set(layers)) != list(layers) or not all(0 <= i < depth - 1
                                                                                       for i in layers):
        raise DrafterMismatchError(f"{what} reads the outputs of layers {list(layers)}, which are not three distinct "
                                   f"ascending layers before the last of '{target.name}''s {depth}")


def config_from_json(file: Path, data: dict, layers: tuple[int, ...]) -> EagleConfig:
    try:
        heads = data["num_attention_heads"]
        config = EagleConfig(
            hidden_size=data["hidden_size"], intermediate_size=data["intermediate_size"], num_attention_heads=heads,
            num_key_value_heads=data.get("num_key_value_heads") or heads,
            head_dim=data.get("head_dim") or data["hidden_size"] // heads, num_hidden_layers=1,
            rms_norm_eps=data.get("rms_norm_eps", 1e-6), fc_bias=False, target_layers=layers,
            draft_vocab_size=data.get("draft_vocab_size") or data["vocab_size"])
    except KeyError as error:
        raise ModelLoadError(f"{file} is an EAGLE-3 drafter whose config.json lacks {error.args[0]}") from None
    if data.get("num_hidden_layers", 1) != 1:
        raise ModelLoadError(f"{file}: an EAGLE-3 drafter of {data['num_hidden_layers']} layers; specviz loads the "
                             "published one-layer (midlayer) drafters")
    return config


def draft_token_ids(what: str, state: dict, config: EagleConfig, vocab: int) -> torch.Tensor | None:
    """The target id of each draft id (arange(K) + d2t), checked against t2d and the target's vocabulary; None
    where the draft vocabulary is the whole of the target's."""
    d2t, t2d = state.pop("d2t", None), state.pop("t2d", None)
    size = config.draft_vocab_size
    if d2t is None:
        if size != vocab:
            raise ModelLoadError(
                f"{what} scores {size} draft tokens but has no d2t to map them to the target's {vocab}"
            )
        return None
    if d2t.numel() != size:
        raise ModelLoadError(f"{what}: d2t maps {d2t.numel()} draft tokens, config.json says {size}")
    ids = torch.arange(size) + d2t.long()
    if int(ids.min()) < 0 or int(ids.max()) >= vocab or ids.unique().numel() != size:
        raise DrafterMismatchError(f"{what}: its draft vocabulary (d2t) maps to ids outside the target's {vocab} "
                                   "tokens, or twice to one; it was made for another vocabulary")
    if t2d is not None and (t2d.numel() != vocab or int(t2d.sum()) != size or not bool(t2d.bool()[ids].all())):
        raise DrafterMismatchError(f"{what}: t2d ({t2d.numel()} entries, {int(t2d.sum())} set) does not mark the "
                                   f"tokens d2t maps to in a vocabulary of {vocab}")
    return ids


def load_eagle3(folder: Path, file: Path, data: dict, state: dict, target: LoadedModel,
                options: EngineOptions) -> EagleDrafter:
    what = f"the EAGLE-3 drafter in {folder}"
    depth = text_config(target.model.config).num_hidden_layers
    layers = layers_of(what, data, depth)
    config = config_from_json(file, data, layers)
    check_trained_for(what, target, data)
    check_fits(what, target, config.hidden_size, data.get("vocab_size"))
    check_fits(what, target, data.get("target_hidden_size"), None)
    check_layers(what, layers, target, data)
    fc = state.get("fc.weight")
    if fc is None or tuple(fc.shape) != (config.hidden_size, config.feature_size):
        found = tuple(fc.shape) if fc is not None else "none"
        raise DrafterMismatchError(f"{what}: fc.weight is {found}, where three layers of a target of hidden size "
                                   f"{config.hidden_size} need ({config.hidden_size}, {config.feature_size})")
    token_ids = draft_token_ids(what, state, config, target.vocab_size)
    embed = state.pop("embed_tokens.weight", None)  # a copy of the target's: the target's own is used
    if embed is not None:
        check_fits(what, target, embed.shape[1], embed.shape[0])
    state = {("layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k): v for k, v in state.items()
             if not k.endswith("rotary_emb.inv_freq")}  # a buffer some versions saved
    net = EagleNet(config)
    missing, unexpected = net.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ModelLoadError(f"{file} does not match the EAGLE-3 layout: missing {missing[:4]}, unexpected "
                             f"{unexpected[:4]}")
    net.to(target.device, target.dtype).eval().requires_grad_(False)
    head_weight = net.lm_head.weight.detach()
    net.lm_head = None  # the head holds it (prepacked on a CPU); drafting never calls the module
    pack_linears(net, options)  # on a CPU in float32: prepacked for oneDNN (specviz.runners.onednn)
    parts = TargetParts(target.model, config.head_dim)
    ids = token_ids.to(target.device) if token_ids is not None else None
    head = DraftHead(head_weight, target.vocab_size, ids, onednn=options.onednn, norm=net.norm, selected=True)
    return EagleDrafter(net, parts, head, str(folder))


def published_state(net: EagleNet, token_ids: torch.Tensor | None, vocab: int, dtype: torch.dtype) -> dict:
    """The network's tensors under the published names, with d2t and t2d for a draft vocabulary."""
    state = {("midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k): v.detach().to("cpu", dtype)
             .contiguous() for k, v in net.state_dict().items()}
    if token_ids is not None:
        ids, order = token_ids.detach().to("cpu", torch.int64).sort()  # t2d keeps no order: ascending, as theirs
        state["lm_head.weight"] = state["lm_head.weight"][order].contiguous()
        state["d2t"] = (ids - torch.arange(ids.numel())).contiguous()
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[ids] = True
        state["t2d"] = t2d
    return state


def eagle3_json(config: EagleConfig, vocab: int) -> dict:
    """config.json in EAGLE-3's keys (a LlamaConfig of one layer), with the layers read in vLLM's numbering."""
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": config.hidden_size,
            "intermediate_size": config.intermediate_size, "num_attention_heads": config.num_attention_heads,
            "num_key_value_heads": config.num_key_value_heads, "head_dim": config.head_dim, "num_hidden_layers": 1,
            "rms_norm_eps": config.rms_norm_eps, "hidden_act": "silu", "tie_word_embeddings": False,
            "vocab_size": vocab, "draft_vocab_size": config.draft_vocab_size,
            "eagle_aux_hidden_state_layer_ids": to_aux_ids(config.target_layers)}


def save_eagle3(folder: Path, net: EagleNet, token_ids: torch.Tensor | None, vocab: int, meta: dict,
                dtype: torch.dtype = torch.float16) -> list[Path]:
    """Our files: the published names and maps, model-0000k-of-0000n.safetensors of at most MAX_FILE_BYTES each,
    and a specviz block in config.json."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("model*.safetensors"):
        old.unlink()
    groups = split_files(published_state(net, token_ids, vocab, dtype), MAX_FILE_BYTES)
    save_config(folder, {**eagle3_json(net.config, vocab), "specviz": meta})
    files = []
    for index, group in enumerate(groups, 1):
        files.append(folder / f"model-{index:05d}-of-{len(groups):05d}.safetensors")
        save_file(group, str(files[-1]))
    return files
