"""Inputs in a real browser: a number typed outside a slider's range is set to the slider's end, the box shows the
value used and a line under it says so; an error lands in view. The session's server and browser (conftest.py)."""
import pytest

from specviz.settings import BOUNDS
from ui_server import require_chromium

require_chromium()
pytest.importorskip("playwright.sync_api")


@pytest.fixture
def page(chromium, app_url):
    context = chromium.new_context(viewport={"width": 1280, "height": 720})
    tab = context.new_page()
    tab.goto(app_url)
    tab.wait_for_selector("#sv-run", timeout=60_000)
    yield tab
    context.close()


def test_a_typed_value_outside_the_range_is_shown_as_the_value_used_with_a_line(page):
    page.get_by_text("Settings: models").click()
    box = page.locator("#sv-gamma input[type=number]")
    box.wait_for(state="visible")
    high = BOUNDS["gamma"].top()
    assert box.get_attribute("max") == str(high)  # the slider is built from the table the API checks
    box.fill("1000")
    box.press("Tab")
    page.wait_for_selector("#sv-gamma .sv-range-note", timeout=10_000)
    assert box.input_value() == str(high)
    assert f"takes 1 to {high}: 1000 was set to {high}" in page.locator("#sv-gamma .sv-range-note").inner_text()
    # the control: a value in range is left as typed, with no line
    tree = page.locator("#sv-tree input[type=number]")
    tree.fill("5")
    tree.press("Tab")
    page.wait_for_timeout(300)
    assert tree.input_value() == "5" and page.locator("#sv-tree .sv-range-note").count() == 0


def test_an_empty_prompts_message_is_brought_into_the_first_screen(page):
    page.get_by_text("Settings: models").click()
    page.locator("#sv-gamma").wait_for(state="visible")
    page.locator("#sv-prompt textarea").fill("")
    page.click("#sv-run")
    error = page.locator("#sv-status .sv-error")
    error.wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    top, bottom = page.evaluate("() => { const b = document.querySelector('#sv-status .sv-error')"
                                ".getBoundingClientRect(); return [b.top, b.bottom]; }")
    assert 0 <= top and bottom <= 720, (top, bottom)
    assert "empty" in error.inner_text()
