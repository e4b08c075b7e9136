"""A real browser on the app: Debian's chromium driven by Playwright for Python (never `playwright install`:
setup.sh --dev installs the chromium package). Types a prompt, presses Run, sees every token kind and a
chart, hovers a token, takes a screenshot; injection strings in the prompt and a model name show as text and
run nothing. Then what a class sees: the run in the first screen of a 1280x720 projector, the reading modes,
a 400 px phone without horizontal scroll, and text contrast in the light and the dark theme. The session's
server and browser (conftest.py); each screen size runs the prompt once."""

import re

import pytest

from specviz import DecodeSettings
from specviz.api import encode, make_proposer, run_once
from ui_server import require_chromium

PROMPT = "Repeat this sentence three times, word for word: The quick brown fox jumps over the lazy dog."
MAX_NEW = 48
INJECTIONS = ["${alert(1)}", "<img src=x onerror=alert(1)>", '<img src=x onerror="window.__pwned=1">']

require_chromium()
pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def url(app_url):
    return app_url


@pytest.fixture(scope="module")
def browser(chromium):
    return chromium


@pytest.fixture
def page(browser, url):
    """A fresh tab on the app that fails the test if any script opens a dialog."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    dialogs = []
    tab.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    tab.goto(url)
    tab.wait_for_selector("#sv-run", timeout=60_000)
    yield tab
    context.close()
    assert not dialogs, f"a script ran and opened a dialog: {dialogs}"


def set_field(page, elem_id, value, commit="Tab"):
    field = page.locator(f"#{elem_id} textarea, #{elem_id} input").first
    if not field.is_visible():  # a setting in the closed Settings panel, whose widgets mount on its opening
        page.get_by_text("Settings: models").click()
        field.wait_for(state="visible")
        page.wait_for_timeout(300)
    field.fill(value)
    field.press(commit)


def run_and_wait(page, status_class="sv-ok", timeout=240_000):
    page.click("#sv-run")
    page.wait_for_selector(f"#sv-status .{status_class}", timeout=timeout)


def test_run_shows_every_kind_a_chart_and_a_tooltip(page, default_target, tmp_path):
    reference = run_once(default_target, make_proposer("ngram", default_target), encode(default_target, PROMPT),
                         DecodeSettings(max_new_tokens=MAX_NEW, gamma=4))
    kinds = {t.kind.value for t in reference.tokens}
    assert {"accepted", "rejected", "resampled", "bonus"} <= kinds  # the prompt exercises every kind

    set_field(page, "sv-prompt", PROMPT)
    set_field(page, "sv-max-new", str(MAX_NEW))
    run_and_wait(page)
    for kind in ("accepted", "rejected", "resampled", "bonus"):
        spans = page.locator(f"#sv-tokens .tok-{kind}")
        assert spans.count() == sum(t.kind.value == kind for t in reference.tokens), kind
    assert page.locator("#sv-tokens .sv-output .tok").count() == len(reference.tokens)

    page.wait_for_selector("#sv-step-plot .js-plotly-plot .main-svg", timeout=30_000)
    assert page.locator("#sv-step-plot .js-plotly-plot .bars path").count() > 0  # bars drawn
    page.wait_for_selector("#sv-race-plot .js-plotly-plot .scatterlayer .trace", timeout=30_000)

    rejected = page.locator("#sv-tokens .tok-rejected").first
    assert "line-through" in rejected.evaluate("el => getComputedStyle(el).textDecorationLine")
    resampled = page.locator("#sv-tokens .tok-resampled").first
    assert resampled.evaluate("el => getComputedStyle(el).textDecorationStyle") == "wavy"
    bonus = page.locator("#sv-tokens .tok-bonus").first
    assert bonus.evaluate("el => getComputedStyle(el).textDecorationStyle") == "double"

    token = page.locator("#sv-tokens .tok-accepted").first
    token.scroll_into_view_if_needed()
    token.hover()
    tip = token.evaluate("el => getComputedStyle(el, '::after').content")
    assert "accepted · step" in tip and "p = " in tip and "q = " in tip
    shot = tmp_path / "app.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000


def shown_tip(token) -> str:
    """The tip the page shows on a focused token: the stylesheet's ::after content, its CSS escapes decoded."""
    token.focus()
    content = token.evaluate("el => getComputedStyle(el, '::after').content")
    assert content.startswith('"') and content.endswith('"'), content
    text = re.sub(r"\\([0-9a-fA-F]{1,6}) ?", lambda m: chr(int(m.group(1), 16)), content[1:-1])
    return re.sub(r"\\(.)", r"\1", text)


