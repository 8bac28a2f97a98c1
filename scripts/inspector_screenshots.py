"""Screenshots of each view of the inspector (/ui) into docs/img/inspector-*.png, and docs/inspector.md
that shows them: a real ``hrt serve`` (embedded, a fresh store in a temporary folder) with the sample
graph and one conversation, in Debian's headless Chromium driven by Playwright
(``make inspector-screenshots``; ``scripts/install-browser.sh`` installs the browser).

docs/inspector.md is written from :data:`VIEWS` by :func:`inspector_markdown` (a test keeps the
committed file equal to it); the pictures are whatever the page showed.

    python scripts/inspector_screenshots.py [--out docs]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

AS_OF = "2025-12-31T00:00:00Z"

# (file stem, heading, what the view answers); the order of docs/inspector.md
VIEWS: list[tuple[str, str, str]] = [
    (
        "login",
        "Log in",
        "The page asks for an API key and a user id. The key stays in the tab's session storage (never in a "
        "URL, gone when the tab closes) and goes to this server only, as `Authorization: Bearer`.",
    ),
    (
        "memory",
        "A user's memory",
        "Counts per kind (`GET /v1/users/{u}/stats`); *search by meaning* runs the question in the playground "
        "(below); then the entities a page at a time with every filter of `GET /v1/users/{u}/entities`: kind, "
        "tags, agents, creation time, `valid_at`, ended and superseded included or not; *search titles* is the "
        "title prefix. A key without the `read` scope sees ids and titles only, and the page says so.",
    ),
    (
        "entity",
        "One entity",
        "The record as ingested, who wrote it (the key id) and when, its validity as a timeline with what it "
        "replaced and what replaced it, its relations both ways, and for a concept the messages and notes "
        "that mention it (`GET /v1/users/{u}/entities/{kind}/{id}`).",
    ),
    (
        "retrieve",
        "The retrieval playground",
        "Key phrases or a question, a preset, `as_of` and `valid_at`, the depth and the limits, sent to "
        "`POST /v1/retrieve`. Each item shows its score breakdown as bars (term × weight), how it was found "
        "as a small graph (phrase → seed → hops → item), its validity; then what was set aside and why "
        "(suppressed as no longer true, near-duplicates, the relevance gate, unmatched phrases, what the "
        "budget left out) and the rendered prompt text with its token count.",
    ),
    (
        "conversation",
        "A conversation",
        "A session's messages in order (their memory units, `msg:<session>:<position>`), each with the "
        "concepts it linked, the facts it changed (what it supersedes) and the facts derived from it.",
    ),
    (
        "forbidden",
        "A key for another user",
        "Every view reads through the API with the key given, so a key that does not act for the user gets "
        "the API's 403, shown as it came; the page itself holds no data.",
    ),
]

FOOTER = """
## Safe by construction

- The page is static files shipped in the package (`hrt/ui/`: ES modules and one stylesheet, no build
  step), served at `/ui` by `hrt serve` in both deployments without a key: they hold no data. Every
  answer under `/ui` carries `Content-Security-Policy: {csp}`: no inline script or style, no other
  origin, no framing.
- Everything the page shows from the API is written as text (`textContent`, DOM nodes); nothing is
  parsed as HTML. A test writes a memory unit whose content is `<img src=x onerror=...>` and checks
  that the page shows those characters and runs nothing.
- The page adds no route: it reads `GET /v1/users/{{u}}/stats`, `.../entities`, `.../entities/{{kind}}/{{id}}`,
  `.../export` and `POST /v1/retrieve`, each checking the key's scope and users as for any client.
  Export needs the `export` scope; whole records in the browse list need `read`.

Tested in a real browser (`tests/integration/test_inspector.py`: Debian's headless Chromium driven by
Playwright against a real `hrt serve` with the sample graph). These pictures are made by
`make inspector-screenshots` (`scripts/inspector_screenshots.py`), which also writes this page.
"""


def inspector_markdown() -> str:
    """docs/inspector.md, from :data:`VIEWS`."""
    from hrt.api.ui import CONTENT_SECURITY_POLICY

    lines = [
        "# The inspector: `/ui`",
        "",
        "`hrt serve`, then open `http://127.0.0.1:8080/ui` and paste a key: what does the agent remember "
        "about X, since when, and why did it pick this, without reading JSON. The views below are of the "
        "sample graph (`u-maya`) and one conversation.",
        "",
    ]
    for stem, heading, what in VIEWS:
        lines += [f"## {heading}", "", what, "", f"![{heading}](img/inspector-{stem}.png)", ""]
    return "\n".join(lines) + FOOTER.format(csp=CONTENT_SECURITY_POLICY)


def shoot(page: Any, base_url: str, keys: dict[str, str], img: Path) -> None:
    from tests.integration.inspector_browser import SESSION, log_in, save

    page.goto("/ui")
    page.fill("#user", "u-maya")
    save(page, img / "inspector-login.png")
    log_in(page, keys["maya"], "u-maya")
    page.wait_for_selector("#entities tr")
    page.fill("input[name=prefix]", "Phoenix")
    page.click("#browse button[type=submit]")
    page.wait_for_selector("#entities tr[data-id]")
    save(page, img / "inspector-memory.png")
    page.goto("/ui#/u/u-maya/e/concept/maya-c-pricing")
    page.wait_for_selector("[data-testid=relations]")
    save(page, img / "inspector-entity.png")
    page.goto("/ui#/u/u-maya/retrieve")
    page.fill("textarea[name=phrases]", "Phoenix pricing decision")
    page.fill("input[name=as_of]", AS_OF)
    page.check("input[name=include_invalidated]")
    page.fill("input[name=memory_units]", "3")
    page.fill("input[name=concepts]", "2")
    page.fill("input[name=artifacts]", "2")
    page.select_option("select[name=format]", "compact")
    page.fill("input[name=max_tokens]", "400")
    page.click("#retrieve button[type=submit]")
    page.wait_for_selector("[data-testid=rendered]")
    save(page, img / "inspector-retrieve.png")
    page.goto(f"/ui#/u/u-maya/c/{SESSION}")
    page.wait_for_selector("[data-testid=message]")
    save(page, img / "inspector-conversation.png")


def forbidden(base_url: str, keys: dict[str, str], img: Path) -> None:
    from tests.integration.inspector_browser import browser_page, log_in, save

    with browser_page(base_url, viewport={"width": 1280, "height": 600}) as page:
        log_in(page, keys["tom"], "u-maya")
        page.wait_for_selector("main [data-testid=error]")
        save(page, img / "inspector-forbidden.png")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="docs folder (default: docs/)")
    args = parser.parse_args()
    from tests.integration.conftest import start_hrt_server
    from tests.integration.inspector_browser import browser_page, load_inspector_data

    img = args.out / "img"
    img.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = start_hrt_server(Path(tmp) / "hrt.db", Path(tmp) / "server.log", timeout=600)
        try:
            with server.client(timeout=300) as client:
                keys = load_inspector_data(client, hostile=False)
            with browser_page(server.base_url, viewport={"width": 1280, "height": 900}) as page:
                shoot(page, server.base_url, keys, img)
            forbidden(server.base_url, keys, img)
        finally:
            server.stop()
    (args.out / "inspector.md").write_text(inspector_markdown(), encoding="utf-8")
    print(f"wrote {args.out / 'inspector.md'} and {len(VIEWS)} screenshots in {img}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
