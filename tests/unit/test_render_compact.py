"""The compact rendering (``render.format`` ``compact``): no ids, scores or provenance; one line per
item with its date; the per-item cap; concepts only where they add something; facts no longer true
marked; a last line counting what is not shown."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from hrt.contract import DEFAULT_ITEM_CHARS, RenderOptions, RetrieveRequest
from hrt.extraction.ids import message_id
from hrt.extraction.messages import ConversationRequest
from hrt.ingest import parse_jsonl
from hrt.pipeline.compact import cap_text, names_in
from hrt.pipeline.render import render_context, token_counter
from hrt.prompts import render_second_pass
from hrt.records import note_id
from tests.helpers import concept, jsonl, mu, rel

AS_OF = "2025-08-01T00:00:00Z"
ALL = {"memory_units": 50, "concepts": 50, "artifacts": 50}


def request(user: str = "u1", phrases: tuple[str, ...] = ("Project Phoenix", "bandwidth"), **extra) -> RetrieveRequest:
    body = {"user_id": user, "key_phrases": list(phrases), "as_of": AS_OF, "limits": ALL}
    return RetrieveRequest.model_validate(body | extra)


def returned_ids(doc) -> list[str]:
    out = [m.muid for m in doc.retrieved_memory_units] + [c.id for c in doc.retrieved_concepts]
    return out + [a.id for a in doc.retrieved_artifacts]


async def test_compact_has_no_ids_scores_or_provenance_and_one_line_per_item(loaded_service):
    doc = await loaded_service.retrieve(request(render={"format": "compact", "max_chars": 100_000}))
    r = doc.retrieval_metadata.rendered
    assert r.format == "compact" and r.left_out == [] and r.truncated is None
    assert sorted(r.included + r.redundant) == sorted(returned_ids(doc))
    for ident in returned_ids(doc):
        assert ident not in r.text
    for m in doc.retrieved_memory_units + doc.retrieved_concepts + doc.retrieved_artifacts:
        assert f"{m.final_retrieval_score:.4f}" not in r.text
    assert "found by" not in r.text and "reached from" not in r.text and "###" not in r.text
    lines = r.text.splitlines()
    assert lines[0] == "Memory context (as of 2025-08-01), best match first."
    items = [x for x in lines[1:] if x.startswith("- ")]
    assert len(items) == len(r.included) and all(not x.startswith("(") for x in lines[1 : len(items) + 1])
    # memory units: "- [date] title: text", the full text
    assert "- [2025-06-10] Phoenix brainstorm: Brainstorm on Project Phoenix: timeline adjustments" in r.text
    assert "- Project Phoenix (project): Next-generation analytics platform due in December." in r.text
    assert "Properties: due: 2025-12-31; lead: Maya." in r.text
    assert r.budget.used == len(r.text)


async def test_compact_is_byte_identical_run_after_run_and_reports_its_fields_only_for_compact(loaded_service):
    body = request(render={"format": "compact", "max_tokens": 120})
    first, again = await loaded_service.retrieve(body), await loaded_service.retrieve(body)
    assert first.canonical_json() == again.canonical_json()
    assert '"shortened":' in first.canonical_json() and '"redundant":' in first.canonical_json()
    markdown = (await loaded_service.retrieve(request(render={"max_chars": 900}))).canonical_json()
    assert '"shortened"' not in markdown and '"redundant"' not in markdown  # the other formats' bytes as before


@pytest.mark.parametrize("limit", [60, 100, 160, 250, 400])
async def test_a_token_budget_is_a_greedy_prefix_counted_in_the_last_line(loaded_service, limit):
    full = (await loaded_service.retrieve(request(render={"format": "compact"}))).retrieval_metadata.rendered
    r = (
        await loaded_service.retrieve(request(render={"format": "compact", "max_tokens": limit}))
    ).retrieval_metadata.rendered
    assert r.budget.used == token_counter("cl100k_base")(r.text) <= limit
    assert r.included == full.included[: len(r.included)]
    assert sorted(r.included + r.left_out + r.redundant) == sorted(full.included + full.redundant)
    if r.left_out:
        n = len(r.left_out)
        assert r.text.rstrip().endswith(".)") and f"{n} more item{'s' if n > 1 else ''} over the budget" in r.text
    if r.truncated:
        assert r.truncated == r.included[-1] and " …\n" in r.text and "the rest of 1 long item" in r.text


async def test_one_huge_message_no_longer_takes_the_whole_budget(hashing_service):
    huge = ("Kyoto temples Kyoto " * 5000)[:95_000]
    records = [
        mu("u9", "big", huge, "2025-06-01T09:00:00Z", title=""),
        mu("u9", "small1", "We booked the Kyoto ryokan for April.", "2025-06-02T09:00:00Z", title=""),
        mu("u9", "small2", "Kyoto in April means cherry blossoms.", "2025-06-03T09:00:00Z", title=""),
    ]
    await hashing_service.ingest(parse_jsonl(jsonl(records)))
    ask = {"user_id": "u9", "key_phrases": ["Kyoto"], "as_of": AS_OF, "limits": ALL}
    md = await hashing_service.retrieve(RetrieveRequest.model_validate(ask | {"render": {"max_tokens": 1000}}))
    compact = await hashing_service.retrieve(
        RetrieveRequest.model_validate(ask | {"render": {"format": "compact", "max_tokens": 1000}})
    )
    shown = md.retrieval_metadata.rendered
    assert shown.truncated == "big" and shown.left_out  # markdown: the big one fills the budget
    r = compact.retrieval_metadata.rendered
    assert sorted(r.included) == ["big", "small1", "small2"] and r.left_out == [] and r.shortened == ["big"]
    line = next(x for x in r.text.splitlines() if "Kyoto temples" in x)
    assert line.endswith(" …") and len(line.split("] ", 1)[1]) <= DEFAULT_ITEM_CHARS
    assert r.text.splitlines()[-1] == "(Not shown: the rest of 1 long item.)"
    capped = await hashing_service.retrieve(
        RetrieveRequest.model_validate(ask | {"render": {"format": "compact", "max_item_chars": 100}})
    )
    line = next(x for x in capped.retrieval_metadata.rendered.text.splitlines() if "Kyoto temples" in x)
    assert len(line.split("] ", 1)[1]) <= 100


async def test_a_concept_named_in_a_shown_memory_unit_with_nothing_else_to_say_is_left_out(hashing_service):
    records = [
        concept("u8", "c-kyoto", "Kyoto", type="place"),  # a name and nothing else
        concept("u8", "c-osaka", "Osaka", type="place"),  # named by nothing shown
        concept("u8", "c-ryokan", "Ryokan", "A traditional inn; we chose Hoshinoya.", type="place"),
        mu("u8", "m1", "We booked the ryokan in Kyoto for the trip.", "2025-06-02T09:00:00Z", title=""),
        rel("u8", "MENTIONS", "m1", "c-kyoto"),
        rel("u8", "MENTIONS", "m1", "c-ryokan"),
    ]
    await hashing_service.ingest(parse_jsonl(jsonl(records)))
    ask = {"user_id": "u8", "key_phrases": ["Kyoto ryokan trip", "Osaka"], "as_of": AS_OF, "limits": ALL}
    doc = await hashing_service.retrieve(RetrieveRequest.model_validate(ask | {"render": {"format": "compact"}}))
    r = doc.retrieval_metadata.rendered
    assert {c.id for c in doc.retrieved_concepts} >= {"c-kyoto", "c-osaka", "c-ryokan"}
    assert r.redundant == ["c-kyoto"] and "c-osaka" in r.included and "c-ryokan" in r.included
    assert "- Kyoto (place)" not in r.text and "- Osaka (place)\n" in r.text
    assert "- Ryokan (place): A traditional inn; we chose Hoshinoya." in r.text
    assert r.text.splitlines()[-1] == "(Not shown: 1 concept named in the memories above.)"
    # the memory unit over the budget: the concept is not redundant then, it is shown or left out
    for limit in range(200, len(r.text), 20):
        tiny = render_context(doc, {}, RenderOptions(format="compact", max_chars=limit))
        if tiny.redundant:
            assert tiny.redundant == ["c-kyoto"] and "m1" in tiny.included and tiny.truncated != "m1"
        else:
            assert "c-kyoto" in tiny.included + tiny.left_out
        assert sorted(tiny.included + tiny.left_out + tiny.redundant) == sorted(r.included + r.redundant)


async def test_a_note_whose_message_is_shown_is_left_out(hashing_service):
    """A message's rule note restates it: shown with its message it only takes the budget."""
    await hashing_service.add_messages(
        ConversationRequest.model_validate(
            {
                "user_id": "u9",
                "session_id": "trip",
                "messages": [
                    {
                        "name": "Ana",
                        "content": "Which ryokan did you book in Kyoto?",
                        "timestamp": "2025-06-02T09:00:00Z",
                    },
                    {"name": "Ben", "content": "I booked Hoshinoya in Kyoto.", "timestamp": "2025-06-02T09:01:00Z"},
                ],
            }
        )
    )
    ask = {"user_id": "u9", "key_phrases": ["Hoshinoya ryokan Kyoto"], "as_of": AS_OF, "limits": ALL}
    doc = await hashing_service.retrieve(RetrieveRequest.model_validate(ask | {"render": {"format": "compact"}}))
    reply, note = message_id("trip", 1), note_id(message_id("trip", 1))
    assert note in {a.id for a in doc.retrieved_artifacts} and reply in {m.muid for m in doc.retrieved_memory_units}
    r = doc.retrieval_metadata.rendered
    assert note in r.redundant and reply in r.included and "Ben booked Hoshinoya" not in r.text
    assert "of the messages above" in r.text.splitlines()[-1]
    # the message over the budget: its note is shown (or left out), never counted as said
    assert len(r.text) > 260  # room for budgets under it
    for limit in range(200, len(r.text), 15):
        tiny = render_context(doc, {}, RenderOptions(format="compact", max_chars=limit))
        assert (note in tiny.redundant) == (reply in tiny.included and tiny.truncated != reply)


