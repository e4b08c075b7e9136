"""Files of trained drafters: the ones shipped for the default target (assets/drafters/), folders written by
`specviz train-drafter`, and the published formats:

- FasterDecoding Medusa-1 heads (e.g. FasterDecoding/medusa-vicuna-7b-v1.3): config.json with
  medusa_num_heads and medusa_num_layers; medusa_lm_head.pt or .safetensors with "{head}.{layer}.linear.weight
  / .bias" and, per head, its own output layer "{head}.{num_layers}.weight" [V, H]. (Their code builds
  `[ResBlock] * num_layers`, one block repeated, so the keys of every layer hold the same tensor.)
- SafeAILab EAGLE-1 drafters (e.g. yuhuili/EAGLE-Vicuna-7B-v1.3), also used by EAGLE-2: config.json, a
  LlamaConfig with num_hidden_layers = 1 and `bias` (the fc's); pytorch_model.bin or model.safetensors with
  fc.weight [H, 2H], fc.bias, layers.0.self_attn.{q,k,v,o}_proj.weight, layers.0.mlp.{gate,up,down}_proj.weight,
  layers.0.post_attention_layernorm.weight and usually embed_tokens.weight (a copy of the target's).
- SafeAILab EAGLE-3 drafters (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B), loaded by the same `eagle` method:
  eagle3_files.py's layout (midlayer.*, d2t and t2d tell them apart).
- z-lab DFlash drafters (e.g. z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat): dflash_files.py's layout.
- For `retrieval`, a datastore of the target's own answers: datastore.npz and config.json (datastore.py).

Ours use the same key names, saved as safetensors, plus `draft_vocab` (the token ids the head scores), and a
"specviz" block in config.json that says which target they were trained for and how.
"""
from __future__ import annotations

import re
import threading
from pathlib import Path

import torch

from .datastore import Datastore
from .dflash_files import load_dflash, read_weights
from .drafter_files import check_fits, check_trained_for, draft_vocab_ids, read_config, read_state, save_config
from ..errors import ModelLoadError, OfflineError
from ..options import EngineOptions
from ..runners.onednn import pack_linears
from ..models.loading import DEFAULT_MODEL, LoadedModel, load_model
from .distilled import DISTILLED, is_distilled_folder, load_distilled
from .draft_head import DraftHead, TargetParts
from .eagle3_files import is_eagle3, load_eagle3
from .eagle_net import EagleConfig, EagleDrafter, EagleNet
from .medusa_net import MedusaDrafter, MedusaHeads

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "drafters"
SHIPPED = {DEFAULT_MODEL: "smollm2-135m-instruct"}  # target name -> folder under assets/drafters
EAGLE_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
MEDUSA_WEIGHTS = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
# method -> (what --heads must name, the files fetched from a Hub repository beside config.json)
DRAFTER_FILES = {"medusa": ("FasterDecoding Medusa heads", MEDUSA_WEIGHTS),
                 "eagle": ("a SafeAILab EAGLE-1 or EAGLE-3 drafter", EAGLE_WEIGHTS),
                 "dflash": ("a z-lab DFlash drafter", ("model*.safetensors", "model.safetensors.index.json")),
                 "retrieval": ("a folder with datastore.npz and config.json", ("datastore.npz",))}


def shipped_folder(method: str, target: LoadedModel) -> Path | None:
    name = SHIPPED.get(target.name)
    folder = ASSETS / name / method if name else None
    return folder if folder is not None and (folder / "config.json").is_file() else None


def _download(repo_id: str, patterns: list[str]) -> Path:
    """A Hub repository's drafter files: from the local Hub cache, else downloaded if the Hub is reachable."""
    from huggingface_hub import snapshot_download

    from ..models.loading import _hub_reachable

    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
    except Exception:  # not in the cache
        pass
    if not _hub_reachable():
        raise OfflineError(f"cannot fetch drafter heads '{repo_id}': not a local folder, not in the Hugging Face "
                           "cache, and the Hub cannot be reached (offline); pass a local folder with --heads")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as error:
        raise ModelLoadError(f"cannot download drafter heads '{repo_id}': {str(error).splitlines()[0]}") from None


