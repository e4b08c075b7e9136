"""The one registry of drafting methods: what each method is (does it batch, draft trees, need files, have a
drafter on the device loop...) and where its proposer is built, apart from its code. Everything that lists
methods reads this registry (make_proposer, the command line, the app, the lessons, the bench), so adding a
method is its proposer module (with its builder), its device module if it has one, and one entry below.

No torch here: the command line checks its arguments against the registry before anything heavy (torch,
transformers) is imported, and a builder is named by its dotted path, imported only when a proposer is built.
Also the bench's argument syntax (METHOD:GAMMA[:TREE][@STOP], batch sizes)."""
from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from .errors import InvalidSettingError
from .settings import DecodeSettings

# the files a method cannot run without (Method.needs)
DRAFT_MODEL = "draft model"  # a second, smaller model: --draft, draft= in the API, the app's drafter field
TRAINED_DRAFTER = "trained drafter"  # heads or a feature drafter trained for the target (--heads)
DATASTORE = "datastore"  # a datastore of text to look continuations up in (--heads)
FILES = (DRAFT_MODEL, TRAINED_DRAFTER, DATASTORE)

# check-exactness's default prompt for each method (Method.exactness_prompt): one on which its drafts are both
# accepted and rejected often enough to test both paths of the verifier. The lookups, adaptive and Medusa accept
# most on a pattern sent as is; EAGLE and the draft model, which learnt the target's chat answers, on a chat
# question. Early exit at its default cut (a quarter of the layers) accepts next to nothing on either: the check
# cuts it at 7/8, unless --exit-layer says otherwise.
EXACTNESS_PROMPT = "Name one animal, one colour and one city."
PATTERN_PROMPT = "one two three four five, " * 4 + "one two"  # sent without the chat template
EXACTNESS_PROMPTS = {"question": (EXACTNESS_PROMPT, False), "pattern": (PATTERN_PROMPT, True)}  # (text, sent as is)

_DOTTED = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True, kw_only=True)
class Method:
    """One drafting method's declarations. Every field is required: an entry that leaves one out fails as it
    is written (a method without a drafter on the device loop says device_drafter=None, it does not forget it)."""

    name: str
    build: str  # "module:function" that builds its proposer from a proposers.base.ProposerRequest
    drafts: bool  # False only for plain decoding, the baseline, which drafts nothing
    batchable: bool  # engine.batch.decode_batch drafts with it (api.batch_drafting)
    drafts_trees: bool  # proposes a draft tree when settings.tree > 0 (its proposer's drafts_trees)
    lookup: bool  # drafts by looking up, next to free whatever the draft's length (its proposer's free_drafts)
    on_another: bool  # drafts through another method's proposer (adaptive): trees and q come from that one
    uses_draft_model: bool  # takes a draft model where one is given (--draft, the app's drafter field)
    needs: tuple[str, ...]  # the files it cannot run without, of FILES
    draws_from_q: bool  # sampling, its first draft token is drawn from a drafter's distribution q (lesson 7)
    drafts_at_once: bool  # a step's whole chain comes from one drafting forward (a block, or heads), not one a token
    device_drafter: str | None  # "module:Class" of its drafting on the device loop; None: runs take the host loop
    exactness_prompt: str | None  # check-exactness's default prompt, a key of EXACTNESS_PROMPTS; None: plain

    def __post_init__(self):
        def wrong(what: str):
            raise InvalidSettingError(f"method {self.name!r}: {what}")

        if not re.fullmatch(r"[a-z][a-z0-9-]*", self.name or ""):
            wrong("a name is lower-case letters, digits and dashes (it is typed on the command line)")
        for field, path in (("build", self.build), ("device_drafter", self.device_drafter)):
            if path is not None and not _DOTTED.match(path):
                wrong(f"{field} is a dotted path 'package.module:name', got {path!r}")
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type == "bool" and not isinstance(value, bool):
                wrong(f"{field.name} is True or False, got {value!r}")
        if not isinstance(self.needs, tuple) or not set(self.needs) <= set(FILES):
            wrong(f"needs is a tuple of {', '.join(map(repr, FILES))}, got {self.needs!r}")
        if DRAFT_MODEL in self.needs and not self.uses_draft_model:
            wrong("a method that needs a draft model uses one (uses_draft_model=True)")
        if self.drafts != (self.exactness_prompt is not None):
            wrong("a method that drafts names its exactness prompt; plain decoding has none")
        if self.exactness_prompt is not None and self.exactness_prompt not in EXACTNESS_PROMPTS:
            wrong(f"exactness_prompt is one of {', '.join(EXACTNESS_PROMPTS)}, got {self.exactness_prompt!r}")
        if self.drafts_at_once and (self.lookup or not self.drafts):
            wrong("drafting at once is a drafter's forward: a lookup or plain decoding runs none")
        if not self.drafts and (self.drafts_trees or self.lookup or self.draws_from_q or self.needs):
            wrong("a method that drafts nothing draws, looks up, needs and trees nothing")

    def builder(self) -> Callable:
        """Its proposer's builder, imported now (it imports torch)."""
        return resolve(self.build)