async def test_the_time_is_shown_when_the_day_holds_several(hashing_service):
    records = [
        mu("u7", "a", "Sourdough starter fed at breakfast.", "2025-06-01T08:00:00Z", title=""),
        mu("u7", "b", "Sourdough loaf baked after lunch.", "2025-06-01T13:30:00Z", title=""),
        mu("u7", "c", "Sourdough crumb was dense.", "2025-06-03T10:00:00Z", title=""),
        mu("u7", "d", "Sourdough starter smelled of acetone.", "2025-06-05T10:00:01Z", title=""),
        mu("u7", "e", "Sourdough starter got more flour.", "2025-06-05T10:00:40Z", title=""),
    ]
    await hashing_service.ingest(parse_jsonl(jsonl(records)))
    ask = {"user_id": "u7", "key_phrases": ["sourdough"], "as_of": AS_OF, "limits": ALL}
    doc = await hashing_service.retrieve(RetrieveRequest.model_validate(ask | {"render": {"format": "compact"}}))
    text = doc.retrieval_metadata.rendered.text
    assert "- [2025-06-01 08:00] Sourdough starter fed" in text and "- [2025-06-01 13:30] Sourdough loaf" in text
    assert "- [2025-06-03] Sourdough crumb" in text
    assert "- [2025-06-05 10:00:01] Sourdough starter smelled" in text  # one minute: to the second
    assert "- [2025-06-05 10:00:40] Sourdough starter got" in text


