"""The inspector's files (hrt/ui/), read as sources: they ship with the package, every module they
import is there, nothing in them writes data as HTML, and docs/inspector.md is the one
scripts/inspector_screenshots.py writes, with every picture it shows. The page itself runs in a
browser in tests/integration/test_inspector.py."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

from hrt.api.ui import CONTENT_SECURITY_POLICY, MEDIA_TYPES, ui_files, ui_paths

ROOT = Path(__file__).resolve().parents[2]
UI = ROOT / "hrt" / "ui"
# the DOM's ways of parsing a string as markup or code; the page uses none of them
MARKUP_SINKS = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|srcdoc")


def test_every_file_ships_as_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    patterns = [p.removeprefix("ui/") for p in data["hrt"] if p.startswith("ui/")]
    on_disk = sorted(p.name for p in UI.iterdir() if p.is_file())
    assert on_disk == sorted(ui_files())  # every file of the folder is served
    assert all(any(Path(name).match(p) for p in patterns) for name in on_disk)
    assert {Path(name).suffix for name in on_disk} <= set(MEDIA_TYPES)
    assert ui_paths(ui_files()) == {"/ui", "/ui/", *(f"/ui/{n}" for n in on_disk)}


def test_the_modules_import_only_each_other():
    for module in UI.glob("*.js"):
        for target in re.findall(r'from "([^"]+)"', module.read_text(encoding="utf-8")):
            assert target.startswith("./") and (UI / target[2:]).is_file(), (module.name, target)
    page = (UI / "index.html").read_text(encoding="utf-8")
    assert re.findall(r'src="([^"]+)"', page) == ["/ui/app.js"]
    assert "<script>" not in page and "style=" not in page  # nothing inline: the policy allows none


def test_nothing_writes_a_string_as_markup():
    found = {m.name: MARKUP_SINKS.findall(m.read_text(encoding="utf-8")) for m in UI.glob("*.js")}
    assert {name: hits for name, hits in found.items() if hits} == {}
    assert MARKUP_SINKS.findall("el.innerHTML = x; document.write(y)") == ["innerHTML", "document.write"]
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe" not in CONTENT_SECURITY_POLICY


def test_docs_inspector_is_what_the_screenshot_script_writes():
    spec = importlib.util.spec_from_file_location(
        "inspector_screenshots", ROOT / "scripts" / "inspector_screenshots.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    committed = (ROOT / "docs" / "inspector.md").read_text(encoding="utf-8")
    assert committed == script.inspector_markdown(), "run `make inspector-screenshots` and commit docs/"
    pictures = re.findall(r"\]\((img/inspector-[a-z]+\.png)\)", committed)
    assert len(pictures) == len(script.VIEWS) >= 5
    for picture in pictures:
        assert (ROOT / "docs" / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
