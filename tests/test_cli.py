"""The command-line contract that scripts rely on (generate --json, --compare-plain, bench)."""
import json

from test_errors import assert_one_line_error, run_cli

TOKEN_KINDS = {"accepted", "rejected", "resampled", "bonus", "target"}
METRICS = {"drafted", "accepted", "acceptance_rate", "mean_accepted_length", "target_forwards",
           "per_position_acceptance", "tokens_per_second", "wall_seconds"}


def test_generate_json_with_compare_plain():
    proc = run_cli("generate", "--prompt", "Write a haiku about caches, then repeat it.", "--method", "ngram",
                   "--max-new-tokens", "40", "--gamma", "3", "--json", "--compare-plain")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert isinstance(out["text"], str) and out["text"]
    assert METRICS <= set(out["metrics"])
    assert out["tokens"] and all({"id", "text", "kind"} <= set(t) for t in out["tokens"])
    assert {t["kind"] for t in out["tokens"]} <= TOKEN_KINDS
    assert "".join(t["text"] for t in out["tokens"] if t["kind"] != "rejected") == out["text"]
    assert len(out["steps"]) == out["metrics"]["target_forwards"]
    assert {"text", "wall_seconds", "tokens_per_second"} <= set(out["plain"])
    assert out["speedup"] == out["plain"]["wall_seconds"] / out["metrics"]["wall_seconds"]
    assert out["identical_to_plain"] is True
    assert out["plain"]["text"] == out["text"]


def test_generate_sampling_json_marks_identity_unknown():
    proc = run_cli("generate", "--prompt", "Name a colour.", "--method", "early-exit", "--max-new-tokens", "8",
                   "--temperature", "0.7", "--top-p", "0.9", "--seed", "1", "--json", "--compare-plain")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["identical_to_plain"] is None
    assert out["settings"]["temperature"] == 0.7


def test_generate_human_readable():
    proc = run_cli("generate", "--prompt", "Count from 1 to 10.", "--method", "adaptive", "--max-new-tokens", "24",
                   "--compare-plain")
    assert proc.returncode == 0, proc.stderr
    summary = proc.stdout.strip().splitlines()[-1]
    # the default target has a trained EAGLE drafter; on a CPU the datastore's lookup goes first beside it
    assert summary.startswith("adaptive(retrieval+eagle): ") and "tok/s" in summary and "speedup" in summary
    assert "identical to plain: True" in summary
    # loading the offline model draws no progress bars (the GGUF reader's dequantising bar used to)
    assert "de-quantizing" not in proc.stderr and "it/s]" not in proc.stderr, proc.stderr


def test_argument_errors_name_the_command_once():
    proc = run_cli("generate", "--prompt", "hi", "--gamma", "abc")
    assert_one_line_error(proc, "specviz: error: generate: argument --gamma: invalid int value: 'abc'")
    assert "specviz generate:" not in proc.stderr
    proc = run_cli("--no-such-option")
    assert_one_line_error(proc, "specviz: error: ")
    assert "specviz: error: specviz" not in proc.stderr


def test_bench_contract(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join([
        json.dumps({"question_id": 7, "category": "coding", "turns": ["Write a Python hello world.", "Now in C."]}),
        json.dumps({"question_id": 8, "category": "coding", "turns": ["Print 1 to 5 in Python."]}),
        json.dumps({"id": "x", "prompt": "Repeat: red green blue red green blue."}),
        json.dumps({"id": "skipped", "prompt": "over the limit"}),
    ]))
    out_file = tmp_path / "result.json"
    proc = run_cli("bench", "--prompts", str(prompts), "--limit", "3", "--methods", "ngram,adaptive",
                   "--max-new-tokens", "16", "--out", str(out_file))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out_file.read_text())
    assert {"device", "config", "results", "summary"} <= set(report)
    assert len(report["results"]) == 3 * 3  # plain + 2 methods, 3 prompts
    row_keys = {"prompt_id", "category", "method", "new_tokens", "wall_seconds", "tokens_per_second",
                "mean_accepted_length", "acceptance_rate", "speedup", "identical_to_plain"}
    for row in report["results"]:
        assert row_keys <= set(row)
        assert row["identical_to_plain"] is True
    assert {r["prompt_id"] for r in report["results"]} == {7, 8, "x"}
    assert {r["category"] for r in report["results"]} == {"coding", "all"}
    assert set(report["summary"]) == {"plain", "ngram", "adaptive"}
    for block in report["summary"].values():
        assert {"overall", "per_category"} <= set(block)
        assert set(block["per_category"]) == {"coding", "all"}
    assert "bench" in proc.stderr  # the progress bar
    assert "overall" in proc.stdout  # the table


def test_check_exactness_reports_the_test_and_its_control(tmp_path):
    from specviz.testing import save_tiny_model, word_tokenizer

    folder = save_tiny_model(tmp_path / "tiny", vocab_size=8, tokenizer=word_tokenizer(8))
    proc = run_cli("check-exactness", "--target", folder, "--raw-prompt", "--prompt", "w1 w2 w3 w1 w2 w3 w1",
                   "--method", "ngram", "--samples", "300", "--control", "0.5")
    assert proc.returncode == 0, proc.stderr
    method, control = [line for line in proc.stdout.splitlines() if "p = " in line]
    assert "exact (no difference found)" in method
    assert "caught, as it must be" in control  # half the temperature: a bias 300 samples see
    assert "runs" in proc.stderr  # the progress bar


def test_check_exactness_refuses_what_it_cannot_test():
    for args, message in [(["--samples", "5"], "at least 100"), (["--temperature", "0"], "--temperature above 0"),
                          (["--depth", "9"], "--depth must be")]:
        proc = run_cli("check-exactness", "--method", "ngram", *args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_generate_steps_prints_a_line_a_step(default_target, capsys):
    import re

    from specviz.cli import main

    prompt = "Repeat this sentence three times, word for word: The quick brown fox jumps over the lazy dog."
    assert main(["generate", "--prompt", prompt, "--method", "ngram", "--max-new-tokens", "24", "--device", "cpu",
                 "--dtype", "float32", "--steps"]) == 0
    lines = capsys.readouterr().out.splitlines()
    steps = [line for line in lines if re.match(r"step \d+: ", line)]
    assert [int(line.split()[1].rstrip(":")) for line in steps] == list(range(len(steps))) and len(steps) > 1
    assert any("kept " in line and "the target wrote" in line for line in steps)
    tau = float(re.search(r"tau=([\d.]+)", lines[-1]).group(1))
    new_tokens = int(re.search(r": (\d+) tokens in", lines[-1]).group(1))
    assert len(steps) == round(new_tokens / tau)  # one line for each target forward


def test_check_exactness_exercises_acceptance_by_default_and_warns_when_a_run_did_not(default_target, capsys):
    """ngram on a chat question drafted 649 and accepted 1 at 3000 samples: a test that says little about keeping a
    draft. Its default prompt now is one it can predict; a question it cannot is warned about."""
    import re

    from specviz.cli import main

    common = ["check-exactness", "--method", "ngram", "--samples", "100", "--depth", "1", "--control", "0",
              "--device", "cpu", "--dtype", "float32"]
    main(common)
    default = capsys.readouterr().out
    drafted, accepted = map(int, re.search(r"drafted (\d+), accepted (\d+)", default).groups())
    assert "warning" not in default and accepted >= 0.2 * drafted > 0, default
    main(common + ["--prompt", "Name one animal, one colour and one city."])  # the control: the old default
    question = capsys.readouterr().out
    assert "  warning: only " in question and "drafts were accepted" in question, question