def resolve(path: str):
    """'package.module:name' -> that object, imported."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


_REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Adds a method to the registry (the built-in ones below; a test's or a plugin's own)."""
    if not isinstance(method, Method):
        raise InvalidSettingError(f"register takes a specviz.methods.Method, got {type(method).__name__}")
    if method.name in _REGISTRY:
        raise InvalidSettingError(f"a method named {method.name!r} is registered already")
    _REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def methods() -> tuple[Method, ...]:
    """Every registered method, in the order they were registered (the order every list of them shows)."""
    return tuple(_REGISTRY.values())


def names(**declared) -> tuple[str, ...]:
    """The names of the registered methods whose declarations have the given values, e.g. names(batchable=True);
    names() for all of them."""
    fields = {field.name for field in dataclasses.fields(Method)}
    if not set(declared) <= fields:
        raise TypeError(f"a method declares {', '.join(sorted(fields))}; not "
                        f"{', '.join(sorted(set(declared) - fields))}")
    return tuple(m.name for m in methods() if all(getattr(m, key) == value for key, value in declared.items()))


def method(name: str) -> Method:
    """The registered method of that name; an unknown one is refused with the names there are."""
    if name not in _REGISTRY:
        raise InvalidSettingError(f"unknown method {name!r}; choose one of {', '.join(names())}")
    return _REGISTRY[name]


def joined(items, word: str = "and") -> str:
    """['a', 'b', 'c'] -> 'a, b and c' (word: 'and' or 'or')."""
    items = list(items)
    return f" {word} ".join(filter(None, [", ".join(items[:-1]), items[-1] if items else ""]))


def tree_drafting() -> str:
    """Which methods draft trees, in words, for every message and label that says it: those that declare it, and
    a method that drafts through another on one of those that is not a lookup (adaptive reads a lookup's whole
    draft as a chain: proposers/adaptive.py)."""
    model_trees = [m.name for m in methods() if m.drafts_trees and not m.lookup and not m.on_another]
    through = [f"{m.name} on {joined(model_trees, 'or')}" for m in methods() if m.on_another and model_trees]
    return joined([*names(drafts_trees=True), *through])


def exactness_prompt(name: str) -> tuple[str, bool]:
    """check-exactness's default prompt for a method, and whether it is sent as is (no chat template)."""
    return EXACTNESS_PROMPTS[method(name).exactness_prompt or "question"]


def check_batchable(name: str) -> None:
    if name not in names(batchable=True):
        raise InvalidSettingError(f"{name} does not batch: batched decoding runs {', '.join(names(batchable=True))} "
                                  "(a drafter that reads the target's hidden states would need them per row)")


