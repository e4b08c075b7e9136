"""The figure tables at a 1280x720 projector, in a real browser (as tests/test_ui_browser.py: Debian's chromium
through Playwright, the app served by tests/ui_server.py): every column of the Compare table and of lesson 4's
table is in sight without scrolling sideways, and no header breaks inside a word, once each holds figures: a
short Compare (8 tokens: plain, n-gram, retrieval) and lesson 4's saved H100 run."""
from pathlib import Path

import pytest

from scripts.lesson_screenshots import open_tab
from ui_server import require_chromium

require_chromium()
pytest.importorskip("playwright.sync_api")

# (scrolls sideways: any element in the table that is wider than its box and lets it scroll or cuts it,
#  headers broken inside a word: a word of a header cell laid out on more than one line)
LAYOUT = """(root) => {
    const cut = [...root.querySelectorAll('*')].filter(el => {
        const style = getComputedStyle(el);
        return el.scrollWidth > el.clientWidth + 1 && ['auto', 'scroll', 'hidden'].includes(style.overflowX)
            && el.clientWidth > 0 && el.innerText.trim() !== '';  // gradio's empty sizing cells clip nothing
    }).map(el => `${el.tagName}.${el.className} ${el.scrollWidth}>${el.clientWidth}`);
    const broken = [];
    for (const th of root.querySelectorAll('thead th')) {
        const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            for (const match of node.textContent.matchAll(/\\S+/g)) {
                const range = document.createRange();
                range.setStart(node, match.index);
                range.setEnd(node, match.index + match[0].length);
                const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
                if (lines.size > 1) broken.push(match[0]);
            }
        }
    }
    return {cut, broken, headers: [...root.querySelectorAll('thead th')].map(th => th.innerText.trim())};
}"""


@pytest.fixture(scope="module")
def page(app_url, chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 720})
    tab = context.new_page()
    tab.goto(app_url)
    tab.wait_for_selector("#sv-run", timeout=60_000)
    yield tab
    context.close()


def rows_shown(page, elem_id: str, rows: int, timeout: int) -> None:
    """Wait until the table holds `rows` rows of figures (its grid counts the header row too)."""
    page.wait_for_function(f"() => +document.querySelector('#{elem_id} [role=grid]')?.getAttribute('aria-rowcount') "
                           f"> {rows}", timeout=timeout)


def layout_of(page, elem_id: str) -> dict:
    table = page.locator(f"#{elem_id}")
    table.locator("thead th").first.wait_for(state="visible", timeout=30_000)
    page.wait_for_timeout(500)  # gradio sizes its columns after the first paint
    return table.evaluate(LAYOUT)


ROOT = Path(__file__).resolve().parents[1]
SAVED_LESSON_4 = ROOT / "results" / "2026-11-27-h100-lessons" / "lesson-4-acceptance.json"


def test_the_compare_table_shows_every_column_at_1280_px(page):
    page.get_by_text("Settings: models").click()
    field = page.locator("#sv-max-new input").first
    field.wait_for(state="visible")
    field.fill("8")
    field.press("Enter")
    page.get_by_role("tab", name="Compare methods").click()
    for method in ("draft", "ngram", "retrieval"):
        box = page.locator("#sv-compare-methods").get_by_label(method, exact=True)
        if box.is_checked() != (method != "draft"):
            box.click()
    page.click("#sv-compare")
    rows_shown(page, "sv-compare-table", 3, 300_000)
    layout = layout_of(page, "sv-compare-table")
    assert "same as plain" in " ".join(layout["headers"])  # the control: the last column is there to be seen
    assert layout["cut"] == [] and layout["broken"] == []


def test_lesson_4s_table_shows_every_column_without_breaking_a_word_at_1280_px(page):
    page.get_by_role("tab", name="Learn").click()
    page.get_by_text("Open a saved run (measured elsewhere").click()
    page.locator("#sv-learn-saved input[type=file]").set_input_files([str(SAVED_LESSON_4)])
    page.wait_for_selector("#sv-learn-saved-status .sv-saved", timeout=30_000)
    open_tab(page, "4 · Acceptance")
    rows_shown(page, "sv-learn-acceptance-table", 3, 30_000)
    layout = layout_of(page, "sv-learn-acceptance-table")
    assert any("literature" in h for h in layout["headers"])
    assert layout["cut"] == [] and layout["broken"] == []
