"""What a class sees before, during and after a run, in a real browser (as tests/test_ui_browser.py: Debian's
chromium through Playwright, the app served by tests/ui_server.py): the run controls show only when they mean
something; every lesson is reachable at 1280 px and on a 390 px phone; lesson 1's lanes are every step its
table lists; a lesson's status line counts n of N while it runs; example labels and the inspector's title are
whole. The session's server and browser (conftest.py)."""
import re

import pytest

from specviz.lessons.catalogue import LESSONS
from specviz.ui.learn import tab_title
from ui_server import require_chromium

require_chromium()
pytest.importorskip("playwright.sync_api")
BY_KEY = {lesson.key: lesson for lesson in LESSONS}

CONTROLS = ("#sv-stop", "#sv-pause", "#sv-next", "#sv-resume", "#sv-replay")
PROMPT = "Repeat this sentence: The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def url(app_url):
    return app_url


@pytest.fixture(scope="module")
def browser(chromium):
    return chromium


def open_page(browser, url, width=1280, height=800):
    tab = browser.new_context(viewport={"width": width, "height": height}).new_page()
    tab.goto(url)
    tab.wait_for_selector("#sv-run", timeout=60_000)
    return tab


def shown(tab) -> set[str]:
    return {selector for selector in CONTROLS if tab.locator(selector).is_visible()}


def set_field(tab, elem_id, value):
    field = tab.locator(f"#{elem_id} textarea, #{elem_id} input").first
    if not field.is_visible():
        tab.get_by_text("Settings: models").click()
        field.wait_for(state="visible")
    field.fill(value)
    field.press("Tab")


def test_the_run_controls_show_only_when_they_mean_something(browser, url):
    tab = open_page(browser, url)
    assert shown(tab) == set()  # before any run: nothing to stop, pause, step, resume or replay
    set_field(tab, "sv-prompt", PROMPT)
    set_field(tab, "sv-max-new", "16")
    tab.locator("#sv-settings").get_by_text("step mode").click()
    tab.click("#sv-run")
    tab.wait_for_selector("#sv-status:has-text('paused before the first step')", timeout=240_000)
    tab.wait_for_timeout(300)
    assert shown(tab) == {"#sv-stop", "#sv-next", "#sv-resume"}
    tab.click("#sv-resume")
    tab.wait_for_selector("#sv-status .sv-ok", timeout=240_000)
    tab.wait_for_timeout(300)
    assert shown(tab) == {"#sv-next", "#sv-replay"}  # done: walk it step by step, or replay it
    tab.locator("#sv-inspector .gtitle").wait_for(timeout=30_000)
    assert inspector_title_clear_of_its_label(tab)
    tab.context.close()


def test_every_lesson_is_in_the_bar_at_1280_px_and_in_the_picker_on_a_phone(browser, url):
    tab = open_page(browser, url)
    tab.get_by_role("tab", name="Learn").click()
    for lesson in LESSONS:
        assert tab.get_by_role("tab", name=tab_title(lesson)).is_visible(), lesson.key  # none behind the "..." menu
    assert not tab.locator("#sv-learn-pick").is_visible()  # the bar is enough here
    tab.context.close()
    phone = open_page(browser, url, 390, 844)
    tabs = phone.locator("#sv-tab-pick")  # the bar shows two tabs there: the row lists every one
    for title in ("Run", "Compare methods", "Cost curve", "Batch", "Learn", "API"):
        assert tabs.get_by_text(title, exact=True).is_visible(), title
    tabs.get_by_text("Learn", exact=True).click()
    picker = phone.locator("#sv-learn-pick")
    picker.wait_for(state="visible", timeout=30_000)
    for lesson in LESSONS:
        assert picker.get_by_text(tab_title(lesson)).is_visible(), lesson.key
    picker.get_by_text(tab_title(BY_KEY["bugs"])).click()
    phone.locator("#sv-learn-bugs").wait_for(state="visible", timeout=30_000)
    assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    phone.context.close()


def test_lesson_1_lanes_are_every_step_its_table_lists_and_the_status_counts(browser, url):
    tab = open_page(browser, url)
    tab.get_by_role("tab", name="Learn").click()
    tab.get_by_role("tab", name=tab_title(BY_KEY["mechanic"])).click()
    tab.evaluate("""() => { window.svSaid = []; new MutationObserver(() => {
        const s = document.querySelector('#sv-learn-mechanic-status'); if (s) window.svSaid.push(s.innerText); })
        .observe(document.body, {childList: true, subtree: true, characterData: true}); }""")
    tab.click("#sv-learn-mechanic")
    tab.wait_for_selector("#sv-learn-mechanic-status .sv-ok", timeout=240_000)
    said = tab.evaluate("window.svSaid")
    assert any(re.search(r"Measuring: \d+ steps so far", text) for text in said), said
    assert re.search(r"Done in \d+", tab.inner_text("#sv-learn-mechanic-status"))
    lanes = tab.locator("#sv-learn-mechanic-view .sv-step")
    forwards = re.search(r"(\d+) forwards of the target", tab.inner_text("#sv-learn-mechanic-sentence")).group(1)
    assert lanes.count() == int(forwards) > 2  # a lane a step, as the table has a row a step
    output = tab.locator("#sv-learn-mechanic-view .sv-output")
    # every lane is on the page, none hidden behind a scroll bar of the output box
    assert output.evaluate("el => el.scrollHeight <= el.clientHeight + 1")
    tab.context.close()


def test_example_labels_are_whole(browser, url):
    """Gradio cuts an example's label past 60 characters ("..."): every label is shown as written, and not
    clipped by the page either."""
    from specviz.ui.assets import examples

    labels = [example["label"] for example in examples()]
    for width in (1280, 390):
        tab = open_page(browser, url, width, 844)
        tab.get_by_text("Settings: models").click()
        tab.locator("#sv-settings button.gallery-item").first.wait_for(state="visible")
        shown_labels = tab.evaluate("""() => [...document.querySelectorAll('#sv-settings button.gallery-item')]
            .map(b => [b.innerText.trim(), b.scrollWidth <= b.clientWidth + 1])""")
        assert [text for text, _ in shown_labels] == labels, width
        assert all(whole for _, whole in shown_labels), (width, shown_labels)
        tab.context.close()


def inspector_title_clear_of_its_label(tab) -> bool:
    """The inspector's chart title starts below the page's label on the chart's corner."""
    return tab.evaluate("""() => { const el = document.querySelector('#sv-inspector');
        const label = el.querySelector('[data-testid=block-label]').getBoundingClientRect();
        const title = el.querySelector('.gtitle').getBoundingClientRect();
        return title.top >= label.bottom - 1 || title.left >= label.right; }""")