for _entry in (
    Method(name="plain", build="specviz.proposers.plain:build", drafts=False, batchable=True, drafts_trees=False,
           lookup=False, on_another=False, uses_draft_model=False, needs=(),
           draws_from_q=False, drafts_at_once=False,
           device_drafter="specviz.proposers.base:DeviceLookup", exactness_prompt=None),
    Method(name="draft", build="specviz.proposers.draft_model:build", drafts=True, batchable=True, drafts_trees=False,
           lookup=False, on_another=False, uses_draft_model=True, needs=(DRAFT_MODEL,),
           draws_from_q=True, drafts_at_once=False,
           device_drafter="specviz.proposers.draft_model_device:DraftModelLookup", exactness_prompt="question"),
    Method(name="ngram", build="specviz.proposers.ngram:build", drafts=True, batchable=True, drafts_trees=True,
           lookup=True, on_another=False, uses_draft_model=False, needs=(),
           draws_from_q=False, drafts_at_once=False,
           device_drafter="specviz.proposers.ngram_device:NgramLookup", exactness_prompt="pattern"),
    Method(name="retrieval", build="specviz.proposers.retrieval:build", drafts=True, batchable=True, drafts_trees=True,
           lookup=True, on_another=False, uses_draft_model=False, needs=(DATASTORE,),
           draws_from_q=False, drafts_at_once=False,
           device_drafter="specviz.proposers.retrieval_device:RetrievalLookup", exactness_prompt="pattern"),
    Method(name="early-exit", build="specviz.proposers.early_exit:build", drafts=True, batchable=True,
           drafts_trees=False, lookup=False, on_another=False, uses_draft_model=False, needs=(),
           draws_from_q=True, drafts_at_once=False,
           device_drafter="specviz.proposers.draft_model_device:DraftModelLookup", exactness_prompt="question"),
    Method(name="medusa", build="specviz.proposers.medusa:build", drafts=True, batchable=False, drafts_trees=True,
           lookup=False, on_another=False, uses_draft_model=False, needs=(TRAINED_DRAFTER,),
           draws_from_q=True, drafts_at_once=True,
           device_drafter="specviz.proposers.medusa_device:MedusaLookup", exactness_prompt="pattern"),
    Method(name="eagle", build="specviz.proposers.eagle:build", drafts=True, batchable=False, drafts_trees=True,
           lookup=False, on_another=False, uses_draft_model=False, needs=(TRAINED_DRAFTER,),
           draws_from_q=True, drafts_at_once=False,
           device_drafter="specviz.proposers.eagle_device:EagleLookup", exactness_prompt="question"),
    Method(name="dflash", build="specviz.proposers.dflash:build", drafts=True, batchable=False, drafts_trees=True,
           lookup=False, on_another=False, uses_draft_model=False, needs=(TRAINED_DRAFTER,),
           draws_from_q=True, drafts_at_once=True,
           device_drafter="specviz.proposers.dflash_device:DFlashLookup", exactness_prompt="question"),
    # adaptive chooses each step's draft length from what it measures; the device loop has no such choice
    Method(name="adaptive", build="specviz.proposers.adaptive:build", drafts=True, batchable=False, drafts_trees=False,
           lookup=False, on_another=True, uses_draft_model=True, needs=(),
           draws_from_q=False, drafts_at_once=False,
           device_drafter=None, exactness_prompt="pattern"),
):
    register(_entry)
del _entry

METHODS = names()  # the built-in methods' names (specviz.METHODS); a list that must see methods registered later
# reads names()


def parse_method(spec: str, settings: DecodeSettings) -> tuple[str, DecodeSettings]:
    """'METHOD' or 'METHOD:GAMMA[:TREE][@STOP]' -> (the method, the settings it runs with), so that one bench
    can put, e.g., a chain and a tree of the same drafter side by side, or a draft model with and without
    its confidence stop (STOP: settings.draft_stop)."""
    head, _, stop = spec.partition("@")
    method_name, *numbers = head.split(":")
    if (method_name not in names() or len(numbers) > 2 or not all(n.isdigit() for n in numbers)
            or (stop and not stop.replace(".", "", 1).isdigit())):
        raise InvalidSettingError(f"bad method {spec!r}: write METHOD or METHOD:GAMMA[:TREE][@STOP] with METHOD one "
                                  f"of {', '.join(names())}, e.g. ngram:8:64 or draft:4@0.5")
    if numbers:
        settings = dataclasses.replace(settings, gamma=int(numbers[0]), tree=int(numbers[1]) if len(numbers) > 1 else 0)
    if stop:
        settings = dataclasses.replace(settings, draft_stop=float(stop))
    return method_name, settings.validate()


def parse_batch_sizes(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]: `bench --batch-sizes` and the Batch tab's sizes, sorted, each once."""
    sizes = [part.strip() for part in text.split(",") if part.strip()]
    if not sizes or not all(size.isdigit() and int(size) >= 1 for size in sizes):
        raise InvalidSettingError(f"--batch-sizes takes whole numbers >= 1, comma-separated (1,2,4,8), got {text!r}")
    return sorted({int(size) for size in sizes})
