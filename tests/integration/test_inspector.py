"""The inspector at /ui in a real browser: Debian's headless Chromium driven by Playwright against a
real ``hrt serve`` holding the sample graph, a conversation and records written to attack the page.

A user logs in with a key, sees the counts, browses and searches, opens an entity, runs a
retrieval and reads its rendered text, follows a conversation and exports; a key for another user
sees a 403; content that would run as HTML runs nowhere. What the page shows is compared with what
the API answers for the same request. Without a browser it skips, except in CI (``CI`` set): there
it fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hrt.api.ui import CONTENT_SECURITY_POLICY
from tests.integration.conftest import ServerProcess, start_hrt_server
from tests.integration.inspector_browser import (
    CONVERSATION,
    SESSION,
    XSS_CONCEPT,
    XSS_CONTENT,
    XSS_TITLE,
    browser_page,
    chromium_path,
    load_inspector_data,
    log_in,
)

pytestmark = pytest.mark.integration
AS_OF = "2025-12-31T00:00:00Z"


@pytest.fixture(scope="module")
def inspected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    chromium_path()  # no server started for nothing
    folder = tmp_path_factory.mktemp("inspector")
    server = start_hrt_server(folder / "hrt.db", folder / "server.log", timeout=300)
    try:
        with server.client(timeout=300) as client:
            keys = load_inspector_data(client)
        yield server, keys
    finally:
        server.stop()


def api(server: ServerProcess, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers={"authorization": f"Bearer {key}"}, timeout=120)


def items_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc["retrieved_memory_units"] + doc["retrieved_concepts"] + doc["retrieved_artifacts"]


def no_script_ran(page: Any) -> None:
    assert page.evaluate("window.__xss") is None
    assert page.locator("main img, main script, main svg[onload]").count() == 0
    assert not [p for p in page.problems if p.startswith("pageerror")]


def test_the_page_is_static_public_and_locked_down(inspected):
    server, _ = inspected
    page = httpx.get(f"{server.base_url}/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert csp == CONTENT_SECURITY_POLICY and "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in page.text  # no inline script: one module from this origin
    script = httpx.get(f"{server.base_url}/ui/app.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "content-security-policy" in script.headers
    # nothing else is opened without a key: data needs one, as before
    assert httpx.get(f"{server.base_url}/ui/../v1/users/u-maya/stats").status_code == 401
    assert httpx.get(f"{server.base_url}/ui/nothing.js").status_code == 401
    assert httpx.get(f"{server.base_url}/v1/users/u-maya/stats").status_code == 401


def test_log_in_see_the_counts_browse_search_and_open_an_entity(inspected):
    server, keys = inspected
    with api(server, keys["maya"]) as c:
        stats = c.get("/v1/users/u-maya/stats").json()
        found = c.get("/v1/users/u-maya/entities", params={"prefix": "Project Phoenix", "limit": 50}).json()["entities"]
        phoenix = c.get("/v1/users/u-maya/entities/concept/maya-c-phoenix", params={"relation_limit": 1000}).json()
    with browser_page(server.base_url) as page:
        log_in(page, keys["maya"], "u-maya")
        assert page.locator("[data-testid=count-memory_unit] .number").inner_text() == str(stats["memory_unit"])
        assert page.locator("[data-testid=count-concept] .number").inner_text() == str(stats["concept"])
        assert keys["maya"] not in page.url  # the key is in the tab's session storage, never in a URL
        assert page.evaluate("sessionStorage.getItem('hrt.inspector.key')") == keys["maya"]
        assert page.evaluate("localStorage.length") == 0
        page.wait_for_selector("#entities tr")
        page.fill("input[name=prefix]", "Project Phoenix")
        page.click("#browse button[type=submit]")
        page.wait_for_function(
            "n => document.querySelectorAll('#entities tr').length === n", arg=len(found), timeout=60_000
        )
        shown = page.locator("#entities tr").evaluate_all("rows => rows.map(r => r.dataset.id)")
        assert shown == [e["id"] for e in found] and "maya-c-phoenix" in shown
        page.click("#entities tr[data-id=maya-c-phoenix] a")
        page.wait_for_selector("[data-testid=relations]")
        assert page.locator("[data-testid=entity-title]").inner_text().endswith("Project Phoenix")
        assert page.locator("[data-testid=relations] tbody tr").count() == len(phoenix["relations"])
        assert page.locator("[data-testid='fact-version']").inner_text() == str(phoenix["version"])
        mentions = [r for r in phoenix["relations"] if r["type"] == "MENTIONS" and r["direction"] == "in"]
        assert page.locator("[data-testid=mentions] li").count() == len(mentions) > 0
        assert page.locator("[data-testid=mentions] li").filter(has_text=XSS_TITLE).count() == 1  # as text
        no_script_ran(page)


def test_a_superseded_fact_shows_what_replaced_it(inspected):
    server, keys = inspected
    with api(server, keys["maya"]) as c:
        ended = c.get("/v1/users/u-maya/entities", params={"include_invalidated": True, "limit": 500}).json()
        views = [c.get(f"/v1/users/u-maya/entities/{e['kind']}/{e['id']}").json() for e in ended["entities"][:200]]
    old = next(v for v in views if v["superseded_by"])
    with api(server, keys["maya"]) as c:
        newer = [c.get(f"/v1/users/u-maya/entities/{n['kind']}/{n['id']}").json() for n in old["superseded_by"]]
    with browser_page(server.base_url) as page:
        log_in(page, keys["maya"], "u-maya")
        page.wait_for_selector("#entities tr")
        page.goto(f"/ui#/u/u-maya/e/{old['kind']}/{old['id']}")
        timeline = page.locator("[data-testid=timeline]")
        timeline.wait_for()
        text = timeline.inner_text()
        assert "no longer true" in text and old["validity"]["valid_to"] in text
        for successor in newer:  # each successor with its own interval
            assert successor["title"] in text and successor["validity"]["valid_from"] in text


def test_a_retrieval_shows_its_items_scores_provenance_and_rendered_text(inspected):
    server, keys = inspected
    body = {
        "user_id": "u-maya",
        "key_phrases": ["Project Phoenix timeline", "team bandwidth"],
        "as_of": AS_OF,
        "limits": {"memory_units": 5, "concepts": 5, "artifacts": 3},
        "render": {"format": "markdown", "max_tokens": 1500, "tokenizer": "cl100k_base"},
    }
    with api(server, keys["maya"]) as c:
        doc = c.post("/v1/retrieve", json=body).json()
    items = doc["retrieved_memory_units"] + doc["retrieved_concepts"] + doc["retrieved_artifacts"]
    rendered = doc["retrieval_metadata"]["rendered"]
    with browser_page(server.base_url) as page:
        log_in(page, keys["maya"], "u-maya")
        page.wait_for_selector("#entities tr")
        page.click("#nav a:has-text('Retrieve')")
        page.fill("textarea[name=phrases]", "Project Phoenix timeline\nteam bandwidth")
        page.fill("input[name=as_of]", AS_OF)
        page.click("#retrieve button[type=submit]")
        page.wait_for_selector("[data-testid=rendered]")
        cards = page.locator("[data-testid=item]")
        assert cards.evaluate_all("cs => cs.map(c => c.dataset.id)") == [i.get("muid") or i["id"] for i in items]
        assert page.locator("[data-testid=summary]").inner_text() == doc["retrieval_summary"]
        first = cards.first
        assert first.locator(".term").count() == 4  # semantic, recency, salience, preference as bars
        width = first.locator(".term[data-term=semantic] .fill").evaluate("e => parseFloat(e.style.width)")
        assert width == pytest.approx(items[0]["score_breakdown"]["semantic"] * 100, abs=1e-3)
        assert first.locator("svg.provenance rect").count() == 2 + len(
            doc["retrieval_metadata"]["provenance"][items[0].get("muid") or items[0]["id"]]["hops"]
        )
        assert page.locator("[data-testid=rendered]").inner_text() == rendered["text"]
        assert (
            f"{rendered['budget']['used']} tokens (cl100k_base) of 1500"
            in page.locator("[data-testid=token-count]").inner_text()
        )
        assert page.locator("[data-testid=set-aside] li").count() >= 1
        no_script_ran(page)


def test_search_by_meaning_runs_the_question_in_the_playground(inspected):
    server, keys = inspected
    question = "when does the Phoenix beta start?"
    with api(server, keys["maya"]) as c:
        body = {"user_id": "u-maya", "query": question, "render": {"format": "markdown", "max_tokens": 1500}}
        doc = c.post("/v1/retrieve", json=body).json()
    expected = [i.get("muid") or i["id"] for i in items_of(doc)]
    # a seed the answer names is drawn by its title, as the page shortens it
    titles = {i.get("muid") or i["id"]: i.get("title") or i["name"] for i in items_of(doc)}
    provenance = doc["retrieval_metadata"]["provenance"]
    item, seed = next((i, p["seed_id"]) for i, p in provenance.items() if p["seed_id"] != i and p["seed_id"] in titles)
    label = titles[seed] if len(titles[seed]) <= 26 else titles[seed][:25] + "…"
    with browser_page(server.base_url) as page:
        log_in(page, keys["maya"], "u-maya")
        page.fill("input[name=meaning]", question)
        page.click("#meaning button[type=submit]")
        page.wait_for_selector("[data-testid=rendered]")
        assert page.input_value("input[name=query]") == question
        assert page.locator("[data-testid=item]").evaluate_all("cs => cs.map(c => c.dataset.id)") == expected
        card = page.locator(f"[data-testid=item][data-id='{item}']")
        assert card.locator("svg.provenance .node.seed + text").text_content() == label


def test_a_key_for_another_user_sees_a_403(inspected):
    server, keys = inspected
    with browser_page(server.base_url) as page:
        log_in(page, keys["tom"], "u-maya")
        error = page.locator("[data-testid=error]")
        error.wait_for()
        assert error.inner_text().startswith("403 forbidden")
        assert page.locator("[data-testid=count-memory_unit]").count() == 0
        with page.expect_response(lambda r: "/entities/concept/maya-c-phoenix" in r.url) as answered:
            page.goto("/ui#/u/u-maya/e/concept/maya-c-phoenix")
        assert answered.value.status == 403
        page.wait_for_function(
            "() => document.querySelector('main [data-testid=error]') && !document.querySelector('.loading')"
        )
        assert page.locator("[data-testid=error]").inner_text().startswith("403 forbidden")
        assert "Phoenix" not in page.locator("main").inner_text()


def test_a_retrieve_key_browses_ids_and_titles_and_still_opens_an_entity(inspected):
    server, keys = inspected
    with browser_page(server.base_url) as page:
        log_in(page, keys["maya-retrieve"], "u-maya")
        page.wait_for_selector("#entities tr")
        assert page.locator("[data-testid=browse-note]").inner_text().startswith("Ids and titles only")
        page.click("#entities tr[data-id=maya-c-phoenix] a")
        page.wait_for_selector("[data-testid=record]")
        assert "Project Phoenix" in page.locator("[data-testid=record] [data-field=name]").inner_text()
        page.click("[data-testid=export]")
        error = page.locator("#status [data-testid=error]")
        error.wait_for()
        assert error.inner_text().startswith("403 forbidden")  # no export scope: the route says so


def test_hostile_content_is_shown_as_text_and_runs_nothing(inspected):
    server, keys = inspected
    with browser_page(server.base_url) as page:
        log_in(page, keys["maya"], "u-maya")
        page.wait_for_selector("#entities tr")
        page.fill("input[name=prefix]", "<img")
        page.click("#browse button[type=submit]")
        page.wait_for_selector("#entities tr[data-id=maya-xss]")
        assert XSS_TITLE in page.locator("#entities tr[data-id=maya-xss]").inner_text()
        page.goto("/ui#/u/u-maya/e/memory_unit/maya-xss")
        page.wait_for_selector("[data-testid=record]")
        assert XSS_CONTENT in page.locator("[data-testid=record] [data-field=content]").inner_text()
        assert page.locator("[data-testid=relations]").filter(has_text=XSS_CONCEPT).count() == 1
        page.goto("/ui#/u/u-maya/retrieve")
        page.fill("textarea[name=phrases]", "Phoenix launch checklist")
        page.click("#retrieve button[type=submit]")
        page.wait_for_selector("[data-testid=rendered]")
        assert page.locator("[data-testid=item][data-id=maya-xss]").count() == 1
        no_script_ran(page)
        # and were a script injected, the policy would stop it: no inline script runs on this page
        page.evaluate(
            "() => { const s = document.createElement('script'); s.textContent = 'window.__xss = 9'; "
            "document.body.append(s); }"
        )
        assert page.evaluate("window.__xss") is None
        assert any("Content Security Policy" in p for p in page.problems)


def test_a_conversation_in_order_with_its_concepts_and_changes(inspected):
    server, keys = inspected
    with browser_page(server.base_url) as page:
        log_in(page, keys["maya"], "u-maya")
        page.wait_for_selector("#entities tr")
        page.click("#nav a:has-text('Conversations')")
        page.click(f"[data-testid=sessions] a:has-text('{SESSION}')")
        page.wait_for_selector("[data-testid=message]")
        messages = page.locator("[data-testid=message] .content").all_inner_texts()
        assert len(messages) == len(CONVERSATION)
        for shown, sent in zip(messages, CONVERSATION, strict=True):
            assert sent["content"] in shown
        shown = page.locator("[data-testid=message]")
        assert "Lisbon" in shown.nth(0).locator(".links").first.inner_text()  # the concepts it linked
        assert shown.nth(0).locator("[data-testid=changed]").count() == 0
        changed = shown.nth(2).locator("[data-testid=changed] a")  # the move replaces the first plan
        ids = shown.evaluate_all("ms => ms.map(m => m.dataset.id)")
        assert changed.evaluate_all("links => links.map(a => decodeURIComponent(a.hash.split('/').pop()))") == ids[:2]
        with api(server, keys["maya"]) as c:  # the note written from the first message, with its text
            first = c.get(f"/v1/users/u-maya/entities/memory_unit/{ids[0]}").json()
            (note,) = [r for r in first["relations"] if r["type"] == "DERIVED_FROM" and r["direction"] == "in"]
            text = c.get(f"/v1/users/u-maya/entities/{note['kind']}/{note['id']}").json()["record"]["content"]
        assert text in shown.nth(0).locator("[data-testid=derived]").inner_text()


def test_export_from_the_page_is_the_routes_export(inspected, tmp_path: Path):
    server, keys = inspected
    with api(server, keys["maya"]) as c:
        exported = c.get("/v1/users/u-maya/export").content
    with browser_page(server.base_url, accept_downloads=True) as page:
        log_in(page, keys["maya"], "u-maya")
        page.wait_for_selector("#entities tr")
        with page.expect_download() as download:
            page.click("[data-testid=export]")
        target = tmp_path / "u-maya.jsonl"
        download.value.save_as(target)
        assert target.read_bytes() == exported
        lines = exported.count(b"\n")
        assert page.locator("[data-testid=export-done]").inner_text().strip() == f"exported {lines} records ·"