def resolve_folder(method: str, target: LoadedModel, heads: str | None) -> Path:
    """The folder holding the drafter for `method`: `heads` (folder or Hub id), else the shipped one."""
    if heads in (None, "", "auto", "default"):
        folder = shipped_folder(method, target)
        if folder is None:
            what = DRAFTER_FILES[method][0]
            raise ModelLoadError(
                f"no trained {method} drafter ships for target '{target.name}' (only for the default model); pass "
                f"--heads FOLDER_OR_HUB_ID ({what}), "
                f"or make one: python -m specviz train-drafter --method {method} --target {target.name} --out DIR"
            )
        return folder
    path = Path(heads).expanduser()
    if path.is_dir():
        return path
    if path.exists() or heads.startswith((".", "/", "~")) or heads.count("/") != 1:
        raise ModelLoadError(f"--heads '{heads}' is neither a folder of drafter files nor a Hub id (owner/name)")
    return _download(heads, ["config.json", *DRAFTER_FILES[method][1]])


def eagle_state(folder: Path) -> tuple[dict, Path]:
    """An EAGLE drafter's tensors: one published file, else our numbered safetensors shards (EAGLE-3's)."""
    if not any((folder / name).is_file() for name in EAGLE_WEIGHTS) and any(folder.glob("model-*.safetensors")):
        return read_weights(folder), folder
    return read_state(folder, EAGLE_WEIGHTS)


def load_eagle(folder: Path, target: LoadedModel, options: EngineOptions) -> EagleDrafter:
    """An EAGLE-1 drafter (also EAGLE-2's), or an EAGLE-3 one where the file's layout is EAGLE-3's (eagle3_files.py)."""
    what = f"the EAGLE drafter in {folder}"
    data = read_config(folder)
    state, file = eagle_state(folder)
    if is_eagle3(state):
        return load_eagle3(folder, file, data, state, target, options)
    if "fc.weight" not in state:
        raise ModelLoadError(f"{file} has no fc.weight: not an EAGLE-1 drafter")
    config = EagleConfig.from_json(data)
    check_trained_for(what, target, data)
    embed = state.pop("embed_tokens.weight", None)  # a copy of the target's: the target's own is used
    for key in [k for k in state if k.endswith("rotary_emb.inv_freq")]:  # a buffer some versions saved
        del state[key]
    check_fits(what, target, state["fc.weight"].shape[0], embed.shape[0] if embed is not None
               else data.get("vocab_size"))
    if state["fc.weight"].shape[1] != 2 * config.hidden_size or config.hidden_size != state["fc.weight"].shape[0]:
        raise ModelLoadError(f"{file}: fc.weight {tuple(state['fc.weight'].shape)} does not match config.json")
    token_ids = draft_vocab_ids(state, target, what)
    config.fc_bias = "fc.bias" in state
    net = EagleNet(config)
    missing, unexpected = net.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ModelLoadError(f"{file} does not match the EAGLE-1 layout: missing {missing[:4]}, unexpected "
                             f"{unexpected[:4]}")
    net.to(target.device, target.dtype).eval().requires_grad_(False)
    pack_linears(net, options)  # on a CPU in float32: prepacked for oneDNN (specviz.runners.onednn)
    parts = TargetParts(target.model, config.head_dim)
    return EagleDrafter(net, parts, DraftHead.from_target(parts, token_ids, options.onednn), str(folder))


_BLOCK_KEY = re.compile(r"^(\d+)\.(\d+)\.linear\.(weight|bias)$")
_OUTPUT_KEY = re.compile(r"^(\d+)\.(\d+)\.weight$")


