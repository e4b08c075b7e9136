"""The public profile: what a shared deployment (a Hugging Face Space that a class uses at once) allows.

A public server trusts no request: it serves only the models its owner offers, refuses a model that would not
fit its memory before anything loads, and lets no session or client address crowd out the others. A local user
(profile off) keeps every freedom: any Hub id, folder, .gguf file or random shape, no budget, no limits.

The profile is on by itself on a Space (SPACE_ID set) and with SPECVIZ_PUBLIC=1 anywhere (SPECVIZ_PUBLIC=0
turns it off). Its settings, all optional:

    SPECVIZ_ALLOW_MODELS    Hub ids offered beside the default, the shipped drafters and the presets that fit
    SPECVIZ_MEMORY_BUDGET   what loaded models may take, e.g. 12GiB (default: the device's memory less a reserve)
    SPECVIZ_PER_SESSION     engine requests a browser tab or API client may have waiting or running (default 2)
    SPECVIZ_PER_CLIENT      the same per client address (default 16: a class behind one school address shares it)
    SPECVIZ_RUN_SECONDS     the longest one request may compute (default 600)
    SPECVIZ_CLIENT_SECONDS  engine seconds one client address may take in SPECVIZ_CLIENT_WINDOW seconds while
                            another address is waiting or running (default 300 of 600)

Everything here is a small pure function or a frozen record, tested without a server (tests/test_public.py);
the app applies it (specviz/ui)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecvizError
from ..models.memory import parse_bytes

DEFAULT_MODEL = "default"  # the same name as models.DEFAULT_MODEL, without importing torch here
SHIPPED_DRAFTERS = ("distilled",)  # drafter names that load files shipped in assets/drafters

# The Hub presets the app offers, each with its shape as its config.json states it, so that what it needs is
# known before anything is downloaded (parameters() counts them; tests/test_public.py checks the count against
# transformers' own model built on the meta device).
PRESETS = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": dict(hidden=576, intermediate=1536, layers=30, heads=9, kv_heads=3,
                                                vocab=49152, tied=True, qkv_bias=False),
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": dict(hidden=2048, intermediate=8192, layers=24, heads=32, kv_heads=32,
                                                vocab=49152, tied=True, qkv_bias=False),
    "Qwen/Qwen2.5-0.5B-Instruct": dict(hidden=896, intermediate=4864, layers=24, heads=14, kv_heads=2,
                                       vocab=151936, tied=True, qkv_bias=True),
    "Qwen/Qwen2.5-7B-Instruct": dict(hidden=3584, intermediate=18944, layers=28, heads=28, kv_heads=4,
                                     vocab=152064, tied=False, qkv_bias=True),
    "meta-llama/Llama-3.2-1B-Instruct": dict(hidden=2048, intermediate=8192, layers=16, heads=32, kv_heads=8,
                                             vocab=128256, tied=True, qkv_bias=False),
    "meta-llama/Llama-3.1-8B-Instruct": dict(hidden=4096, intermediate=14336, layers=32, heads=32, kv_heads=8,
                                             vocab=128256, tied=False, qkv_bias=False),
}
PRESETS[DEFAULT_MODEL] = PRESETS["HuggingFaceTB/SmolLM2-135M-Instruct"]  # the same model, offline
GATED = ("meta-llama/",)  # Hub owners whose models need an accepted licence and HF_TOKEN

GiB = 1 << 30
RESERVE = 3 * GiB  # left to Python, torch, gradio and activations when the budget is derived from the machine
PACKED_LIMIT = 2 * GiB  # runners/onednn.py's MAX_PACKED_BYTES: float32 models up to it keep a packed copy
KV_TOKENS = 2048  # a run's cache at most: the public prompt limit (PUBLIC_PROMPT_TOKENS), 512 new, a tree
PUBLIC_PROMPT_TOKENS = 1024  # a prompt's tokens in the public profile (4,000 characters of emoji are ~6,000)
PUBLIC_MAX_TEMPERATURE = 2.0  # the page's slider's end; far above it every run is noise to its full length
RUNS_AT_ONCE = 4  # the app's SPECVIZ_CONCURRENCY default: that many caches may be live at once


class NotOfferedError(SpecvizError):
    """A model this public server does not offer (the message names no path and says nothing of what exists)."""


class MemoryBudgetError(SpecvizError):
    """A model that would not fit in what this server's models may take."""


