"""The streaming pacer on a made-up clock: which updates a run's view gets, and which it does not."""
import pytest

from specviz.ui import run_view
from specviz.service.live import BASELINE, RUNNING
from specviz.ui.pacing import Pacer

pytestmark = pytest.mark.quick


def stream(pacer, timeline):
    """timeline: (time, steps, phase) polls, the run's version moving at each; the updates sent, as (time, parts)."""
    sent = []
    for version, (now, steps, phase) in enumerate(timeline):
        parts = pacer.parts(now, version, steps, phase)
        if parts is not None:
            sent.append((now, parts))
    return sent


def polls(start, end, every, steps, phase):
    return [(start + i * every, steps(i), phase) for i in range(round((end - start) / every))]


def test_a_running_run_gets_its_tokens_each_interval_and_its_charts_after_one_chart_interval():
    sent = stream(Pacer(0.5, 2.0, started=0.0), polls(0.0, 3.0, 0.05, lambda i: i + 1, RUNNING))
    times = [now for now, _ in sent]
    assert all(later - earlier >= 0.5 - 1e-9 for earlier, later in zip(times, times[1:]))
    assert len(sent) == 5 and all("text" in parts for _, parts in sent)
    assert times[0] >= 0.5  # the empty view the run started from is on the screen already
    charted = [now for now, parts in sent if "charts" in parts]
    assert charted and charted[0] >= 2.0 and {"race", "slider"} <= sent[times.index(charted[0])][1]
    assert not any("charts" in parts for now, parts in sent if now < 2.0)


def test_the_baseline_sends_only_its_phase_change_and_the_race():
    spec = polls(0.0, 1.0, 0.05, lambda i: i + 1, RUNNING)
    baseline = polls(1.0, 6.0, 0.05, lambda i: 20, BASELINE)  # plain steps move the version, not the tokens
    sent = stream(Pacer(0.5, 2.0, started=0.0), spec + baseline)
    during = [(now, parts) for now, parts in sent if now >= 1.0]
    assert during[0][0] < 1.6 and "text" in during[0][1]  # the last tokens and the phase's status, promptly
    later = [parts for _, parts in during[1:]]
    assert len(later) == 2  # one each chart interval, no status-only update between
    assert later[0] == {"race", "charts", "slider"}  # the step charts' first drawing, with the last steps
    assert later[1] == {"race"}  # then only the baseline moves


def test_a_run_that_does_not_move_gets_no_update():
    pacer = Pacer(0.5, 2.0, started=0.0)
    assert pacer.parts(1.0, 1, 1, RUNNING) is not None
    assert pacer.parts(1.6, 1, 1, RUNNING) is None  # same version
    assert pacer.parts(1.7, 2, 2, RUNNING) == {"text"}  # control: a new step


def test_step_mode_redraws_the_inspector_with_each_step():
    pacer = Pacer(0.5, 2.0, started=0.0, follow_cursor=True)
    assert pacer.parts(0.6, 1, 1, RUNNING) == {"text", "detail", "slider"}
    assert Pacer(0.5, 2.0, started=0.0).parts(0.6, 1, 1, RUNNING) == {"text"}


def token_updates_during(interval, seconds, step_every=0.05):
    """Updates a speculative run of `seconds` (a step each `step_every`) gets before its end, polled as the app
    polls (every 0.03 s): the ones a browser on the same machine draws while the engine runs."""
    timeline = polls(0.0, seconds, 0.03, lambda i: int(i * 0.03 / step_every) + 1, RUNNING)
    return len(stream(Pacer(interval, run_view.CHART_INTERVAL, started=0.0), timeline))


def test_a_speculative_run_of_a_second_and_a_half_gets_one_update_before_its_end():
    # each update costs a browser on the same machine 30 to 60 ms of CPU, whatever it carries (docs/app.md):
    # the example prompts' speculative runs last 0.1 to 2 s on the 2-core machine
    assert run_view.TOKEN_INTERVAL >= 1.0
    assert token_updates_during(run_view.TOKEN_INTERVAL, 1.6) == 1
    assert token_updates_during(run_view.TOKEN_INTERVAL, 0.9) == 0
    assert token_updates_during(0.5, 1.6) == 3  # control: the interval before, three updates in the same run
