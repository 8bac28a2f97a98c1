"""``hrt eval changes``: the shipped conversations keep their rules, the metrics on hand-made ranked
lists, the runner seeing a supersession the store holds, the command, and one run on three
conversations with the real default embedder."""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hrt.config import Settings
from hrt.eval import changes as C
from hrt.eval.changes.runner import ConversationRun, ask_question, ingest, supersessions
from hrt.records import Kind, MemoryUnit
from hrt.service import HRTService
from tests.helpers import HashingEmbedder

DOC: dict[str, Any] = json.loads(C.DEFAULT_DATA.read_text(encoding="utf-8"))
CONVERSATIONS = C.load()
CHANGE_KINDS = [k for k in C.KINDS if k != C.CONTROL]


# ------------------------------------------------------------------------------------------
# the shipped data
# ------------------------------------------------------------------------------------------


HELDOUT_PATH = C.DEFAULT_DATA.with_name("heldout.json")
HELDOUT = C.load(HELDOUT_PATH)


def test_the_shipped_data_keeps_every_rule() -> None:
    assert C.problems(DOC) == []
    assert len(CONVERSATIONS) >= 32
    assert sum(1 for c in CONVERSATIONS if c.kind == C.CONTROL) >= 8
    assert len({c.id for c in CONVERSATIONS}) == len(CONVERSATIONS)


def test_the_held_out_set_keeps_every_rule_and_shares_no_conversation() -> None:
    """heldout.json: written apart from the rules, never tuned on (docs/eval-changes.md)."""
    assert C.problems(json.loads(HELDOUT_PATH.read_text(encoding="utf-8"))) == []
    assert len(HELDOUT) >= 24 and sum(1 for c in HELDOUT if c.kind == C.CONTROL) >= 5
    assert not {c.id for c in HELDOUT} & {c.id for c in CONVERSATIONS}
    texts = {m.content for c in CONVERSATIONS for m in c.messages}
    assert not {m.content for c in HELDOUT for m in c.messages} & texts


def test_every_conversation_is_8_to_40_messages_in_time_order() -> None:
    for conv in (*CONVERSATIONS, *HELDOUT):
        assert 8 <= len(conv.messages) <= 40, conv.id
        times = [m.timestamp for m in conv.messages]
        assert times == sorted(times) and len(set(times)) == len(times), conv.id
        assert {m.role for m in conv.messages} == {"user", "assistant"}, conv.id
        assert [n for n, _ in conv.sessions()] == list(range(1, len(conv.sessions()) + 1)), conv.id


def test_every_label_is_in_range_and_current_and_outdated_are_disjoint() -> None:
    for conv in (*CONVERSATIONS, *HELDOUT):
        assert 1 <= len(conv.questions) <= 4, conv.id
        for q in conv.questions:
            labels = (*q.current, *q.outdated, *q.reverted)
            assert all(0 <= i < len(conv.messages) for i in labels), (conv.id, q.question)
            assert not set(q.current) & set(q.outdated), (conv.id, q.question)
            assert q.current and 2 <= len(q.key_phrases) <= 3 and q.query.strip()
            assert bool(q.outdated) == (q.kind != C.CONTROL), (conv.id, q.question)
            if q.outdated:  # what changed came after what it changed
                assert max(q.current) > max(q.outdated), (conv.id, q.question)


def test_each_conversations_kinds() -> None:
    for conv in CONVERSATIONS:
        kinds = {q.kind for q in conv.questions}
        assert conv.kind in kinds, conv.id
        assert (kinds == {C.CONTROL}) == (conv.kind == C.CONTROL), conv.id
        if conv.kind == "two_changes":
            # two facts, changed in different messages at different times
            changed = {min(q.current) for q in conv.questions}
            assert len(conv.questions) >= 2 and len(changed) >= 2, conv.id
        if conv.kind == "revert":
            assert all(q.reverted for q in conv.questions if q.kind == "revert"), conv.id
    per_kind = Counter(c.kind for c in CONVERSATIONS)
    assert all(per_kind[k] >= 4 for k in CHANGE_KINDS), per_kind


def test_the_changes_are_not_worded_from_one_template() -> None:
    """The message that makes each change (the latest current one the user wrote) opens in many
    ways: no three opening words are shared by more than two of them."""
    openings = []
    for conv in CONVERSATIONS:
        for q in conv.questions:
            if q.kind == C.CONTROL:
                continue
            user_current = [i for i in q.current if conv.messages[i].role == "user"]
            if user_current:
                words = re.findall(r"[\w']+", conv.messages[max(user_current)].content.lower())
                openings.append(" ".join(words[:3]))
    assert len(openings) >= 30
    assert max(Counter(openings).values()) <= 2, Counter(openings).most_common(3)