@pytest.mark.parametrize("sampling", [True, False])
def test_the_stylesheet_words_every_tip_as_token_tip_does(browser, sampling):
    """The tips are composed in the page from each token's numbers: the same text as render.token_tip, for every
    kind, a one-hot drafter, a draft the verifier never tested and a missing number."""
    from specviz.records.schema import TokenKind, TokenRecord
    from specviz.ui import render
    from specviz.ui.app import css

    def token(kind, step, p=0.61234, q=None, accept_prob=None, u=None):
        return TokenRecord(id=1, text=" tok", kind=TokenKind(kind), step=step, p=p, q=q, accept_prob=accept_prob, u=u)

    tokens = [token("accepted", 0, 0.8, 0.5, 1.0, 0.3), token("accepted", 0, 0.7, None, 0.7, 0.2),
              token("rejected", 0, 0.1, 0.5, 0.2, 0.9), token("rejected", 0, 0.05, 0.4, 0.125),
              token("resampled", 0), token("accepted", 1, 0.9, None, 0.9, None), token("bonus", 1),
              token("target", 2), token("target", 3, p=None)]
    reached = [True, True, True, False, True, True, True, True, True]
    context = browser.new_context()
    tab = context.new_page()
    tab.set_content(f"<style>{css()}</style><body data-sv-mode='drafts'>"
                    f"{render.token_view_html(tokens, sampling=sampling)}</body>")
    spans = tab.locator(".sv-output .tok")
    assert spans.count() == len(tokens)
    shown = [shown_tip(spans.nth(i)) for i in range(len(tokens))]
    context.close()
    expected = [render.token_tip(t, sampling, r) for t, r in zip(tokens, reached)]
    assert shown == expected
    assert len(set(shown)) == len(shown)  # control: every case words its tip differently


def test_closing_the_tab_ends_its_session(browser, url):
    import time

    from specviz.ui import sessions

    context = browser.new_context()
    tab = context.new_page()
    tab.goto(url)
    tab.wait_for_selector("#sv-run", timeout=60_000)
    set_field(tab, "sv-prompt", PROMPT)
    set_field(tab, "sv-max-new", "8")
    run_and_wait(tab)
    key = next(k for k, state in sessions.kept_sessions().items() if state.run is not None
               and state.run.request.prompt == PROMPT and state.run.request.settings.max_new_tokens == 8)
    context.close()
    deadline = time.monotonic() + 30
    while key in sessions.kept_sessions() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert key not in sessions.kept_sessions()  # gradio's unload event ran and dropped the session


def test_injection_strings_render_as_text_and_run_nothing(page):
    prompt = "Repeat exactly: " + " ".join(INJECTIONS)
    set_field(page, "sv-prompt", prompt)
    set_field(page, "sv-max-new", "16")
    run_and_wait(page)
    shown_prompt = page.locator("#sv-tokens .sv-prompt").text_content()
    for text in INJECTIONS:
        assert text in shown_prompt
    assert page.locator("#sv-tokens img, #sv-summary img").count() == 0
    assert page.evaluate("window.__pwned") is None

    # a model name is shown back in the error message: as text
    set_field(page, "sv-target", INJECTIONS[2], commit="Enter")
    run_and_wait(page, status_class="sv-error")
    status = page.locator("#sv-status").text_content()
    assert INJECTIONS[2] in status
    assert page.locator("#sv-status img").count() == 0
    page.wait_for_timeout(500)  # give an onerror handler the time it would need
    assert page.evaluate("window.__pwned") is None


