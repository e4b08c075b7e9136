"""`early-exit`: self-speculation (LayerSkip, Draft & Verify): the target's own first L layers, then its
final norm and output layer, draft for the full model. The cut shares the target's weights (no copy) and
keeps a KV cache of its own for its L layers."""
from __future__ import annotations

import copy

import torch

from ..errors import InvalidSettingError
from ..options import EngineOptions
from .base import ProposerRequest
from .draft_model import ModelDrafter


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    decoder = model.get_decoder()
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise InvalidSettingError(
            f"early-exit needs a decoder with a `layers` list (Llama, Qwen, Mistral, Gemma, ...); "
            f"{type(model).__name__} has none; use the ngram or draft method"
        )
    return layers


def default_exit_layer(num_layers: int) -> int:
    return max(1, num_layers // 4)


def truncated_view(model: torch.nn.Module, exit_layer: int) -> torch.nn.Module:
    """A module that runs the first exit_layer decoder layers of model, then its norm and output layer.
    Shallow copies of the two outer modules: every parameter tensor is the target's own."""
    layers = decoder_layers(model)
    if not 1 <= exit_layer < len(layers):
        raise InvalidSettingError(f"exit layer must be between 1 and {len(layers) - 1}, got {exit_layer}")
    decoder = model.get_decoder()
    view_decoder = copy.copy(decoder)
    view_decoder._modules = dict(decoder._modules)  # own module table, shared modules
    view_decoder.layers = torch.nn.ModuleList(list(layers)[:exit_layer])
    view_decoder.config = copy.copy(decoder.config)
    view_decoder.config.num_hidden_layers = exit_layer
    view = copy.copy(model)
    view._modules = dict(model._modules)
    for name, module in model._modules.items():
        if module is decoder:
            view._modules[name] = view_decoder
    view.config = view_decoder.config
    if view.get_decoder() is not view_decoder:
        raise InvalidSettingError(f"early-exit cannot cut {type(model).__name__}: its decoder is nested too deep")
    return view


class EarlyExitDrafter(ModelDrafter):
    name = "early-exit"

    def __init__(self, target_model: torch.nn.Module, vocab_size: int, exit_layer: int | None = None,
                 options: EngineOptions | None = None):
        total = len(decoder_layers(target_model))
        self.exit_layer = default_exit_layer(total) if exit_layer is None else exit_layer
        super().__init__(truncated_view(target_model, self.exit_layer), vocab_size, options)


def build(request: ProposerRequest) -> EarlyExitDrafter:
    """`early-exit`'s proposer (specviz.methods): the target's first exit_layer layers (None: a quarter)."""
    return EarlyExitDrafter(request.target.model, request.target.vocab_size, request.exit_layer, request.options)