def load_medusa(folder: Path, target: LoadedModel, options: EngineOptions) -> MedusaDrafter:
    what = f"the Medusa heads in {folder}"
    data = read_config(folder)
    state, file = read_state(folder, MEDUSA_WEIGHTS)
    check_trained_for(what, target, data)
    token_ids = draft_vocab_ids(state, target, what)
    blocks, outputs = {}, {}
    for key, value in state.items():
        if _BLOCK_KEY.match(key):
            blocks[key] = value
        elif _OUTPUT_KEY.match(key):
            outputs[int(key.split(".")[0])] = value
        else:
            raise ModelLoadError(f"{file} has an unexpected key {key!r}: not Medusa-1 heads")
    num_layers = int(data.get("medusa_num_layers", 1))
    first = blocks.get("0.0.linear.weight")
    if first is None:
        raise ModelLoadError(f"{file} has no 0.0.linear.weight: not Medusa-1 heads")
    # the heads in the file: FasterDecoding/medusa-vicuna-7b-v1.3's config.json says 2 while its file holds 5
    # (their loader hard-codes 5); fewer heads than config.json names is a damaged file
    num_heads = 1 + max(int(k.split(".")[0]) for k in blocks)
    if int(data.get("medusa_num_heads", 0)) > num_heads:
        raise ModelLoadError(f"{file} holds {num_heads} heads, but config.json says {data['medusa_num_heads']}")
    vocab = next(iter(outputs.values())).shape[0] if outputs else None
    check_fits(what, target, first.shape[0], vocab)
    heads = MedusaHeads(first.shape[0], num_heads, num_layers)
    try:
        heads.load_published({k: v for k, v in blocks.items() if int(k.split(".")[0]) < num_heads})
    except RuntimeError as error:
        raise ModelLoadError(
            f"{file} does not match config.json's heads and layers: {str(error).splitlines()[0]}"
        ) from None
    heads.to(target.device, target.dtype).eval().requires_grad_(False)
    pack_linears(heads, options)  # on a CPU in float32: prepacked for oneDNN (specviz.runners.onednn)
    if outputs:  # published Medusa-1: every head has its own output layer
        if sorted(outputs) != list(range(num_heads)):
            raise ModelLoadError(f"{file} has output layers for heads {sorted(outputs)}, expected 0..{num_heads - 1}")
        heads_out = [DraftHead(outputs[k].to(target.device, target.dtype), target.vocab_size, token_ids,
                               onednn=options.onednn) for k in range(num_heads)]
    else:  # the target's output layer, shared
        parts = TargetParts(target.model, first.shape[0])
        heads_out = [DraftHead.from_target(parts, token_ids, options.onednn)]
    return MedusaDrafter(heads, heads_out, str(folder))


def read_medusa_blocks(folder: Path, heads: MedusaHeads) -> None:
    """Load the residual blocks of the Medusa heads in `folder` into `heads` (training's --init: a warm start).
    Only the blocks: ours share the target's output layer, so a new draft vocabulary keeps them valid."""
    state, file = read_state(folder, MEDUSA_WEIGHTS)
    blocks = {k: v for k, v in state.items() if _BLOCK_KEY.match(k)}
    expected = heads.state_dict_published()
    if set(blocks) != set(expected) or any(blocks[k].shape != v.shape for k, v in expected.items()):
        shapes = {k: tuple(v.shape) for k, v in blocks.items() if k.endswith("0.linear.weight")}
        raise ModelLoadError(f"{file} does not hold {heads.num_heads} heads of {len(heads.blocks[0])} blocks of "
                             f"size {heads.blocks[0][0].linear.in_features} (it has {shapes or 'no heads'}); "
                             "pass --heads and --layers that match it")
    heads.load_published({k: v.to(expected[k].dtype) for k, v in blocks.items()})


_loaded: dict[tuple, object] = {}
_lock = threading.Lock()


def load_drafter(method: str, target: LoadedModel, heads: str | None = None, options: EngineOptions | None = None):
    """The EagleDrafter, MedusaDrafter, DFlashDrafter or Datastore (retrieval) for `method` on `target`, loaded once per
    process (and per oneDNN switch: a drafter's matrices are prepacked as it loads)."""
    options = options or EngineOptions.from_environment()
    folder = resolve_folder(method, target, heads)
    key = (method, str(folder.resolve()), id(target.model), str(target.device), str(target.dtype), options.onednn)
    with _lock:
        if key not in _loaded:
            if method == "retrieval":
                _loaded[key] = load_datastore(folder, target)
            else:
                loaders = {"eagle": load_eagle, "medusa": load_medusa, "dflash": load_dflash}
                _loaded[key] = loaders[method](folder, target, options)
        return _loaded[key]


def load_datastore(folder: Path, target: LoadedModel) -> Datastore:
    return Datastore.load(folder, target.vocab_size)