@dataclass(frozen=True)
class Profile:
    public: bool = False
    extra_models: frozenset[str] = frozenset()  # Hub ids the owner offers beside the built-in ones
    memory_budget: int | None = None  # bytes loaded models may take; None: not checked (local)
    per_session: int | None = None  # engine requests waiting or running per session; None: no limit
    per_client: int | None = None  # the same per client address
    run_seconds: float | None = None  # the longest one request may compute
    trust_forwarded_for: bool = False  # the client's address is the last X-Forwarded-For entry (behind a proxy)
    max_prompt_chars: int = 100_000  # longer prompts are refused at the boundary
    max_prompt_tokens: int | None = None  # prompts of more tokens are refused once the target's tokenizer has read them
    max_temperature: float = 100.0
    client_seconds: float | None = None  # engine seconds an address may take in client_window while others wait
    client_window: float = 600.0
    dtype_bytes: int = 4  # bytes a parameter takes on this server's device (float32 on a CPU, bfloat16 on a GPU)

    def offers(self, name: str) -> bool:
        """Whether a model name may be loaded here."""
        if not self.public:
            return True
        return (name in (DEFAULT_MODEL, *SHIPPED_DRAFTERS) or name in self.extra_models
                or (name in PRESETS and fits_alone(preset_bytes([name], self.dtype_bytes), self.memory_budget)))


# -- reading the environment (once, at the edge) -------------------------------------------------------------

def is_public(env) -> bool:
    flag = str(env.get("SPECVIZ_PUBLIC", "")).strip().lower()
    if flag in ("0", "false", "no", "off"):
        return False
    return flag in ("1", "true", "yes", "on") or bool(env.get("SPACE_ID"))


def _count(env, name: str, default: int) -> int | None:
    value = str(env.get(name, default)).strip().lower()
    if value in ("", "none", "0"):
        return None
    if not value.isdigit():
        raise SpecvizError(f"{name} must be a whole number (0: no limit), got {value!r}")
    return int(value)


def profile_from_env(env=None, device_memory: int | None = None, dtype_bytes: int = 4) -> Profile:
    """The profile this process serves with. device_memory: bytes of the device models live on (default: read
    from the machine); dtype_bytes: 4 on a CPU (float32), 2 on a GPU (bfloat16)."""
    env = os.environ if env is None else env
    if not is_public(env):
        return Profile()
    extra = frozenset(m.strip() for m in str(env.get("SPECVIZ_ALLOW_MODELS", "")).split(",") if m.strip())
    if env.get("SPECVIZ_MEMORY_BUDGET"):
        budget = parse_bytes(env["SPECVIZ_MEMORY_BUDGET"])
    else:
        budget = budget_for(device_memory if device_memory is not None else host_memory())
    seconds = float(env.get("SPECVIZ_RUN_SECONDS", 600))
    return Profile(public=True, extra_models=extra, memory_budget=budget,
                   per_session=_count(env, "SPECVIZ_PER_SESSION", 2), per_client=_count(env, "SPECVIZ_PER_CLIENT", 16),
                   run_seconds=seconds if seconds > 0 else None, trust_forwarded_for=bool(env.get("SPACE_ID")),
                   max_prompt_chars=4000, max_prompt_tokens=PUBLIC_PROMPT_TOKENS,
                   max_temperature=PUBLIC_MAX_TEMPERATURE, client_seconds=_count(env, "SPECVIZ_CLIENT_SECONDS", 300),
                   client_window=float(_count(env, "SPECVIZ_CLIENT_WINDOW", 600) or 600), dtype_bytes=dtype_bytes)


