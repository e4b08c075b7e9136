"""The command line's arguments: every flag says what it does, and a wrong one is refused before torch and
transformers are imported (seconds on a busy machine), not after."""
import argparse

import pytest

from specviz.cli import build_parser

PROBE = ("import sys; from specviz.cli import main; code = main(sys.argv[1:]); "
         "print(code, 'torch' in sys.modules, 'transformers' in sys.modules)")


def flags_without_help(parser: argparse.ArgumentParser) -> list[str]:
    """'COMMAND --flag' for every option or argument of every subcommand that has no help text."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += [f"{name} {item}" for item in flags_without_help(sub)]
        elif not isinstance(action, argparse._HelpAction) and not (action.help or "").strip():
            missing.append("/".join(action.option_strings) or action.dest)
    return missing


def refusal(fresh_python, *args: str) -> tuple[int, bool, bool, str]:
    """The exit code of `specviz ARGS` in a fresh interpreter, whether torch and transformers were imported by
    then, and its stderr."""
    proc = fresh_python(PROBE, *args)
    code, torch, transformers = proc.stdout.split()[-3:]
    return int(code), torch == "True", transformers == "True", proc.stderr


@pytest.mark.quick
def test_every_flag_of_every_subcommand_has_help_text():
    parser = build_parser()
    assert flags_without_help(parser) == []
    # the control: a flag without help is found, in a subcommand as at the top
    parser.add_argument("--bare")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["bench"]
    sub.add_argument("--also-bare", help=" ")
    assert sorted(flags_without_help(parser)) == ["--bare", "bench --also-bare"]


@pytest.mark.quick
def test_the_sampling_flags_say_what_they_do():
    helps = {action.dest: action.help
             for action in build_parser()._subparsers._group_actions[0].choices["generate"]._actions}
    assert "chat template" in helps["prompt"]
    assert "greedy" in helps["temperature"] and "distribution" in helps["temperature"]
    assert "at most" in helps["max_new_tokens"] and "repeated" in helps["seed"]


@pytest.mark.parametrize("args, message", [
    (["check-exactness", "--samples", "40"], "--samples must be at least 100"),
    (["check-exactness", "--temperature", "0"], "--temperature above 0"),
    (["generate", "--prompt", "hi", "--gamma", "0"], "gamma must be between 1 and 32"),
    (["bench", "--prompts", "p.jsonl", "--out", "o.json", "--methods", "ngram,nope"], "bad method 'nope'"),
    (["bench", "--prompts", "p.jsonl", "--out", "o.json", "--batch-sizes", "1,2", "--heads", "x"],
     "drop --transformers"),
    (["bench", "--prompts", "p.jsonl", "--out", "o.json", "--batch-sizes", "1,zero"],
     "--batch-sizes takes whole numbers"),
    (["train-drafter", "--method", "eagle", "--out", "folder"], "give --steps N or --minutes M"),
])
def test_a_wrong_argument_is_refused_before_torch_is_imported(fresh_python, args, message):
    code, torch, transformers, stderr = refusal(fresh_python, *args)
    assert code == 2 and message in stderr, stderr
    assert not torch and not transformers


def test_the_probe_sees_torch_once_arguments_pass(fresh_python):
    """The control: arguments that pass the checks go on to the imports (here to a model that is not there)."""
    code, torch, transformers, stderr = refusal(fresh_python, "check-exactness", "--target", "/no/such/model")
    assert code == 2 and "/no/such/model" in stderr, stderr
    assert torch and transformers