# -- what a person sees --------------------------------------------------------------------------------------

CONTRAST_JS = """(selectors) => {
  const rgba = (text) => { const p = (text.match(/rgba?\\(([^)]+)\\)/) || [0, '0 0 0 0'])[1].split(/[ ,\\/]+/)
      .filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const over = (top, under, a) => [0, 1, 2].map(i => top[i] * a + under[i] * (1 - a));
  const light = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
      return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const backdrop = (el) => { const layers = []; let opacity = 1;
      for (let e = el; e; e = e.parentElement) { const style = getComputedStyle(e); opacity *= Number(style.opacity);
        const c = rgba(style.backgroundColor); if (c[3] > 0) { layers.push(c); if (c[3] >= 1) break; } }
      let bg = [255, 255, 255];
      if (document.body.matches('.dark, .dark *') && !layers.some(l => l[3] >= 1)) bg = [0, 0, 0];
      for (const l of layers.reverse()) bg = over(l, bg, l[3]); return [bg, opacity]; };
  const bad = [], seen = [];
  for (const el of document.querySelectorAll(selectors)) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length || getComputedStyle(el).visibility === 'hidden') continue;
    const c = rgba(getComputedStyle(el).color); const [bg, opacity] = backdrop(el);
    const ink = over(c, bg, c[3] * opacity);
    const [a, b] = [light(ink), light(bg)]; const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    seen.push(ratio);
    if (ratio < 4.5) bad.push([el.className, el.textContent.slice(0, 30), ratio.toFixed(2)]);
  }
  return {bad, checked: seen.length};
}"""
OWN_TEXT = ("#sv-status *, #sv-tokens *, #sv-summary *, #sv-legend *, .sv-intro *")


def step_lines(page) -> int:
    """Visible tokens drawn with a line beside them (the drafts mode's step boundary)."""
    return page.evaluate("[...document.querySelectorAll('#sv-tokens .sv-output .tok')].filter(e => "
                         "e.getClientRects().length && getComputedStyle(e).boxShadow !== 'none').length")


def lanes(page):
    """The top of each step's lane in the token view, in order."""
    return page.evaluate("() => [...document.querySelectorAll('#sv-tokens .sv-step')]"
                         ".map(e => e.getBoundingClientRect().top)")


@pytest.fixture(scope="module")
def screens(browser, url):
    """A tab per screen, each after one run of PROMPT: the 1280x720 projector (light), the same in the dark
    theme, a 400 px phone. Console errors are collected."""
    contexts, tabs = [], {}
    for name, size, query in (("projector", (1280, 720), ""), ("dark", (1280, 720), "?__theme=dark"),
                              ("phone", (400, 800), "")):
        context = browser.new_context(viewport={"width": size[0], "height": size[1]})
        tab = context.new_page()
        tab.errors = []
        tab.on("console", lambda message, tab=tab: tab.errors.append(message.text) if message.type == "error" else None)
        tab.on("pageerror", lambda error, tab=tab: tab.errors.append(str(error)))
        tab.goto(url + query)
        tab.wait_for_selector("#sv-run", timeout=60_000)
        set_field(tab, "sv-prompt", PROMPT)
        set_field(tab, "sv-max-new", str(MAX_NEW))
        tab.get_by_text("Settings: models").click()  # closed again, as a visitor finds it
        run_and_wait(tab)
        tab.wait_for_selector("#sv-race-plot .js-plotly-plot .main-svg", timeout=30_000)
        tab.evaluate("window.scrollTo(0, 0)")
        contexts.append(context)
        tabs[name] = tab
    yield tabs
    for context in contexts:
        context.close()


