"""The method registry (specviz.methods): a method that only this test registers runs through make_proposer, the
engine, batched decoding and the command line, and shows up wherever methods are listed; a name nobody
registered is refused; an entry that leaves a declaration out fails as it is written; what the registry says of
each built-in method matches its proposer."""
import contextlib
import inspect
import json
import typing
import warnings

import pytest

from specviz import methods
from specviz.api import batch_drafting, make_proposer, run_once
from specviz.errors import InvalidSettingError, SpecvizError
from specviz.methods import Method, parse_method
from specviz.proposers import NgramProposer, PlainProposer, Proposer
from specviz.proposers.base import Draft, DeviceLookup
from specviz.settings import DecodeSettings

PROMPT = [3, 7, 1, 3, 7, 2, 9, 3, 7]


class RepeatLast(Proposer):
    """The example method: it proposes the last token again, gamma times (a one-hot draft)."""

    name = "repeat"
    drafts_on_host = True

    def propose(self, tokens, gamma):
        return Draft(tokens[-1:].repeat(gamma), None)


def build(request) -> RepeatLast:
    return RepeatLast()


def declaring(**changes) -> dict:
    """The example's declarations: a host-loop lookup that batches; `changes` replace some."""
    return dict(name="repeat", build=f"{__name__}:build", drafts=True, batchable=True, drafts_trees=False,
                lookup=True, on_another=False, uses_draft_model=False, needs=(), draws_from_q=False,
                drafts_at_once=False, device_drafter=None, exactness_prompt="pattern") | changes


@contextlib.contextmanager
def registered(**changes):
    entry = methods.register(Method(**declaring(**changes)))
    try:
        yield entry
    finally:
        methods.unregister(entry.name)


def test_a_method_registered_by_a_test_alone_drafts_and_keeps_plain_greedy_output(tiny_target):
    settings = DecodeSettings(max_new_tokens=24, gamma=3, stop_at_eos=False)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    with pytest.raises(InvalidSettingError, match="unknown method 'repeat'"):  # control: not there before
        make_proposer("repeat", tiny_target)
    with registered():
        proposer = make_proposer("repeat", tiny_target)
        assert isinstance(proposer, RepeatLast)
        result = run_once(tiny_target, proposer, PROMPT, settings)
    assert result.token_ids == plain.token_ids
    assert result.metrics.drafted > 0  # it did speculate: its drafts went through the verifier
    with pytest.raises(InvalidSettingError, match="unknown method 'repeat'"):  # and gone after
        make_proposer("repeat", tiny_target)


def test_a_registered_batchable_method_decodes_batches_like_plain_decoding(tiny_target):
    from specviz.engine.batch import decode_batch

    ids = [[3, 7, 1, 3, 7], [5, 2, 5, 2], [9, 9, 9, 4]]
    settings = DecodeSettings(max_new_tokens=10, gamma=3, stop_at_eos=False)
    plain = decode_batch(tiny_target, lambda: make_proposer("plain", tiny_target), ids, settings)
    with registered():
        run = decode_batch(tiny_target, batch_drafting("repeat", tiny_target), ids, settings)
    assert run.token_ids == plain.token_ids and run.drafted > 0
    with registered(batchable=False), pytest.raises(InvalidSettingError, match="repeat does not batch"):
        batch_drafting("repeat", tiny_target)  # control: declared otherwise, it is refused