def test_the_data_ships_as_package_data() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert "hrt.eval.changes" in project["packages"]
    assert "*.json" in project["package-data"]["hrt.eval.changes"]
    assert C.DEFAULT_DATA.parent == root / "hrt" / "eval" / "changes"


def _broken(change: Any) -> list[str]:
    doc = copy.deepcopy(DOC)
    change(doc["conversations"][0])
    return C.problems(doc)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: c["questions"][0]["current"].append(99), "current must be distinct message indices"),
        (lambda c: c["questions"][0]["outdated"].append(c["questions"][0]["current"][0]), "disjoint"),
        (lambda c: c["messages"][3].update(timestamp=c["messages"][0]["timestamp"]), "after the previous"),
        (lambda c: c["messages"][2].update(timestamp="2025-02-03 19:10"), "time zone"),
        (lambda c: c.update(messages=c["messages"][:7]), "8 to 40"),
        (lambda c: c["messages"][1].update(name="Someone"), "name must be"),
        (lambda c: c["questions"][0].update(outdated=[]), "no outdated message"),
        (lambda c: c["questions"][0].update(kind="control"), "control questions belong"),
        (lambda c: c["questions"][0].update(key_phrases=["one"]), "key_phrases"),
        (lambda c: c.update(kind="wedding"), "kind must be one of"),
        (lambda c: c["messages"][5].update(session=9), "session"),
    ],
)
def test_the_checks_catch_a_broken_conversation(change: Any, expected: str) -> None:
    found = _broken(change)
    assert found and any(expected in p for p in found), found


def test_a_broken_file_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(C.DataError, match="not JSON"):
        C.load(path)
    with pytest.raises(C.DataError, match="No such file"):
        C.load(tmp_path / "missing.json")


# ------------------------------------------------------------------------------------------
# the metrics, on hand-made ranked lists
# ------------------------------------------------------------------------------------------


def test_current_first() -> None:
    assert C.current_first([7, 0, 8], current={7, 8}, outdated={0}) == 1.0
    assert C.current_first([0, 7, 8], current={7, 8}, outdated={0}) == 0.0
    assert C.current_first([3, 8, 4], current={7, 8}, outdated={0, 1}) == 1.0  # outdated not returned: below
    assert C.current_first([0, 3], current={7}, outdated={0}) == 0.0  # no current returned
    assert C.current_first([], current={7}, outdated={0}) == 0.0
    assert C.current_first([None, 1, 7], current={7}, outdated={1}) == 0.0  # a non-message unit holds a rank
    assert C.current_first([None, 7], current={7}, outdated=set()) == 1.0  # a control: current returned


def test_current_retrieved_empty_and_recall() -> None:
    assert C.current_retrieved([1, 2, 9], {9}) == 1.0
    assert C.current_retrieved([1, 2], {9}) == 0.0
    assert C.empty([]) == 1.0 and C.empty([None]) == 0.0
    ranked = [5, 1, 2, 3, 4, 9, 6, 7, 8, 0, 11]
    assert C.recall_at(ranked, {5, 9}, 5) == 0.5
    assert C.recall_at(ranked, {5, 9}, 10) == 1.0
    assert C.recall_at(ranked, {11}, 10) == 0.0
    assert C.recall_at(ranked, set(), 10) == 0.0


def test_outdated_unmarked() -> None:
    marked = C.Response((7, 0), {7: True, 0: False})
    assert C.outdated_unmarked(marked, {0}) == 0.0
    assert C.outdated_unmarked(C.Response((7, 0), {7: True, 0: True}), {0}) == 1.0
    assert C.outdated_unmarked(C.Response((7, 0), {7: True}), {0}) == 1.0  # no interval: unmarked
    assert C.outdated_unmarked(C.Response((7,), {7: True}), {0}) == 0.0  # not returned
    assert C.outdated_unmarked(C.Response((7, 0, 1), {0: False, 1: True}), {0, 1}) == 1.0
    assert C.outdated_unmarked(marked, set()) is None  # a control: does not apply
    assert marked.invalid == [0]


