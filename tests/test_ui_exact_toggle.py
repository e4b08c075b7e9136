"""The settings panel's "exact mode (GPU)" toggle, from the request's boundary to the runs' EngineOptions: read
as a flag, carried by the RunRequest, given to the warm-up and to both runs. On the CPU the mode never runs
(settings["exact_forward"] stays False), so what is checked here is that the switch reaches the engine."""
import pytest

from specviz import DecodeSettings
from specviz.options import EngineOptions
from specviz.service import live, run_request, run_setup
from specviz.ui.form import FormError, read_form


@pytest.mark.quick
def test_the_form_reads_the_toggle_as_a_flag():
    assert read_form({"exact": False}).exact is False and read_form({"exact": True}).exact is True
    assert read_form({}).exact is None  # left out: as the server's environment says
    with pytest.raises(FormError, match="exact mode must be true or false"):
        read_form({"exact": "yes"})


@pytest.mark.quick
def test_the_request_sets_only_the_exact_switch(monkeypatch):
    monkeypatch.setenv("SPECVIZ_GRAPHS", "0")
    monkeypatch.delenv("SPECVIZ_EXACT", raising=False)
    off = run_request.engine_options(run_request.RunRequest("p", "ngram", exact=False))
    assert off.exact is False and off.graphs is False  # the environment's other switches kept
    assert run_request.engine_options(run_request.RunRequest("p", "ngram", exact=True)).exact is True
    assert run_request.engine_options(run_request.RunRequest("p", "ngram")) == EngineOptions.from_environment()
    monkeypatch.setenv("SPECVIZ_EXACT", "0")
    assert run_request.engine_options(run_request.RunRequest("p", "ngram")).exact is False  # None: the server's choice
    assert run_request.engine_options(run_request.RunRequest("p", "ngram", exact=True)).exact is True  # the page's wins


@pytest.mark.quick
def test_the_run_tab_sends_the_toggle_last():
    from specviz.ui.run_tab import RUN_FIELDS
    assert RUN_FIELDS[-1] == "exact"  # appended: API callers that send the earlier fields by position still work


@pytest.mark.parametrize("exact", [False, True])
def test_both_runs_and_their_warm_up_get_the_requests_mode(default_target, monkeypatch, exact):
    warmed = []
    monkeypatch.setattr(run_setup, "warm_up", lambda *args, **kwargs: warmed.append(kwargs["options"]))
    request = run_request.RunRequest("Count to five.", "ngram", settings=DecodeSettings(max_new_tokens=4, gamma=3),
                                     exact=exact)
    run = live.LiveRun(request, default_target, None)
    try:
        assert [o.exact for o in warmed] == [exact]
        assert run.speculative.run.options.exact is exact and run.plain.run.options.exact is exact
    finally:
        run.stop()