def test_the_run_is_in_the_first_screen_of_a_projector(screens):
    tab = screens["projector"]
    output = tab.locator("#sv-tokens .sv-output").bounding_box()
    assert output["y"] + 150 < 720, output  # at least 150 px of tokens visible without scrolling
    for selector in ("#sv-run", "#sv-next", "#sv-mode", "#sv-status", "#sv-tokens .sv-story"):
        box = tab.locator(selector).bounding_box()
        assert box["y"] >= 0 and box["y"] + box["height"] <= 720, (selector, box)
    assert tab.locator("#sv-tokens .sv-story").text_content().startswith("Step ")


def test_answer_mode_hides_rejected_drafts_and_drafts_mode_shows_them(screens):
    tab = screens["projector"]
    rejected = tab.locator("#sv-tokens .sv-output .tok-rejected")
    assert rejected.count() > 0 and not any(rejected.nth(i).is_visible() for i in range(rejected.count()))
    assert step_lines(tab) == 0  # the answer reads as one text: no line where a step begins
    tab.locator("#sv-mode").get_by_text("drafts").click()
    tab.wait_for_function("document.body.dataset.svMode === 'drafts'")
    assert all(rejected.nth(i).is_visible() for i in range(rejected.count()))
    assert step_lines(tab) > 0
    tab.locator("#sv-mode").get_by_text("answer").click()
    tab.wait_for_function("document.body.dataset.svMode === 'answer'")
    assert step_lines(tab) == 0


def test_steps_mode_gives_each_step_its_own_lane(screens):
    tab = screens["projector"]
    steps = tab.locator("#sv-tokens .sv-step")
    tab.locator("#sv-mode").get_by_text("steps").click()
    tab.wait_for_function("document.body.dataset.svMode === 'steps'")
    tops = lanes(tab)
    assert len(tops) == steps.count() > 3
    assert all(later > earlier for earlier, later in zip(tops, tops[1:]))  # one lane a step, one under the other
    assert steps.nth(1).evaluate("el => getComputedStyle(el, '::before').content") == '"step 1"'
    lane = tab.locator("#sv-tokens .sv-step:has(.tok-rejected)").first  # drafts in a row, then the target's token
    assert lane.locator(".tok-resampled").count() == 1 and lane.locator(".tok-rejected").first.is_visible()
    tab.locator("#sv-mode").get_by_text("answer").click()


def test_a_phone_has_no_horizontal_scroll(screens):
    tab = screens["phone"]
    width = lambda: tab.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")  # noqa: E731
    assert width()[0] <= width()[1], width()
    tab.get_by_text("Settings: models").click()
    tab.wait_for_timeout(300)
    assert width()[0] <= width()[1], width()
    race, theory = (tab.locator(f"#{name}").bounding_box() for name in ("sv-race-plot", "sv-theory-plot"))
    assert race["width"] > 300 and theory["width"] > 300  # the charts stack, full width
    for box in ("sv-target", "sv-draft"):  # a model's name is not cut under the dropdown's arrow
        field = tab.locator(f"#{box} input").first
        assert field.evaluate("el => el.scrollWidth <= el.clientWidth"), (box, field.input_value())


COUNT_FRAMES = """window.svFrames = 0; const svRaf = window.requestAnimationFrame.bind(window);
window.requestAnimationFrame = (callback) => { window.svFrames++; return svRaf(callback); };"""


def idle_frames(browser, url, strip_script: bool) -> int:
    """requestAnimationFrame calls in 2 s of a loaded page nobody touches; strip_script: the page served
    without specviz.ui.frames' script (the control)."""
    from specviz.ui.frames import SCRIPT

    context = browser.new_context(viewport={"width": 1280, "height": 720})
    tab = context.new_page()
    try:
        tab.add_init_script(COUNT_FRAMES)
        if strip_script:
            def serve(route):
                response = route.fetch()
                assert SCRIPT in response.text()
                route.fulfill(response=response, body=response.text().replace(SCRIPT, ""))
            tab.route(url + "/", serve)
        tab.goto(url + "/")
        tab.wait_for_selector("#sv-run", timeout=60_000)
        tab.wait_for_timeout(6000)  # the page's own transitions done (longer on a busy machine)
        tab.evaluate("window.svFrames = 0")
        tab.wait_for_timeout(2000)
        return tab.evaluate("window.svFrames")
    finally:
        context.close()


