"""The stack's Chromium for the pages' tests: a page's HTML drawn at a laptop's width, its
screenshot kept in test-artifacts/ui."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
LAPTOP = {"width": 1366, "height": 768}  # the most common laptop screen


@contextmanager
def drawn(html: str, screenshot: str, viewport: dict = LAPTOP, full_page: bool = True):
    """A Playwright page showing `html`; its screenshot (the whole page, or the screen)
    saved as `screenshot` (a file name in test-artifacts/ui) once the block ends."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        try:
            page = browser.new_page(viewport=viewport)
            page.set_content(html)
            yield page
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / screenshot), full_page=full_page)
        finally:
            browser.close()
