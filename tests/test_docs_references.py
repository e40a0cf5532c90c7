"""Every place the code cites the project's documentation points at a page and a heading that exist,
and nothing user-facing points at notes outside the project or at tracker numbers."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("src", "constructions", "rasp", "tests", "examples", "bench", "figures")
CITATION = re.compile(r'docs/([a-z0-9-]+\.md)(?:,\s*((?:"[^"\n]+"(?:,\s*)?)+))?')
QUOTED = re.compile(r'"([^"\n]+)"')
OUTSIDE_NOTES = ("shared" + "/", "design" + " note")  # spelled apart so this file does not match itself
FORBIDDEN = re.compile("|".join(OUTSIDE_NOTES) + r"|\bissue" + r" \d|\bissues? #\d")


def _sources() -> list[Path]:
    files = [p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".sh")]
    return sorted(files + [ROOT / "README.md", ROOT / "Makefile"] + sorted((ROOT / "docs").glob("*.md")))


def _normal(title: str) -> str:
    """Lower case, without a leading section number ("3. ") or article ("The ")."""
    return re.sub(r"^(\d+\.\s*)?(the\s+)?", "", title.strip().lower())


def _headings(page: Path) -> list[str]:
    return [_normal(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")]


def _citations() -> list[tuple[str, str, str | None]]:
    found = []
    for path in _sources():
        text = re.sub(r"\s*\n\s*(#\s*)?", " ", path.read_text())  # a citation may wrap over lines
        for match in CITATION.finditer(text):
            sections = QUOTED.findall(match.group(2) or "")
            for section in sections or [None]:
                found.append((str(path.relative_to(ROOT)), match.group(1), section))
    return found


def test_the_checker_sees_citations() -> None:
    assert len({(page, section) for _, page, section in _citations() if section}) >= 10


@pytest.mark.parametrize("where,page,section", sorted(set(_citations()), key=str), ids=str)
def test_cited_page_and_heading_exist(where: str, page: str, section: str | None) -> None:
    path = ROOT / "docs" / page
    assert path.is_file(), f"{where} cites docs/{page}, which does not exist"
    if section is not None:
        headings = _headings(path)
        assert any(h.startswith(_normal(section)) for h in headings), (
            f"{where} cites docs/{page}, \"{section}\", but that page has no such heading: {headings}")


def test_nothing_user_facing_points_outside_the_project() -> None:
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in _sources()
            for i, line in enumerate(p.read_text().splitlines(), 1) if FORBIDDEN.search(line)]
    assert not hits, "\n".join(hits)


def test_no_page_tells_users_to_set_pythonpath() -> None:
    """After ``make setup`` (an editable install) the packages import from anywhere: the docs say so
    once (README) and never prefix a command with ``PYTHONPATH=src:.``."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*.py")),
             *sorted((ROOT / "bench").glob("*.py")), *sorted((ROOT / "rasp").rglob("*.py"))]
    prefixed = [str(p.relative_to(ROOT)) for p in pages if "PYTHONPATH=src" in p.read_text()]
    assert prefixed == []


def test_an_installed_project_runs_from_any_directory_without_pythonpath(tmp_path) -> None:
    import importlib.metadata
    import os
    import subprocess
    import sys

    try:
        importlib.metadata.distribution("lengthgen")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the project is not installed (make setup installs it)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "rasp.turing", "--machine", "addition", "--input", "12+34"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"answer:       {12 + 34} " in done.stdout