def test_an_idle_page_does_not_draw_every_frame(browser, url):
    # gradio's loading tracker leaves a 60-a-second timer loop behind; each frame takes CPU from the engine
    assert idle_frames(browser, url, strip_script=True) > 60  # the control: gradio's page as it comes
    assert idle_frames(browser, url, strip_script=False) < 10


STEP_CHART_JS = """(chart) => {
    const svg = document.querySelector(chart + ' .main-svg'), page = svg.getBoundingClientRect();
    const panels = [...document.querySelectorAll(chart + ' .draglayer .nsewdrag')].map(r => r.getBoundingClientRect());
    const titles = chart + ' [class^="g-"][class$="title"] text, ' + chart + ' .annotation-text, ' + chart + ' .gtitle';
    const texts = [...document.querySelectorAll(titles)]
        .map(t => [t.textContent, t.getBoundingClientRect()]).filter(([, b]) => b.width > 0);
    const overlaps = [];
    texts.forEach(([a, p], i) => texts.slice(i + 1).forEach(([b, q]) => {
        if (p.left < q.right && q.left < p.right && p.top < q.bottom && q.top < p.bottom) overlaps.push([a, b]); }));
    return {panels: panels.map(b => [Math.round(b.width), Math.round(b.height)]), overlaps,
            cut: texts.filter(([, b]) => b.left < page.left - 1 || b.right > page.right + 1).map(([t]) => t)};
}"""


def step_chart_reads(tab, chart="#sv-step-plot") -> dict:
    """A chart's problems on this screen (the Steps chart's by default): panels under 200x100 px, titles that
    overlap, text cut at the chart's edges."""
    tab.wait_for_selector(f"{chart} .draglayer .nsewdrag", timeout=30_000)
    tab.wait_for_timeout(500)  # plotly's automargin redraw
    geometry = tab.evaluate(STEP_CHART_JS, chart)
    small = [panel for panel in geometry["panels"] if panel[0] < 200 or panel[1] < 100]
    return {"panels": len(geometry["panels"]), "small": small, "overlaps": geometry["overlaps"], "cut": geometry["cut"]}


def test_a_phone_reads_the_step_charts(screens, browser, url):
    assert step_chart_reads(screens["phone"]) == {"panels": 4, "small": [], "overlaps": [], "cut": []}
    # the control: the 2x2 grid a wide page loads with, run after its window has shrunk to a phone's
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    tab = context.new_page()
    try:
        tab.goto(url)
        tab.wait_for_selector("#sv-run", timeout=60_000)
        tab.wait_for_timeout(1000)  # the page's width reaches the server
        tab.set_viewport_size({"width": 400, "height": 800})
        set_field(tab, "sv-prompt", PROMPT)
        set_field(tab, "sv-max-new", str(MAX_NEW))
        run_and_wait(tab)
        grid = step_chart_reads(tab)
        assert grid["panels"] == 4 and len(grid["small"]) == 4, grid
    finally:
        context.close()