def host_memory(root: Path = Path("/")) -> int:
    """Bytes of memory this process may use: its cgroup's limit (a container's, as on a Space) or the machine's."""
    for limit in ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = (root / limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # "max" or a huge number: no limit of its own
            return int(text)
    try:
        for line in (root / "proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 16 * GiB  # a free CPU Space's


def budget_for(memory: int) -> int:
    """What models may take out of `memory` bytes: all but RESERVE, and at least a quarter of it."""
    return max(memory - RESERVE, memory // 4)


# -- what a model needs ---------------------------------------------------------------------------------------

def parameters(shape: dict) -> int:
    """Parameters of a Llama-family decoder (Llama, Qwen2, SmolLM) of this shape: embedding, attention with
    grouped keys and values (and Qwen's q/k/v biases), gated MLP, two norms a layer, final norm, output layer."""
    hidden, heads, kv_heads = shape["hidden"], shape["heads"], shape["kv_heads"]
    kv = hidden // heads * kv_heads
    attention = 2 * hidden * hidden + 2 * hidden * kv + ((hidden + 2 * kv) if shape.get("qkv_bias") else 0)
    layer = attention + 3 * hidden * shape["intermediate"] + 2 * hidden
    embedding = shape["vocab"] * hidden
    return embedding * (1 if shape.get("tied") else 2) + shape["layers"] * layer + hidden


def kv_bytes_per_token(shape: dict, dtype_bytes: int) -> int:
    return 2 * shape["layers"] * shape["hidden"] // shape["heads"] * shape["kv_heads"] * dtype_bytes


def needed_bytes(parameter_count: int, dtype_bytes: int, shape: dict | None = None) -> int:
    """Memory a model takes once loaded and running: its weights, the packed copy a CPU keeps of a small float32
    model's matrices (runners/onednn.py), and RUNS_AT_ONCE caches of KV_TOKENS tokens when the shape is known."""
    weights = parameter_count * dtype_bytes
    packed = weights if dtype_bytes == 4 and weights <= PACKED_LIMIT else 0
    caches = RUNS_AT_ONCE * KV_TOKENS * kv_bytes_per_token(shape, dtype_bytes) if shape else 0
    return weights + packed + caches


def preset_bytes(names, dtype_bytes: int) -> int:
    """What the presets `names` need together (a pair: target and drafter)."""
    return sum(needed_bytes(parameters(PRESETS[n]), dtype_bytes, PRESETS[n]) for n in names)


def fits_alone(need: int, budget: int | None) -> bool:
    return budget is None or need <= budget


def evictions(loaded: list[tuple[str, int]], in_use: set[str], need: int, budget: int | None,
              keep: frozenset[str] = frozenset()) -> list[str]:
    """Which loaded models to unload, least recently used first, so that one needing `need` bytes fits in
    `budget`. loaded: (name, bytes) from the least to the most recently used; models in use or in `keep` stay.
    With no budget (local), every model that is neither in use nor kept goes (the app's behaviour on a model
    switch). Raises MemoryBudgetError when even unloading all it may does not make room."""
    if budget is None:
        return [name for name, _ in loaded if name not in in_use and name not in keep]
    if need > budget:
        raise MemoryBudgetError(f"it needs about {need / GiB:.1f} GiB and this server's models may take "
                                f"{budget / GiB:.1f} GiB in all: choose a smaller model")
    total = sum(size for _, size in loaded)
    chosen = []
    for name, size in loaded:
        if total + need <= budget:
            break
        if name in in_use or name in keep:
            continue
        chosen.append(name)
        total -= size
    if total + need > budget:
        raise MemoryBudgetError(f"it needs about {need / GiB:.1f} GiB and the models other runs are using leave "
                                f"{max(budget - total, 0) / GiB:.1f} GiB free: try again in a minute or choose a "
                                "smaller model")
    return chosen


# -- names a request may give ---------------------------------------------------------------------------------

def looks_like_path(name: str) -> bool:
    return (name.startswith((".", "/", "~", "\\")) or "\\" in name or name.count("/") > 1 or ".." in name
            or name.lower().endswith((".gguf", ".bin", ".pt", ".safetensors", ".json")))


def check_model(name: str, profile: Profile, role: str = "model") -> None:
    """Refuse a model this server does not offer, in one line that says the same whatever the name is (a path
    that exists and one that does not, a random shape, an unknown Hub id), so that it reveals nothing."""
    if not profile.public or name in profile.extra_models or (profile.offers(name) and not looks_like_path(name)):
        return
    raise NotOfferedError(f"this public server does not offer that {role}: choose one from the list")


def gated(name: str) -> bool:
    return name.startswith(GATED)


# -- fairness -------------------------------------------------------------------------------------------------

def admission_refusal(session_pending: int, client_pending: int, profile: Profile) -> str | None:
    """Why a new engine request is refused (None: admitted), given what its session and its client address
    already have waiting or running. The refusal comes at once, before the request takes a place in the queue."""
    if profile.per_session is not None and session_pending >= profile.per_session:
        return ("You already have a run waiting or going in this page: wait for it to end or press Stop, "
                "then try again.")
    if profile.per_client is not None and client_pending >= profile.per_client:
        return ("Too many runs from your network are waiting or going on this server: try again in a minute.")
    return None


def replay_refusal(session_replays: int, all_replays: int, most: int) -> str | None:
    """Why a Replay is refused (None: admitted): one at a time a page, `most` on the server."""
    if session_replays >= 1:
        return "A replay is already going in this page: wait for it to end or press Stop, then try again."
    if all_replays >= most:
        return "Too many replays are going on this server: try again in a minute."
    return None


def budget_refusal(spent: float, others_waiting: bool, profile: Profile) -> str | None:
    """Why a new engine request from an address that took `spent` engine seconds in the profile's window is
    refused (None: admitted). Only while another address has a request waiting or running: alone on the server,
    a class behind one school address keeps all of it."""
    if profile.client_seconds is None or spent < profile.client_seconds or not others_waiting:
        return None
    return (f"Your network has used its share of this server ({spent:.0f} s of computing in the last "
            f"{profile.client_window / 60:.0f} minutes) while others are waiting: try again in a few minutes.")


def check_prompt_tokens(count: int, profile: Profile) -> None:
    """Refuse a prompt of more tokens than the profile takes (its characters were checked before loading)."""
    if profile.max_prompt_tokens is not None and count > profile.max_prompt_tokens:
        raise SpecvizError(f"the prompt is {count:,} tokens long; this server takes at most "
                           f"{profile.max_prompt_tokens:,} tokens: shorten it")


def client_address(host: str | None, forwarded_for: str | None, profile: Profile) -> str:
    """The address a request counts against: behind a trusted proxy (a Space), the LAST X-Forwarded-For entry,
    the one that proxy appended from the connection it received (the entries before it are whatever the client
    wrote, and a forged first entry would make every request a new address); else the connection's peer (a
    header anyone can set is not trusted on a server reached directly)."""
    if profile.trust_forwarded_for and forwarded_for:
        return forwarded_for.split(",")[-1].strip() or (host or "unknown")
    return host or "unknown"