def test_a_registered_method_shows_up_where_methods_are_listed():
    from specviz.cli import build_parser
    from specviz.lessons.drafters import needs_nothing
    from specviz.lessons.speedup import compared
    from specviz.ui.form import batch_methods, read_form

    def listed() -> dict:
        return {"names": "repeat" in methods.names(),
                "batchable": "repeat" in methods.names(batchable=True),
                "batch tab": "repeat" in batch_methods(),
                "lesson 4": "repeat" in compared(),
                "lesson 6": "repeat" in needs_nothing(),
                "exactness prompt": methods.exactness_prompt("repeat")[1] if "repeat" in methods.names() else None}

    with registered():
        assert all(listed().values()), listed()
        assert build_parser().parse_args(["generate", "--prompt", "x", "--method", "repeat"]).method == "repeat"
        assert build_parser().parse_args(["check-exactness", "--method", "repeat"]).method == "repeat"
        method, settings = parse_method("repeat:3", DecodeSettings())  # bench's METHOD:GAMMA
        assert (method, settings.gamma) == ("repeat", 3)
        assert read_form({"method": "repeat", "batch_method": "repeat"}).method == "repeat"
    assert not any(listed().values()), listed()  # control: unregistered, it is nowhere
    with pytest.raises(SpecvizError, match="invalid choice: 'repeat'"):
        build_parser().parse_args(["generate", "--prompt", "x", "--method", "repeat"])
    with pytest.raises(InvalidSettingError, match="bad method 'repeat:3'"):
        parse_method("repeat:3", DecodeSettings())


def test_the_command_line_generates_with_a_method_only_the_registry_knows(tmp_path, capsys):
    from specviz.cli import EXIT_BAD_INPUT, main
    from specviz.models.testing import save_tiny_model

    folder = save_tiny_model(tmp_path / "tiny", vocab_size=32, layers=2)
    argv = ["generate", "--prompt", "w3 w7 w1 w3 w7 w2 w9 w3 w7", "--raw-prompt", "--method", "repeat", "--target",
            folder, "--device", "cpu", "--dtype", "float32", "--max-new-tokens", "12", "--compare-plain", "--json"]
    with registered():
        assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["identical_to_plain"] is True and report["method"] == "repeat"
    assert main(argv) == EXIT_BAD_INPUT  # control: once unregistered, the command line refuses it
    assert "invalid choice: 'repeat'" in capsys.readouterr().err


def test_an_unregistered_name_is_refused_with_the_names_there_are(tiny_target):
    for refuse in (lambda: make_proposer("nope", tiny_target), lambda: methods.method("nope")):
        with pytest.raises(InvalidSettingError) as caught:
            refuse()
        assert str(caught.value) == f"unknown method 'nope'; choose one of {', '.join(methods.names())}"
    assert isinstance(make_proposer("ngram", tiny_target), Proposer)  # control: a registered name builds


def test_an_entry_that_leaves_a_declaration_out_fails_as_it_is_written():
    complete = declaring()
    assert Method(**complete).device_drafter is None  # control: said explicitly, None is a declaration
    for left_out in ("device_drafter", "batchable", "needs", "exactness_prompt", "build"):
        with pytest.raises(TypeError, match=f"'{left_out}'"):
            Method(**{key: value for key, value in complete.items() if key != left_out})
    for wrong, message in ((dict(needs=("weights",)), "needs is a tuple of"),
                           (dict(needs=(methods.DRAFT_MODEL,)), "uses one"),
                           (dict(build="specviz.proposers.ngram.build"), "dotted path"),
                           (dict(batchable="yes"), "batchable is True or False"),
                           (dict(exactness_prompt=None), "names its exactness prompt"),
                           (dict(drafts_at_once=True), "a lookup or plain decoding runs none"),
                           (dict(name="Repeat Last"), "lower-case")):
        with pytest.raises(InvalidSettingError, match=message):
            Method(**declaring(**wrong))
    with registered(), pytest.raises(InvalidSettingError, match="registered already"):
        methods.register(Method(**complete))


def proposer_class(entry: Method) -> type:
    """The Proposer subclass its builder returns (the builder's return annotation)."""
    found = typing.get_type_hints(entry.builder())["return"]
    assert issubclass(found, Proposer), entry.name
    return found


@pytest.mark.parametrize("name", methods.METHODS)
def test_what_the_registry_declares_of_a_built_in_method_matches_its_proposer(name):
    entry = methods.method(name)
    cls = proposer_class(entry)
    has_device_lookup = cls.device_lookup is not Proposer.device_lookup
    assert has_device_lookup == (entry.device_drafter is not None), name
    if entry.device_drafter is not None:
        drafter = methods.resolve(entry.device_drafter)  # imports: the device module is there
        assert inspect.isclass(drafter) and issubclass(drafter, DeviceLookup), name
        source = inspect.getsource(cls.device_lookup) + inspect.getsource(inspect.getmodule(cls))
        assert drafter.__name__ in source, name  # the proposer's device drafting is the one the registry names
    if not entry.on_another:  # adaptive names itself after its bases as it is built
        assert cls.name == name  # its flags are read from the entry of its name (proposers.base.Declared)


