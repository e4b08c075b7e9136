"""On a CPU in float32: weight matrices prepacked once for oneDNN. MKL's products repack the weights on every
call (a 5-position forward cost 1.5 one-position forwards); packed, a forward of 1 to 9 positions costs about
the same, and a row's result does not depend on the rows beside it."""
from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from ..options import EngineOptions


# Weights prepacked for oneDNN (CPU) ------------------------------------------------------------------------

# oneDNN picks the packed layout for a batch size; packed for 8 rows, a row's result is bitwise the same alone
# or among 2 to 33 others (packed for 1 it is not), and a forward of 1 to 17 rows costs nearly the same
# (docs/fast-path.md has the figures).
PACK_ROWS_HINT = 8
MAX_PACKED_BYTES = 2 << 30  # packing copies the matrices: larger models keep F.linear and their memory


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear for a weight prepacked by pack_matrix: x [..., in] -> [..., out]."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()  # a view of a contiguous [K, in]: no copy
    return torch.ops.mkldnn._linear_pointwise(rows, weight, bias, "none", [], "").reshape(*x.shape[:-1], -1)


def pack_matrix(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_ROWS_HINT)


def parameter_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


_onednn_works: bool | None = None  # checked once per process


def onednn_allowed(device: torch.device, dtype: torch.dtype, weight_bytes: int) -> bool:
    """Prepacked oneDNN products on a CPU in float32, unless the model is larger than MAX_PACKED_BYTES or this
    PyTorch build lacks them or gets a different product (checked once). Callers also ask EngineOptions.onednn."""
    if device.type != "cpu" or dtype != torch.float32 or weight_bytes > MAX_PACKED_BYTES:
        return False
    if not torch.backends.mkldnn.is_available():
        return False
    global _onednn_works
    if _onednn_works is None:
        try:
            generator = torch.Generator().manual_seed(0)
            weight = torch.randn(96, 64, generator=generator)
            bias = torch.randn(96, generator=generator)
            x = torch.randn(5, 64, generator=generator)
            product = onednn_linear(x, pack_matrix(weight), bias)
            _onednn_works = torch.allclose(product, F.linear(x, weight, bias), rtol=1e-4, atol=1e-4)
        except Exception:  # an optimisation: a build without these operators keeps F.linear
            _onednn_works = False
    return _onednn_works


_packed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> (dense data pointers, packed)


def packed_tensors(module: torch.nn.Module, dense: tuple) -> tuple:
    """`dense` with every matrix prepacked for oneDNN (vectors as they are), made once per module and
    again when its weights were replaced."""
    key = tuple(0 if t is None else t.data_ptr() for t in dense)
    entry = _packed.get(module)
    if entry is None or entry[0] != key:
        entry = (key, tuple(pack_matrix(t) if t is not None and t.dim() == 2 else t for t in dense))
        _packed[module] = entry
    return entry[1]


def model_matrices(decoder: torch.nn.Module, layers: list, head: torch.nn.Module, use_onednn: bool):
    """(each layer's tensors, the output layer's matrix, the product that reads them) for a runner: prepacked
    for oneDNN with onednn_linear, or dense with F.linear. layers: llama.layer_weights of decoder.layers."""
    if not use_onednn:
        return [weights.tensors() for weights in layers], head.weight.detach(), F.linear
    tensors = [packed_tensors(module, weights.tensors()) for module, weights in zip(decoder.layers, layers)]
    (head_matrix,) = packed_tensors(head, (head.weight.detach(),))
    return tensors, head_matrix, onednn_linear


class PackedLinear(torch.nn.Module):
    """An inference-only nn.Linear whose weight is prepacked for oneDNN (same parameters, same state dict)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.packed = pack_matrix(linear.weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return onednn_linear(x, self.packed, self.bias)


def pack_linears(module: torch.nn.Module, options: EngineOptions | None = None) -> int:
    """Swap every nn.Linear of an inference-only module (a trained drafter) for a PackedLinear, where the options
    (None: from the environment) and onednn_allowed allow. Returns how many were swapped."""
    parameter = next(module.parameters(), None)
    if parameter is None or not (options or EngineOptions.from_environment()).onednn:
        return 0
    if not onednn_allowed(parameter.device, parameter.dtype, parameter_bytes(module)):
        return 0
    swapped = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, PackedLinear(child))
                swapped += 1
    return swapped