def load_draft_model(name: str, target: LoadedModel, device: str | None = None,
                     dtype: str | torch.dtype | None = None) -> LoadedModel:
    """The `draft` method's drafter: 'distilled' (the draft model distilled for this target, shipped for the
    default one), a folder written by `train-drafter --method draft-model`, or any model load_model reads (a
    Hub id, a folder, a .gguf file, 'default'). A distilled draft model shares the target's embedding, so it
    sits on the target's device in the target's dtype."""
    path = Path(str(name)).expanduser()
    if name == DISTILLED:
        folder = shipped_folder(DISTILLED, target)
        if folder is None:
            raise ModelLoadError(f"no distilled draft model ships for target '{target.name}' (only for the default "
                                 "model); make one with python -m specviz train-drafter --method draft-model "
                                 f"--target {target.name} --out DIR, then use DIR as the drafter")
    elif path.is_dir() and is_distilled_folder(path):
        folder = path
    else:
        return load_model(name, device, dtype)
    key = (DISTILLED, str(folder.resolve()), id(target.model), str(target.device), str(target.dtype))
    with _lock:
        if key not in _loaded:
            _loaded[key] = LoadedModel(name=name, model=load_distilled(folder, target.model),
                                       tokenizer=target.tokenizer, device=target.device, dtype=target.dtype)
        return _loaded[key]


def shipped_drafter_exists(method: str, target: LoadedModel) -> bool:
    return shipped_folder(method, target) is not None


def shipped_methods(target: LoadedModel, root: Path = ASSETS) -> list[str]:
    """The methods whose drafter ships for this target: every folder with a config.json under
    assets/drafters/<the target's folder>/, named after its method, so that a new one needs no list edited."""
    name = SHIPPED.get(target.name)
    folder = root / name if name else None
    if folder is None or not folder.is_dir():
        return []
    return sorted(child.name for child in folder.iterdir() if (child / "config.json").is_file())


def average_medusa_blocks(first: dict, second: dict, weight: float = 0.5) -> dict:
    """Two state dicts of Medusa heads that share the target's output layer (ours) -> their blocks averaged,
    (1 - weight) * first + weight * second in float32, stored in the second's dtype, with the second's draft
    vocabulary (scripts/average_medusa.py). Meaningful when the second was trained from the first (--init): a
    "model soup". Refuses other shapes, and heads with their own output layers (tied to their vocabularies)."""
    blocks = [k for k in second if k != "draft_vocab"]
    if not all(_BLOCK_KEY.match(k) for k in blocks):
        raise ModelLoadError("only heads that share the target's output layer (those trained here) can be averaged")
    if set(first) - {"draft_vocab"} != set(blocks):
        raise ModelLoadError("the two sets of heads have different blocks: train the second with --init FIRST")
    out = {}
    for key in blocks:
        if first[key].shape != second[key].shape:
            raise ModelLoadError(f"{key}: {tuple(first[key].shape)} in the first set, "
                                 f"{tuple(second[key].shape)} in the second")
        out[key] = ((1 - weight) * first[key].float() + weight * second[key].float()).to(second[key].dtype)
    if "draft_vocab" in second:
        out["draft_vocab"] = second["draft_vocab"]
    return out


def save_eagle(folder: Path, net: EagleNet, token_ids: torch.Tensor | None, meta: dict,
               dtype: torch.dtype = torch.float16) -> Path:
    """Our EAGLE files: EAGLE-1's keys and config names, as safetensors, plus draft_vocab and a specviz block."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in net.state_dict().items()}
    if token_ids is not None:
        state["draft_vocab"] = token_ids.detach().to("cpu", torch.int64).contiguous()
    save_config(folder, {**net.config.to_json(), "specviz": meta})
    save_file(state, str(folder / "model.safetensors"))
    return folder / "model.safetensors"


def save_medusa(folder: Path, heads: MedusaHeads, token_ids: torch.Tensor | None, meta: dict,
                dtype: torch.dtype = torch.float16) -> Path:
    """Our Medusa files: FasterDecoding's names (the heads share the target's output layer, so there is no
    per-head output weight), as safetensors, plus draft_vocab and a specviz block."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in heads.state_dict_published().items()}
    if token_ids is not None:
        state["draft_vocab"] = token_ids.detach().to("cpu", torch.int64).contiguous()
    layers = len(heads.blocks[0])
    save_config(folder, {"medusa_num_heads": heads.num_heads, "medusa_num_layers": layers,
                         "hidden_size": heads.blocks[0][0].linear.weight.shape[0], "specviz": meta})
    save_file(state, str(folder / "medusa_lm_head.safetensors"))
    return folder / "medusa_lm_head.safetensors"

