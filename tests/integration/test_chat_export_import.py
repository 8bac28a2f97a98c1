"""``hrt ingest --conversation conversations.json`` of a ChatGPT and a Claude data export into a real
embedded store: one command, a summary of what was read and left out, a re-import that changes
nothing, the turns found by a question, and a malformed export that writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DATA = Path(__file__).parent.parent / "data" / "exports"


def run_hrt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HRT_LOG_LEVEL": "WARNING"}
    return subprocess.run(
        [sys.executable, "-m", "hrt.cli", *args], capture_output=True, text=True, timeout=600, env=env
    )


def ingest(path: Path, db: Path) -> list[dict[str, object]]:
    done = run_hrt("ingest", "--conversation", str(path), "--user", "gardener", "--db", str(db), "--progress")
    assert done.returncode == 0, done.stderr
    assert "ingest " in done.stderr  # the progress bar
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_exports_go_in_once_and_their_questions_find_their_turns(tmp_path: Path):
    db = tmp_path / "exports.db"
    *sessions, summary = ingest(DATA / "chatgpt_conversations.json", db)
    assert [s["session_id"] for s in sessions] == ["chatgpt-6a1f0c2e-0000-4000-8000-00000000a001"]
    assert summary == {
        "export": "chatgpt",
        "conversations": 2,
        "sessions": 1,
        "empty_conversations": 1,
        "messages": 4,
        "added": 4,
        "unchanged": 0,
        "replaced": 0,
        "skipped": 8,
        "skipped_why": {  # the empty conversation's system message counted too
            "non_text_content": 1,
            "non_text_part": 1,
            "other_branch": 2,
            "system": 2,
            "tool": 1,
            "tool_call": 1,
        },
    }
    *_, claude = ingest(DATA / "claude_conversations.json", db)
    why = {"attachment": 1, "empty": 1, "non_text_part": 2}
    assert (claude["export"], claude["added"], claude["skipped_why"]) == ("claude", 3, why)
    # a second import of the same export changes nothing
    *_, again = ingest(DATA / "chatgpt_conversations.json", db)
    assert (again["added"], again["unchanged"], again["replaced"]) == (0, 4, 0)
    asked = run_hrt("query", "--user", "gardener", "--query", "allotment committee meeting", "--json", "--db", str(db))
    assert asked.returncode == 0, asked.stderr
    found = [m["content_snippet"] for m in json.loads(asked.stdout)["retrieved_memory_units"]]
    assert any("committee meets on the first Tuesday" in c for c in found), found
    cello = run_hrt("query", "--user", "gardener", "--query", "cello Sarabande teacher", "--json", "--db", str(db))
    assert any("Benedikt" in m["content_snippet"] for m in json.loads(cello.stdout)["retrieved_memory_units"])


def test_a_malformed_export_is_refused_by_name_and_writes_nothing(tmp_path: Path):
    db = tmp_path / "bad.db"
    export = json.loads((DATA / "claude_conversations.json").read_text(encoding="utf-8"))
    export.append({**export[0], "uuid": "0b7d9e4a-0000-4000-8000-0000000c0009"})
    export[-1]["chat_messages"] = [*export[0]["chat_messages"], {"sender": "narrator", "text": "x"}]
    bad = tmp_path / "conversations.json"
    bad.write_text(json.dumps(export), encoding="utf-8")
    done = run_hrt("ingest", "--conversation", str(bad), "--user", "gardener", "--db", str(db))
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(
        "hrt: error: conversations.json: conversation [2] (id '0b7d9e4a-0000-4000-8000-0000000c0009')"
    )
    assert "chat_messages[4].sender: must be human or assistant" in line
    # the first conversation, valid, was not written either
    stats = run_hrt("query", "--user", "gardener", "--query", "cello", "--json", "--db", str(db))
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["retrieved_memory_units"] == []
