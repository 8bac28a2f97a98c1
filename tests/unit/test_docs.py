"""The README is an interface too: its configuration table and commands must match the code."""

from pathlib import Path

from hrt.cli import build_parser
from hrt.config import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_setting_is_documented():
    # grouped rows may abbreviate: `HRT_THRESHOLD_MAX` / `_MIN` documents HRT_THRESHOLD_MIN
    for name in Settings.model_fields:
        env = f"HRT_{name.upper()}"
        group, _, rest = name.upper().partition("_")
        short = f"`_{rest}`" if rest else None
        assert env in README or (short and short in README and f"HRT_{group}_" in README), f"{env} is missing"


def test_every_cli_command_is_documented():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for command in sub.choices:
        assert f"hrt {command}" in README, command


def test_readme_starts_with_the_two_commands_ci_runs():
    head = README.split("## What HRT is")[0]
    assert "    make demo\n" in head and "    make test\n" in head
    assert "make test" in (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