def test_question_metrics_take_each_metric_from_its_request() -> None:
    """Ranking from the request with include_invalidated; the rest from the default one."""
    default = C.Response((8, 2), {8: True, 2: True}, suppressed=1)
    invalidated = C.Response((0, 8, 2), {0: False, 8: True, 2: True})
    m = C.question_metrics(default, invalidated, current={8}, outdated={0}, control_supersessions=None)
    assert m == {
        "current_first": 0.0,  # the old one outranks the current one when both are returned
        "current_retrieved": 1.0,
        "outdated_unmarked": 0.0,  # set aside by the default request
        "empty": 0.0,
        "control_superseded": None,
        "recall@5": 1.0,
        "recall@10": 1.0,
    }
    control = C.question_metrics(default, invalidated, {8}, set(), control_supersessions=False)
    assert control["control_superseded"] == 1.0  # the responses show a message set aside
    quiet = C.Response((8, 2), {8: True, 2: True})
    assert C.question_metrics(quiet, quiet, {8}, set(), control_supersessions=False)["control_superseded"] == 0.0
    assert C.question_metrics(quiet, quiet, {8}, set(), control_supersessions=True)["control_superseded"] == 1.0


def test_aggregate_averages_where_a_metric_applies() -> None:
    rows = [
        ("update", {**dict.fromkeys(C.METRICS, 1.0), "control_superseded": None}),
        ("update", {**dict.fromkeys(C.METRICS, 0.0), "control_superseded": None}),
        ("control", {**dict.fromkeys(C.METRICS, 1.0), "outdated_unmarked": None, "control_superseded": 0.0}),
    ]
    out = C.aggregate(rows)
    assert list(out) == [C.OVERALL, "update", "control"]
    assert out["update"]["n"] == 2 and out["update"]["current_first"] == 0.5
    assert out["update"]["control_superseded"] is None
    assert out["control"]["outdated_unmarked"] is None and out["control"]["control_superseded"] == 0.0
    assert out[C.OVERALL]["n"] == 3
    assert out[C.OVERALL]["current_first"] == round(2 / 3, 4)
    assert out[C.OVERALL]["outdated_unmarked"] == 0.5  # over the two questions it applies to


def test_supersession_scores_against_the_labels() -> None:
    # 7 supersedes 0 (right), 8 supersedes 1 (right), 5 supersedes 3 (not outdated), 0 supersedes 7
    # (backwards), a unit that is no message supersedes 1
    s = C.supersession_scores([(7, 0), (8, 1), (5, 3), (0, 7), (None, 1), (7, 0)], outdated={0, 1, 2})
    assert len(s.pairs) == 5  # the same pair twice is one
    assert s.correct == 2 and s.precision == 0.4
    assert s.outdated == 3 and s.outdated_superseded == 2 and s.recall == round(2 / 3, 4)
    none = C.supersession_scores([], outdated={0})
    assert none.precision is None and none.recall == 0.0
    control = C.supersession_scores([], outdated=set())
    assert control.precision is None and control.recall is None
    # a revert's first statement, overturned in between, may be superseded
    revert = C.supersession_scores([(4, 0), (10, 4)], outdated={4}, reverted={0})
    assert revert.correct == 2 and revert.recall == 1.0
    total = C.micro_supersession([s, none, control, revert])
    assert total["pairs"] == 7 and total["correct"] == 4 and total["precision"] == round(4 / 7, 4)
    assert total["outdated"] == 5 and total["outdated_superseded"] == 3 and total["recall"] == 0.6
    assert total["with_supersessions"] == 2 and total["conversations"] == 4


# ------------------------------------------------------------------------------------------
# the runner and the command
# ------------------------------------------------------------------------------------------


def _conversation(cid: str) -> C.ChangeConversation:
    return next(c for c in CONVERSATIONS if c.id == cid)