async def test_a_fact_no_longer_true_is_marked_with_the_date_it_ended(hashing_service):
    records = [
        mu("u6", "old", "The Phoenix deadline is September 15.", "2025-03-01T09:00:00Z", title=""),
        mu(
            "u6",
            "new",
            "The Phoenix deadline moves to October 6.",
            "2025-06-01T09:00:00Z",
            title="",
            supersedes=["old"],
        ),
    ]
    await hashing_service.ingest(parse_jsonl(jsonl(records)))
    ask = {"user_id": "u6", "key_phrases": ["Phoenix deadline"], "as_of": AS_OF, "render": {"format": "compact"}}
    now = await hashing_service.retrieve(RetrieveRequest.model_validate(ask))
    assert "old" not in now.retrieval_metadata.rendered.included
    both = await hashing_service.retrieve(RetrieveRequest.model_validate(ask | {"include_invalidated": True}))
    text = both.retrieval_metadata.rendered.text
    assert "- [2025-03-01] (no longer true since 2025-06-01) The Phoenix deadline is September 15." in text
    assert "- [2025-06-01] The Phoenix deadline moves to October 6." in text


async def test_a_fact_not_yet_true_and_one_whose_end_is_known_say_so(hashing_service):
    records = [
        mu(
            "u5",
            "later",
            "Phoenix support moves to Kofi.",
            "2025-05-01T09:00:00Z",
            title="",
            valid_from="2025-10-01T00:00:00Z",
        ),
        mu(
            "u5",
            "until",
            "Phoenix support is Ben's.",
            "2025-05-02T09:00:00Z",
            title="",
            valid_to="2025-09-30T00:00:00Z",
        ),
    ]
    await hashing_service.ingest(parse_jsonl(jsonl(records)))
    ask = {"user_id": "u5", "key_phrases": ["Phoenix support"], "as_of": AS_OF, "include_invalidated": True}
    doc = await hashing_service.retrieve(RetrieveRequest.model_validate(ask | {"render": {"format": "compact"}}))
    text = doc.retrieval_metadata.rendered.text
    assert "- [2025-05-01] (not true until 2025-10-01) Phoenix support moves to Kofi." in text
    assert "- [2025-05-02] (true until 2025-09-30) Phoenix support is Ben's." in text


