"""check-exactness's exit code: an uncaught control makes the test inconclusive, which must not read as a pass."""
from specviz.cli import EXIT_INCONCLUSIVE, exactness_exit_code

from command_line import run_cli


def test_the_exit_code_tells_a_pass_a_failure_and_an_inconclusive_test_apart():
    assert exactness_exit_code(passed=True, control_caught=True) == 0
    assert exactness_exit_code(passed=True, control_caught=None) == 0  # --control 0: no control was asked for
    assert exactness_exit_code(passed=True, control_caught=False) == EXIT_INCONCLUSIVE == 3
    assert exactness_exit_code(passed=False, control_caught=False) == 1  # a failure is a failure
    assert exactness_exit_code(passed=False, control_caught=True) == 1


def test_a_control_too_small_for_the_samples_exits_3(tmp_path):
    """The run that exits 0 with its control caught is test_cli's test_check_exactness_reports_the_test_and_its_control
    (half the temperature at 300 samples); here the same model and prompt with a bias 100 samples cannot see."""
    from specviz.models.testing import save_tiny_model, word_tokenizer

    folder = save_tiny_model(tmp_path / "tiny", vocab_size=8, tokenizer=word_tokenizer(8))
    unseen = run_cli("check-exactness", "--target", folder, "--raw-prompt", "--prompt", "w1 w2 w3 w1 w2 w3 w1",
                     "--method", "ngram", "--samples", "100", "--depth", "1", "--control", "0.99")
    assert "NOT caught" in unseen.stdout and "exact (no difference found)" in unseen.stdout, unseen.stdout
    assert unseen.returncode == 3, unseen.stdout


def test_help_documents_the_exit_codes():
    done = run_cli("check-exactness", "--help")
    assert "3 when the control was not caught" in " ".join(done.stdout.split())