async def test_the_runner_sees_a_supersession_the_store_holds(tmp_path: Path) -> None:
    """A supersession written into the store by hand (on top of what the rules found) is read back
    as a pair and moves the question's metrics as the definitions say."""
    conv = _conversation("new-phone-number")
    q = conv.questions[0]
    service = await HRTService(Settings(db_path=tmp_path / "c.db"), embedder=HashingEmbedder()).start()
    try:
        muids = await ingest(service, conv, 4, [])
        units = await service.records.get_many(conv.user_id, Kind.MEMORY_UNIT, muids)
        for i, muid in enumerate(muids):  # each message's unit is that message
            assert isinstance(units[muid], MemoryUnit) and conv.messages[i].content in units[muid].content
        new, outdated = max(q.current), sorted(q.outdated)
        unit = units[muids[new]]
        await service.ingest([unit.model_copy(update={"supersedes": [muids[i] for i in outdated]})])
        pairs, ended = await supersessions(service, conv.user_id, muids)
        assert {(new, i) for i in outdated} <= set(pairs) and ended == []
        score = C.supersession_scores(pairs, conv.outdated)
        assert score.correct >= len(outdated) and score.recall == 1.0
        run = ConversationRun(conv, muids, score, ended)
        line = await ask_question(service, run, 0, q, C.runner._when(conv.messages[-1].timestamp))
    finally:
        await service.close()
    for mode in C.MODES:
        answer = line["modes"][mode]
        assert not set(outdated) & set(answer["default"]["ranked"]), answer
        assert answer["default"]["suppressed"] >= 1, answer
        # asked with include_invalidated, what no longer holds comes marked, after what replaced it
        marked = answer["include_invalidated"]
        returned_old = [i for i in marked["ranked"] if i in outdated]
        assert returned_old and returned_old == [i for i in marked["invalid"] if i in outdated], answer
        if new in marked["ranked"]:
            assert all(marked["ranked"].index(i) > marked["ranked"].index(new) for i in returned_old)
        assert answer["metrics"]["outdated_unmarked"] == 0.0


def _small_data(tmp_path: Path, ids: tuple[str, ...]) -> Path:
    doc = {**DOC, "conversations": [c for c in DOC["conversations"] if c["id"] in ids]}
    path = tmp_path / "three.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


THREE = ("lisbon-trip-moved", "standup-back-to-930", "two-trips")


def _check_outputs(out: Path, summary: dict[str, Any]) -> None:
    assert summary["meta"]["conversations"] == 3 and summary["meta"]["questions"] == 4
    assert set(summary["metrics"]) == set(C.MODES)
    for groups in summary["metrics"].values():
        assert set(groups) == {C.OVERALL, "update", "revert", C.CONTROL}
        for values in groups.values():
            assert set(values) == {"n", *C.METRICS}
            assert all(v is None or 0.0 <= v <= 1.0 for k, v in values.items() if k != "n")
    sup = summary["supersession"]
    assert set(sup["conversations"]) == set(THREE) and sup["overall"]["outdated"] == 4
    assert sup["overall"]["recall"] is None or 0.0 <= sup["overall"]["recall"] <= 1.0
    lines = [json.loads(x) for x in (out / C.QUESTIONS_FILE).read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 4 and all(set(line["modes"]) == set(C.MODES) for line in lines)
    assert json.loads((out / C.SUMMARY_FILE).read_text(encoding="utf-8"))["meta"] == summary["meta"]


def test_the_command_runs_and_writes_its_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["--data", str(_small_data(tmp_path, THREE)), "--out", str(out), "--per-call", "3", "--json"]
    assert C.main(argv, embedder=HashingEmbedder()) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["meta"]["per_call"] == 3 and summary["meta"]["embedder"] == HashingEmbedder.name
    _check_outputs(out, summary)
    assert C.main(argv[:-1], embedder=HashingEmbedder()) == 0
    table = capsys.readouterr().out
    assert "| overall (4) |" in table and "| control (2) |" in table and "supersessions the store holds" in table


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--per-call", "0"], "--per-call: must be 1 to 500"),
        (["--per-call", "four"], "--per-call: expected a whole number"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--data", "/nonexistent/changes.json"], "No such file"),
    ],
)
def test_a_bad_argument_is_one_error_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from hrt.cli import main as hrt_main

    assert hrt_main(["eval", "changes", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hrt: error: ") and message in lines[0], captured.err
    assert captured.out == ""


@pytest.mark.slow
def test_three_conversations_with_the_real_default_embedder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hrt.service import load_embedder

    embedder = load_embedder(Settings())
    out = tmp_path / "out"
    argv = ["--data", str(_small_data(tmp_path, THREE)), "--out", str(out), "--json"]
    assert C.main(argv, embedder=embedder) == 0
    summary = json.loads(capsys.readouterr().out)
    _check_outputs(out, summary)
    phrases = summary["metrics"]["phrases"][C.OVERALL]
    assert phrases["empty"] == 0.0 and phrases["current_retrieved"] == 1.0  # ten units of a short conversation
