"""The engine's switches (specviz/options.py): each variable sets its field, options.py is the only module that
reads them, the docs' table lists every one, and options given to a run reach its runner and its loop."""
import ast
import dataclasses
import re
from pathlib import Path

import pytest

from specviz import DecodeSettings, EngineOptions
from specviz.api import make_proposer, run_once

ROOT = Path(__file__).resolve().parents[1]
SWITCHES = {"SPECVIZ_FAST": "fast", "SPECVIZ_GRAPHS": "graphs", "SPECVIZ_COMPILE": "compile",
            "SPECVIZ_ONEDNN": "onednn", "SPECVIZ_TRITON_ATTENTION": "triton_attention",
            "SPECVIZ_DETAIL_STREAM": "detail_stream", "SPECVIZ_EXACT": "exact"}
VARIABLES = [*SWITCHES, "SPECVIZ_DEVICE_LOOP"]


@pytest.mark.quick
def test_every_switch_is_on_unless_its_variable_turns_it_off():
    assert EngineOptions.from_environment({}) == EngineOptions()
    assert all(value is True for value in dataclasses.asdict(EngineOptions()).values() if isinstance(value, bool))
    for variable, field in SWITCHES.items():
        options = EngineOptions.from_environment({variable: "0"})
        assert getattr(options, field) is False
        assert dataclasses.replace(options, **{field: True}) == EngineOptions()  # that switch alone
        assert getattr(EngineOptions.from_environment({variable: "1"}), field) is True


@pytest.mark.quick
def test_the_device_loop_mode_and_zero_gpu():
    assert EngineOptions.from_environment({"SPECVIZ_DEVICE_LOOP": "force"}).device_loop == "force"
    assert EngineOptions.from_environment({"SPECVIZ_DEVICE_LOOP": "0"}).device_loop == "0"
    # as before: only 0 and force differ
    assert EngineOptions.from_environment({"SPECVIZ_DEVICE_LOOP": "yes"}).device_loop == "1"
    zero = EngineOptions.from_environment({"SPACES_ZERO_GPU": "true"})
    assert zero == EngineOptions()  # a GPU worker captures (compiled) graphs and keeps them: nothing turned off
    assert not EngineOptions.from_environment({"SPACES_ZERO_GPU": "true", "SPECVIZ_COMPILE": "0"}).compile
    assert not EngineOptions.from_environment({"SPACES_ZERO_GPU": "true", "SPECVIZ_GRAPHS": "0"}).graphs
    with pytest.raises(ValueError, match="device_loop"):
        EngineOptions(device_loop="always")


def variables_named(path: Path) -> set[str]:
    """The switches' variable names that a module spells out as string constants."""
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and node.value in VARIABLES}


def test_only_options_reads_the_switches():
    readers = {str(path.relative_to(ROOT)) for path in (ROOT / "specviz").rglob("*.py") if variables_named(path)}
    assert readers == {"specviz/options.py"}
    assert variables_named(ROOT / "specviz" / "options.py") == set(VARIABLES)  # the control: the reading sees them


def test_the_docs_table_lists_every_switch():
    text = (ROOT / "docs" / "fast-path.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `SP")]
    assert sorted(re.match(r"\| `([A-Z_]+)", row).group(1) for row in rows) == sorted(VARIABLES)
    fields = {field.name for field in dataclasses.fields(EngineOptions)}
    assert {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[2])} == fields


def test_options_given_to_a_run_reach_its_runner_and_its_loop(tiny_target, monkeypatch):
    """Given options win over the environment; without options the run reads the environment (the control)."""
    monkeypatch.setenv("SPECVIZ_FAST", "1")
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "0")
    ids, settings = [1, 2, 3, 1, 2, 3, 1], DecodeSettings(max_new_tokens=10, gamma=3)
    slow = run_once(tiny_target, make_proposer("ngram", tiny_target), ids, settings, options=EngineOptions(fast=False))
    device = run_once(tiny_target, make_proposer("ngram", tiny_target), ids, settings,
                      options=EngineOptions(device_loop="force"))
    from_environment = run_once(tiny_target, make_proposer("ngram", tiny_target), ids, settings)
    assert (slow.settings["runner"], slow.settings["loop"]) == ("CausalRunner", "host")
    assert (device.settings["runner"], device.settings["loop"]) == ("StaticRunner", "device")
    assert (from_environment.settings["runner"], from_environment.settings["loop"]) == ("StaticRunner", "host")
    assert slow.token_ids == device.token_ids == from_environment.token_ids


def test_a_drafters_runner_takes_the_options_it_is_made_with(tiny_target, tiny_drafter):
    fast = make_proposer("draft", tiny_target, tiny_drafter, options=EngineOptions())
    slow = make_proposer("draft", tiny_target, tiny_drafter, options=EngineOptions(fast=False))
    assert (type(fast.runner).__name__, type(slow.runner).__name__) == ("StaticRunner", "CausalRunner")


@pytest.mark.quick
def test_the_command_line_sets_the_exact_mode_for_its_runs():
    environ = {}
    from specviz.options import set_for_this_process

    set_for_this_process(exact=False, environ=environ)
    assert not EngineOptions.from_environment(environ).exact
    set_for_this_process(exact=None, environ=environ)  # the control: None leaves it as it is
    assert not EngineOptions.from_environment(environ).exact
    set_for_this_process(exact=True, environ=environ)
    assert EngineOptions.from_environment(environ).exact