@pytest.mark.parametrize("screen", ["projector", "dark"])
def test_text_contrast_over_the_apps_own_text(screens, screen):
    tab = screens[screen]
    assert tab.evaluate("document.body.matches('.dark, .dark *')") == (screen == "dark")
    for mode in ("answer", "drafts"):
        tab.locator("#sv-mode").get_by_text(mode).click()
        tab.wait_for_function(f"document.body.dataset.svMode === '{mode}'")
        result = tab.evaluate(CONTRAST_JS, OWN_TEXT)
        assert result["checked"] > 50 and not result["bad"], result["bad"][:10]
    chart = tab.evaluate("""() => { const svg = document.querySelector('#sv-race-plot .main-svg');
        return [getComputedStyle(svg).backgroundColor, getComputedStyle(svg.querySelector('.xtick text')).fill]; }""")
    assert chart[0] == "rgba(0, 0, 0, 0)"  # the chart shows the page's background, light or dark
    channels = [int(c) for c in chart[1][chart[1].index("(") + 1:-1].split(",")[:3]]
    assert (min(channels) > 200) if screen == "dark" else (max(channels) < 120), chart  # its text follows the theme


def test_presentation_mode_enlarges_the_tokens_and_their_marks(screens):
    tab = screens["projector"]
    style = ("() => { const s = getComputedStyle(document.querySelector('#sv-tokens .tok-accepted'));"
             " return [parseFloat(s.fontSize), parseFloat(s.textDecorationThickness)]; }")
    size, mark = tab.evaluate(style)
    tab.get_by_text("Settings: models").click()
    tab.locator("#sv-present input").check()
    tab.wait_for_function("document.body.classList.contains('sv-present')")
    bigger, thicker = tab.evaluate(style)
    assert bigger >= 1.4 * size and thicker >= 2 * mark
    tab.locator("#sv-present input").uncheck()
    tab.get_by_text("Settings: models").click()


def test_no_script_errors_on_any_screen(screens):
    for name, tab in screens.items():
        assert not [e for e in tab.errors if "i18n" not in e], (name, tab.errors)


def test_a_fast_replay_shows_every_step(screens):
    tab = screens["projector"]
    steps = tab.locator("#sv-tokens .sv-step").count()
    set_field(tab, "sv-replay-speed", "0.1")
    tab.get_by_text("Settings: models").click()
    tab.evaluate("""() => { window.svSeen = new Set(); new MutationObserver(() => window.svSeen.add(
        document.querySelectorAll('#sv-tokens .sv-step').length)).observe(document.querySelector('#sv-tokens'),
        {childList: true, subtree: true}); }""")
    tab.click("#sv-replay")
    tab.wait_for_function(f"window.svSeen.has({steps}) && window.svSeen.size >= {steps}", timeout=60_000)
    assert tab.evaluate("[...window.svSeen].sort((a, b) => a - b)") == list(range(1, steps + 1))


def test_a_run_is_asked_for_after_two_frames_or_in_a_hidden_tab_after_a_fifth_of_a_second(page):
    """AFTER_PAINT passes the event's inputs on unchanged once the browser has drawn two frames; a tab that
    draws none (hidden) still gets its run, 0.2 s later. Each case takes the other path away, so that what
    passes the inputs on is known, not guessed from a time."""
    from specviz.ui.run_tab import AFTER_PAINT

    passed_on = """async ([frames]) => {
        const wait = window.setTimeout.bind(window);
        if (frames) window.setTimeout = () => 0;  // only the frames can pass the inputs on
        else window.requestAnimationFrame = () => 0;  // a hidden tab: no frames
        const start = performance.now();
        const inputs = await Promise.race([(%s)("prompt", 4, true), new Promise(go => wait(() => go("never"), 5000))]);
        return [inputs, performance.now() - start];
    }""" % AFTER_PAINT
    inputs, _ = page.evaluate(passed_on, [True])
    assert inputs == ["prompt", 4, True]
    page.reload()
    page.wait_for_selector("#sv-run", timeout=60_000)
    inputs, waited_ms = page.evaluate(passed_on, [False])
    assert inputs == ["prompt", 4, True] and waited_ms >= 190


def output_text(tab) -> str:
    """The token view's output as the reader sees it (hidden parts left out)."""
    return tab.locator("#sv-tokens .sv-output").inner_text()


