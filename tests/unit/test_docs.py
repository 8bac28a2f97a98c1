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


ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def _unfenced(text: str) -> str:
    """``text`` without its fenced code blocks."""
    import re

    return re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.M | re.S)


def _prose(text: str) -> str:
    """``text`` without code, fenced or inline, where a bracket is not a link."""
    import re

    return re.sub(r"`[^`\n]*`", "", _unfenced(text))


def _links(page: Path) -> list[str]:
    import re

    return re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text()))


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of ``page``'s headings: lower case, punctuation dropped, spaces as
    hyphens, ``-1``, ``-2`` after a repeated one."""
    import re

    seen: dict[str, int] = {}
    for line in _unfenced(page.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*$", line)
        if heading:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).strip().lower()
            slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
            seen[slug] = seen.get(slug, 0) + 1
            if seen[slug] > 1:
                seen[f"{slug}-{seen[slug] - 1}"] = 1
    return set(seen)


def test_every_relative_link_of_the_readme_and_docs_resolves():
    """A link to a file names one that exists, and an anchor one of that page's headings."""
    import re

    broken = []
    for page in PAGES:
        for target in _links(page):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_no_page_links_into_generated_outputs():
    """bench-results/ is what `hrt bench` and the scripts write, ignored by git: a page that needs
    a figure from it states the figure and the command that makes it."""
    linking = [f"{page.relative_to(ROOT)}: {t}" for page in PAGES for t in _links(page) if "bench-results" in t]
    assert not linking, linking
    assert "/bench-results/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_measurement_docs_are_references_not_lab_logs():
    """Method, commands, current figures and goals; the history is in CHANGELOG.md."""
    for name in ("bench.md", "eval-locomo.md"):
        assert len((ROOT / "docs" / name).read_text().splitlines()) < 300, name
