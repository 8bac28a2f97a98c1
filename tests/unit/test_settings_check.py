"""Settings a person can debug: an unknown HRT_* variable is named with the nearest known one, a
bad value's error names its variable in one line (never the value), and every CLI failure is one
``hrt: error:`` line unless ``--debug`` asks for the traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from hrt.cli import main
from hrt.config import Settings
from hrt.settings_check import OTHER_VARIABLES, setting_variables, settings_error, unknown_variables


def test_a_misspelt_variable_is_named_with_the_nearest_known_one() -> None:
    lines = unknown_variables({"HRT_SEACH_K": "5", "HRT_SEARCH_K": "5", "PATH": "/bin", "HRT_ZZZ_QQQ": "1"})
    assert lines == [
        "HRT_SEACH_K is not a variable HRT reads (did you mean HRT_SEARCH_K?); it is ignored",
        "HRT_ZZZ_QQQ is not a variable HRT reads; it is ignored",
    ]
    # the clients', tools' and compose file's own variables are known, as is every setting
    assert unknown_variables(dict.fromkeys(OTHER_VARIABLES | setting_variables(), "x")) == []


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        ("HRT_WEIGHTS", "bogus", "HRT_WEIGHTS: not a valid value (this setting is JSON"),
        ("HRT_WEIGHTS", '{"beta_recency": "x"}', "HRT_WEIGHTS (beta_recency): Input should be a valid number"),
        ("HRT_MAX_CONCURRENT_INGESTS", "many", "HRT_MAX_CONCURRENT_INGESTS: Input should be a valid integer"),
    ],
)
def test_a_bad_value_names_its_variable_not_the_field_nor_the_value(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, line: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(Exception) as caught:
        Settings()
    said = settings_error(caught.value)
    assert said is not None and said.startswith(line), said
    assert value not in said and "\n" not in said


def test_a_backend_no_one_registered_is_one_line_naming_its_variable_not_the_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Backends are registered by name (hrt.stores.registry): the name is checked when the stores
    are composed, which every command that touches them does first."""
    monkeypatch.setenv("HRT_DB_PATH", str(tmp_path / "hrt.db"))
    monkeypatch.setenv("HRT_RECORD_STORE", "secret-mysql")
    assert main(["migrate"]) == 2
    err = capsys.readouterr().err
    assert err == "hrt: error: HRT_RECORD_STORE names no record store HRT knows; one of: embedded, postgres\n"
    assert not (tmp_path / "hrt.db").exists()


def test_the_cli_says_one_line_for_a_bad_setting_a_missing_file_and_an_unknown_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("HRT_DB_PATH", str(tmp_path / "hrt.db"))
    monkeypatch.setenv("HRT_WEIGHTS", "not json")
    assert main(["ingest", str(tmp_path / "nothing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err == "hrt: error: HRT_WEIGHTS: not a valid value (this setting is JSON: a number, an object or a list)\n"
    monkeypatch.delenv("HRT_WEIGHTS")
    monkeypatch.setenv("HRT_SERACH_K", "3")
    assert main(["ingest", str(tmp_path / "nothing.jsonl")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "hrt: warning: HRT_SERACH_K is not a variable HRT reads (did you mean HRT_SEARCH_K?); it is ignored",
        f"hrt: error: No such file or directory: {tmp_path / 'nothing.jsonl'}",
    ]
    with pytest.raises(FileNotFoundError):  # --debug: the traceback, for a bug report
        main(["--debug", "ingest", str(tmp_path / "nothing.jsonl")])
