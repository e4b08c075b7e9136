"""When a streamed run's view is redrawn, and which parts of it: no gradio, no clock of its own.

Every update costs a browser on the same machine a roughly fixed slice of a core, whatever it carries
(docs/app.md, "What the UI costs"), and on a 2-core machine that slice is taken from the engine. So the pacer
sends few updates: the token view at most every token_interval (the first time one token_interval after the
start: the view the run starts from is on the screen already) and only when the speculative run took a new
step; the race and the step charts at most every chart_interval (the first time one chart_interval after the
start, so that a short run draws them once, at its end); and nothing in between. While plain decoding runs
for the baseline, only the race moves, and the status line's count moves with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Pacer:
    token_interval: float
    chart_interval: float
    started: float  # the clock at the start of the stream
    follow_cursor: bool = False  # step mode: the inspector follows the step just taken
    _version: int = field(default=-1, init=False)
    _phase: str | None = field(default=None, init=False)
    _last_text: float | None = field(default=None, init=False)
    _last_charts: float | None = field(default=None, init=False)
    _text_steps: int = field(default=-1, init=False)
    _chart_steps: int = field(default=-1, init=False)

    def parts(self, now: float, version: int, steps: int, phase: str) -> frozenset | None:
        """The parts to redraw now ("text", "race", "charts", "slider", "detail"; the status goes with any
        update), or None: no update. version: the run's change counter; steps: the speculative run's steps."""
        last_text = self.started if self._last_text is None else self._last_text
        if version == self._version or now - last_text < self.token_interval:
            return None
        last_charts = self.started if self._last_charts is None else self._last_charts
        parts = set()
        if steps != self._text_steps:
            parts.add("text")
        charts = now - last_charts >= self.chart_interval
        if charts:
            parts.add("race")  # the baseline moves it too
            if steps != self._chart_steps:
                parts |= {"charts", "slider"}
        if self.follow_cursor and "text" in parts:
            parts |= {"detail", "slider"}
        if not parts and phase == self._phase:
            return None  # only the baseline's count moved: it waits for the race
        self._version, self._phase, self._last_text = version, phase, now
        if "text" in parts:
            self._text_steps = steps
        if charts:
            self._last_charts, self._chart_steps = now, steps
        return frozenset(parts)
