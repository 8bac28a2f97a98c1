"""The README is an interface too: its commands must match the code (the settings' reference,
docs/configuration.md, is generated and held current by test_config_docs.py)."""

from pathlib import Path

from hrt.cli import build_parser

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_cli_command_is_documented():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for command in sub.choices:
        assert f"hrt {command}" in README, command


def test_readme_starts_with_the_two_commands_ci_runs():
    head = README.split("## Quick start")[1].split("\n## ")[0]
    assert "    make demo\n" in head and "    make test\n" in head
    assert "make test" in (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()


def test_the_readme_stays_a_users_entry_point():
    """At most about 250 lines; measurement histories live in docs/, every doc it links exists."""
    import re

    root = Path(__file__).resolve().parents[2]
    assert len(README.splitlines()) <= 260
    for link in re.findall(r"\]\(((?:docs|examples|prompts)/[^)#]*)", README):
        assert (root / link).exists(), link
