"""A real browser on the app: Debian's chromium driven by Playwright for Python (never `playwright install`:
setup.sh --dev installs the chromium package). Types a prompt, presses Run, sees every token kind and a
chart, hovers a token, takes a screenshot; injection strings in the prompt and a model name show as text and
run nothing."""
import os
from pathlib import Path

import pytest

from specviz import DecodeSettings
from specviz.api import encode, make_proposer, run_once
from ui_server import serve_app

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PROMPT = "Repeat this sentence three times, word for word: The quick brown fox jumps over the lazy dog."
MAX_NEW = 48
INJECTIONS = ["${alert(1)}", "<img src=x onerror=alert(1)>", '<img src=x onerror="window.__pwned=1">']

if not Path(CHROMIUM).exists():
    message = f"{CHROMIUM} is missing: apt-get install chromium (bash setup.sh --dev does it as root)"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def url(default_target):
    with serve_app() as address:
        yield address


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


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


def test_closing_the_tab_ends_its_session(browser, url):
    import time

    from specviz.ui import live

    context = browser.new_context()
    tab = context.new_page()
    tab.goto(url)
    tab.wait_for_selector("#sv-run", timeout=60_000)
    set_field(tab, "sv-prompt", PROMPT)
    set_field(tab, "sv-max-new", "8")
    run_and_wait(tab)
    key = next(k for k, state in live._sessions.items() if state.run is not None and state.run.request.prompt == PROMPT
               and state.run.request.settings.max_new_tokens == 8)
    context.close()
    deadline = time.monotonic() + 30
    while key in live._sessions and time.monotonic() < deadline:
        time.sleep(0.2)
    assert key not in live._sessions  # gradio's unload event ran and dropped the session


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