def test_the_answer_reads_as_text_and_the_drafts_show_the_marks(screens):
    tab = screens["projector"]  # PROMPT: a rejected newline draft, then the end of text accepted
    tab.locator("#sv-mode").get_by_text("answer").click()  # whatever mode an earlier test left
    tab.wait_for_function("document.body.dataset.svMode === 'answer'")
    answer = output_text(tab)
    assert "<|im_end|>" not in answer and "⏎" not in answer and "·" not in answer
    from specviz.ui.render import END_MARK

    assert answer.rstrip().endswith(END_MARK) and "lazy dog." in answer
    tab.locator("#sv-mode").get_by_text("drafts").click()
    tab.wait_for_function("document.body.dataset.svMode === 'drafts'")
    drafts = output_text(tab)
    assert "<|im_end|>" in drafts and "⏎" in drafts and END_MARK not in drafts
    tab.locator("#sv-mode").get_by_text("answer").click()
    tab.wait_for_function("document.body.dataset.svMode === 'answer'")


TIP_INK = (31, 31, 31)  # the tip's background, #1f1f1f


def tip_rows(tab, token) -> int:
    """Rows of the tip's dark box on the screen around a hovered token: the tip is three lines tall (~60 px);
    a tip clipped by the token view shows a few rows at most."""
    import io

    import numpy
    from PIL import Image

    token.scroll_into_view_if_needed()
    box = token.bounding_box()
    token.hover()
    tab.wait_for_timeout(200)
    top = max(0, box["y"] - 120)
    shot = tab.screenshot(clip={"x": box["x"], "y": top, "width": 260, "height": box["y"] - top + box["height"] + 120})
    pixels = numpy.asarray(Image.open(io.BytesIO(shot)).convert("RGB")).astype(int)
    dark = (numpy.abs(pixels - numpy.array(TIP_INK)).max(axis=2) <= 8).mean(axis=1)
    tab.mouse.move(0, 0)
    return int((dark > 0.3).sum())


def test_a_first_line_tokens_tip_is_shown_whole(screens):
    tab = screens["projector"]
    first = tab.locator("#sv-tokens .sv-output .tok:not(.tok-rejected)").first  # shown in the answer mode
    assert tip_rows(tab, first) >= 45


def test_the_speedup_and_tau_are_in_the_first_screen(screens):
    tab = screens["projector"]
    status = tab.locator("#sv-status")
    box = status.bounding_box()
    assert box["y"] + box["height"] <= 720
    speedup = tab.locator("#sv-summary .sv-tile .sv-big").first.inner_text()  # the summary card's, lower down
    assert speedup.endswith("×") and speedup in status.inner_text() and "τ = " in status.inner_text()


def test_a_phone_reads_the_inspectors_titles(screens):
    tab = screens["phone"]
    tab.locator("#sv-inspector").scroll_into_view_if_needed()
    reads = step_chart_reads(tab, "#sv-inspector")
    assert reads["panels"] >= 1 and reads["overlaps"] == [] and reads["cut"] == [], reads


def test_two_quick_clicks_on_next_step_take_two_steps(page):
    set_field(page, "sv-prompt", PROMPT)
    set_field(page, "sv-max-new", str(MAX_NEW))
    page.locator("#sv-settings").get_by_text("step mode").click()
    page.click("#sv-run")
    page.wait_for_selector("#sv-status:has-text('paused before the first step')", timeout=240_000)
    # a person's double click: the second 150 ms after the first, while its step is pending
    page.evaluate("() => { const next = document.querySelector('#sv-next'); next.click(); "
                  "setTimeout(() => next.click(), 150); }")
    page.wait_for_selector("#sv-status:has-text('Paused after step 1')", timeout=120_000)
    page.wait_for_timeout(1000)  # a third step would show by now
    assert page.locator("#sv-tokens .sv-step").count() == 2
    assert "Paused after step 1" in page.locator("#sv-status").inner_text()