async def test_an_unmatched_phrase_is_named_in_the_header(loaded_service):
    doc = await loaded_service.retrieve(
        request(phrases=("Project Phoenix", "zebra xylophone quartz"), render={"format": "compact"})
    )
    assert doc.unmatched_key_phrases == ["zebra xylophone quartz"]
    assert 'Nothing found for: "zebra xylophone quartz".' in doc.retrieval_metadata.rendered.text.splitlines()[1]


def test_max_item_chars_is_bounded_and_for_compact_only():
    assert RenderOptions(format="compact").item_chars == DEFAULT_ITEM_CHARS
    assert RenderOptions(format="compact", max_item_chars=80).item_chars == 80
    for bad in ({"format": "compact", "max_item_chars": 79}, {"format": "compact", "max_item_chars": 100_001}):
        with pytest.raises(ValidationError):
            RenderOptions.model_validate(bad)
    with pytest.raises(ValidationError, match="compact only"):
        RenderOptions.model_validate({"format": "markdown", "max_item_chars": 300})


def test_the_item_cap_cuts_at_a_word_with_an_ellipsis():
    assert cap_text("  short   text ", 100) == ("short text", False)
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    cut, was = cap_text(text, 30)
    assert was and cut.endswith(" …") and len(cut) <= 30 and text.startswith(cut[:-2])
    assert re.fullmatch(r"[a-z ]+ …", cut) and not cut[:-2].endswith(" ")
    assert names_in("Kyoto", ["we went to kyoto."]) and not names_in("Kyoto", ["Kyotoites"])
    assert names_in("C++", ["written in C++ mostly"])


async def test_the_second_pass_prompt_is_compact_unless_the_request_asked_otherwise(loaded_service):
    plain = await loaded_service.retrieve(request())  # no render asked: the compact default
    prompt = render_second_pass("hi", plain)
    assert "Memory context (as of 2025-08-01), best match first." in prompt and "## Memory context" not in prompt
    assert "m1" not in prompt.split("<instructions>")[0]
    asked = await loaded_service.retrieve(request(render={"max_chars": 1200}))
    assert "## Memory context" in render_second_pass("hi", asked)