def test_a_proposer_reads_its_flags_from_its_registry_entry():
    """The flags are declared once, in the registry: the same proposer class reads whatever its entry says, and
    a proposer of no registered method has the defaults (the control)."""
    with registered(drafts_trees=True, lookup=False):
        assert (RepeatLast().drafts_trees, RepeatLast().free_drafts, RepeatLast.drafts) == (True, False, True)
    with registered(drafts_trees=False, lookup=True, drafts=True):
        assert (RepeatLast().drafts_trees, RepeatLast().free_drafts) == (False, True)
    assert (RepeatLast().drafts_trees, RepeatLast().free_drafts, RepeatLast().drafts) == (False, False, True)
    assert PlainProposer().drafts is False and NgramProposer.free_drafts is True


def test_a_method_that_claims_a_device_drafter_it_lacks_is_caught():
    """The control of the test above: a device drafter that is not there does not import."""
    entry = Method(**declaring(device_drafter="specviz.proposers.ngram_device:NoSuchLookup"))
    with pytest.raises(AttributeError):
        methods.resolve(entry.device_drafter)
    assert (proposer_class(entry).device_lookup is not Proposer.device_lookup) != (entry.device_drafter is not None)


def test_which_methods_draft_trees_is_said_from_the_registry_alone(tiny_target):
    from specviz.cli import build_parser

    said = methods.tree_drafting()
    assert said == "ngram, retrieval, medusa, eagle, dflash and adaptive on medusa, eagle or dflash"
    tree_help = next(a.help for a in build_parser()._subparsers._group_actions[0].choices["generate"]._actions
                     if "--tree" in a.option_strings)
    assert said in tree_help
    settings = DecodeSettings(max_new_tokens=4, gamma=2, tree=4, stop_at_eos=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_once(tiny_target, make_proposer("early-exit", tiny_target, exit_layer=1), PROMPT, settings)
    assert any(f"draft trees are for {said}" in str(w.message) for w in caught)
    with registered(drafts_trees=True, lookup=False):  # a tree drafter that is not a lookup: adaptive on it too
        assert methods.tree_drafting() == ("ngram, retrieval, medusa, eagle, dflash, repeat and adaptive on medusa, "
                                           "eagle, dflash or repeat")
    assert methods.tree_drafting() == said  # control: the registry alone changed it


def test_the_app_labels_tree_drafting_from_the_registry():
    from specviz.ui.app import build_demo

    config = build_demo().get_config_file()
    tree = next(c for c in config["components"] if c.get("props", {}).get("elem_id") == "sv-tree")
    assert tree["props"]["info"].startswith(methods.tree_drafting() + ":")
    # the engine's words, no longer 'adaptive on eagle'
    assert "adaptive on medusa, eagle or dflash" in tree["props"]["info"]


def test_the_batch_tab_offers_the_registry_s_batching_drafters(default_target):
    from specviz.engine.batch_draft import ModelDrafting
    from specviz.models.loading import DEFAULT_MODEL
    from specviz.service.calls import SELF_DRAFT, drafting_for
    from specviz.ui.form import batch_methods

    assert batch_methods() == (*methods.names(batchable=True, drafts=True), SELF_DRAFT)
    assert "early-exit" in batch_methods() and "plain" not in batch_methods() and "eagle" not in batch_methods()
    early = drafting_for("early-exit", DEFAULT_MODEL, default_target)  # a model that drafts for the batch
    assert isinstance(early, ModelDrafting) and early.model is not default_target.model
    assert sum(1 for _ in early.model.get_decoder().layers) < len(default_target.model.get_decoder().layers)


def test_method_names_have_a_registry_entry_each():
    """No second list of names: every name that a reader lists is one of the registry's."""
    from specviz.lessons.literature import LITERATURE

    assert {m for r in LITERATURE for m in r.methods} <= set(methods.names())
