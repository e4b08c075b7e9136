"""Reading and writing a trained drafter's folder, whatever its method: its config.json, its weights file, the
checks that it was trained for this target, and its draft vocabulary (checkpoints.py and dflash_files.py load
their methods' files with these)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import DrafterMismatchError, ModelLoadError
from ..models.loading import LoadedModel

MAX_FILE_BYTES = 11 * 2 ** 20  # the repository keeps every file under 12 MiB


def read_state(folder: Path, names: tuple[str, ...]) -> tuple[dict, Path]:
    for name in names:
        file = folder / name
        if file.is_file():
            if file.suffix == ".safetensors":
                from safetensors.torch import load_file
                return load_file(str(file)), file
            return torch.load(file, map_location="cpu", weights_only=True), file
    raise ModelLoadError(f"{folder} has none of {', '.join(names)}: not a drafter folder for this method")


def read_config(folder: Path) -> dict:
    file = folder / "config.json"
    if not file.is_file():
        raise ModelLoadError(f"{folder} has no config.json: not a drafter folder")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as error:
        raise ModelLoadError(f"{file} is not valid JSON: {error.msg}") from None


def check_fits(what: str, target: LoadedModel, hidden_size: int | None, vocab_size: int | None) -> None:
    """Heads trained for another target are refused: their hidden size or vocabulary would not line up."""
    parts_hidden = target.model.get_output_embeddings().weight.shape[1]
    if hidden_size is not None and hidden_size != parts_hidden:
        raise DrafterMismatchError(
            f"{what} was trained for a target with hidden size {hidden_size}, but '{target.name}' has hidden size "
            f"{parts_hidden}; use heads trained for this target (or train some with specviz train-drafter)"
        )
    if vocab_size is not None and vocab_size != target.vocab_size:
        raise DrafterMismatchError(
            f"{what} was trained for a vocabulary of {vocab_size} tokens, but '{target.name}' has {target.vocab_size}; "
            "use heads trained for this target (or train some with specviz train-drafter)"
        )


def check_trained_for(what: str, target: LoadedModel, data: dict) -> None:
    """Our files say which target they were trained for; refuse one whose shapes differ."""
    trained_for = (data.get("specviz") or {}).get("trained_for") or {}
    check_fits(what, target, trained_for.get("hidden_size"), trained_for.get("vocab_size"))


def draft_vocab_ids(state: dict, target: LoadedModel, what: str) -> torch.Tensor | None:
    ids = state.pop("draft_vocab", None)
    if ids is None:
        return None
    ids = ids.long()
    if ids.numel() == 0 or int(ids.max()) >= target.vocab_size or int(ids.min()) < 0:
        raise DrafterMismatchError(f"{what} scores token ids outside the vocabulary of '{target.name}' "
                                   f"({target.vocab_size} tokens); it was trained for another target")
    return ids


def save_config(folder: Path, data: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data, indent=1) + "\n")


def split_files(state: dict[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    """The tensors in groups of at most max_bytes each (a tensor larger than that gets a group of its own)."""
    groups, current, size = [], {}, 0
    for key, value in state.items():
        nbytes = value.numel() * value.element_size()
        if current and size + nbytes > max_bytes:
            groups.append(current)
            current, size = {}, 0
        current[key] = value
        size += nbytes
    if current:
        groups.append(current)
    return groups
