"""The inspector's browser (tests/integration/test_inspector.py, scripts/inspector_screenshots.py):
Debian's Chromium (``scripts/install-browser.sh``) driven by Playwright for Python, never a browser
Playwright downloads; and the data the inspector is shown with: the sample graph, a conversation,
a record written to attack the page, and keys of each kind."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from hrt.cli import sample_data_path

CHROMIUM_NAMES = ("chromium", "chromium-browser")
# what the XSS check writes: each would run script if the page rendered data as HTML
XSS_CONTENT = '<img src=x onerror="window.__xss = 1"><script>window.__xss = 2</script>'
XSS_TITLE = "<img src=x onerror=window.__xss=3>"
XSS_CONCEPT = "<svg onload=window.__xss=4>"
SESSION = "lisbon-trip"
CONVERSATION = [
    {"role": "user", "name": "Maya", "content": "We're flying to Lisbon on May 12 for the conference."},
    {"role": "assistant", "name": "Bot", "content": "Lisbon in May sounds great."},
    {"role": "user", "name": "Maya", "content": "We moved the Lisbon flight to June 2, the venue changed."},
    {"role": "assistant", "name": "Bot", "content": "Noted, June 2."},
]
CONVERSATION = [{**m, "index": i, "timestamp": f"2026-01-{i + 1:02d}T10:00:00Z"} for i, m in enumerate(CONVERSATION)]


def chromium_path() -> str:
    """The system's Chromium (or ``$CHROMIUM``); missing, a failure in CI (``CI`` set) and a skip
    elsewhere."""
    found = os.environ.get("CHROMIUM") or next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    if found is None:
        message = "no chromium on PATH: `make install-test` installs Debian's (scripts/install-browser.sh)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@contextmanager
def browser_page(base_url: str, **context: Any) -> Iterator[Any]:
    """A fresh page (its own session storage) in headless Chromium; errors of the page's scripts
    and its console are collected on ``page.problems``."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("playwright is missing: pip install -e '.[test]'")
        pytest.skip("playwright is missing: pip install -e '.[test]'")
    executable = chromium_path()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True, args=["--disable-gpu"])
        try:
            ctx = browser.new_context(base_url=base_url, **context)
            page = ctx.new_page()
            page.set_default_timeout(60_000)
            problems: list[str] = []
            page.on("pageerror", lambda exc: problems.append(f"pageerror: {exc}"))
            page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}"))
            page.problems = problems
            yield page
            ctx.close()
        finally:
            browser.close()


def load_inspector_data(client: httpx.Client, *, hostile: bool = True) -> dict[str, str]:
    """The sample graph, one conversation of u-maya, the hostile records (unless ``hostile`` is
    false); returns the keys' tokens by name: maya (retrieve, read and export, u-maya),
    maya-retrieve (retrieve only), tom (retrieve, u-tom)."""
    r = client.post(
        "/v1/ingest", content=sample_data_path().read_bytes(), headers={"content-type": "application/x-ndjson"}
    )
    assert r.status_code == 200, r.text
    attacks = [
        {
            "kind": "memory_unit",
            "user_id": "u-maya",
            "muid": "maya-xss",
            "title": XSS_TITLE,
            "content": XSS_CONTENT + " Phoenix launch checklist",
            "creation_ts": "2025-11-20T10:00:00Z",
            "tags": ["<b>tag</b>"],
        },
        {"kind": "concept", "user_id": "u-maya", "id": "maya-c-xss", "name": XSS_CONCEPT, "description": XSS_CONTENT},
        {"kind": "relation", "user_id": "u-maya", "type": "MENTIONS", "source": "maya-xss", "target": "maya-c-xss"},
        {"kind": "relation", "user_id": "u-maya", "type": "MENTIONS", "source": "maya-xss", "target": "maya-c-phoenix"},
    ]
    if hostile:
        r = client.post("/v1/ingest", json={"records": attacks})
        assert r.status_code == 200, r.text
    conversation = {"user_id": "u-maya", "session_id": SESSION, "agent_id": "standup-bot", "messages": CONVERSATION}
    r = client.post("/v1/conversations", json=conversation)
    assert r.status_code == 200, r.text
    keys = {}
    for name, scopes, users in [
        ("maya", ["retrieve", "read", "export"], ["u-maya"]),
        ("maya-retrieve", ["retrieve"], ["u-maya"]),
        ("tom", ["retrieve"], ["u-tom"]),
    ]:
        made = client.post("/v1/keys", json={"name": f"inspector-{name}", "scopes": scopes, "users": users})
        assert made.status_code == 201, made.text
        keys[name] = made.json()["key"]
    return keys


def log_in(page: Any, key: str, user: str) -> None:
    page.goto("/ui")
    page.fill("#key", key)
    page.fill("#user", user)
    page.click("#login button[type=submit]")


def save(page: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
