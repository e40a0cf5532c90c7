"""The mutation parts of bench/mutate.py name files and tests that exist: a test ID that a renamed
test or a changed parameter no longer matches makes mutmut's first pytest session fail, and the
whole part then reports every mutant as "other" instead of scoring it."""
from __future__ import annotations

import fnmatch
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parts() -> dict:
    return module().PARTS


def module():
    spec = importlib.util.spec_from_file_location("bench_mutate", ROOT / "bench" / "mutate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def test_every_mutated_file_and_test_file_exists() -> None:
    for name, part in parts().items():
        for path in part.files:
            assert (ROOT / path).is_file(), (name, path)
        for test in part.tests:
            if not test.startswith("-") and test != "not slow":
                assert (ROOT / test.split("::")[0]).is_file(), (name, test)


def test_every_named_test_is_collected() -> None:
    ids = sorted({t for part in parts().values() for t in part.tests if "::" in t})
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *ids],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    collected = {line.strip() for line in run.stdout.splitlines() if "::" in line}
    missing = [t for t in ids if t not in collected and not any(c.startswith(t + "[") or c.startswith(t + "::")
                                                                for c in collected)]
    assert not missing, missing


def mutmut_names(path: str) -> list[str]:
    return module().mutant_names(path)


def test_every_function_of_a_mutated_file_is_in_exactly_one_part() -> None:
    """A file split between parts (``Part.mutants``) loses no function to a gap between their
    patterns and scores none twice; an unsplit file is in one part only."""
    all_parts = parts()
    for path in sorted({f for part in all_parts.values() for f in part.files}):
        owners = {name: part for name, part in all_parts.items() if path in part.files}
        if all(not part.mutants for part in owners.values()):
            assert len(owners) == 1, (path, sorted(owners))
            continue
        for mutant in mutmut_names(path):
            holders = [name for name, part in owners.items() if part.holds(mutant)]
            assert len(holders) == 1, (mutant, holders)


def test_every_pattern_of_a_split_part_names_a_function() -> None:
    """A misspelt function name in ``Part.mutants`` would select nothing and go unnoticed."""
    for name, part in parts().items():
        names = [m for path in part.files for m in mutmut_names(path)]
        for pattern in part.mutants:
            assert any(fnmatch.fnmatchcase(m, pattern) for m in names), (name, pattern)


def test_a_split_part_reports_only_its_own_mutants() -> None:
    """The trained-model certificate's trained.py is split: the argument at one position in part
    ``trained``, the statement around it in ``trained-statement``."""
    all_parts = parts()
    argument = "lengthgen.proof.trained.xǁPositionCertifierǁinputs__mutmut_7"
    statement = "lengthgen.proof.trained.xǁPositionCertifierǁcertify__mutmut_7"
    assert all_parts["trained"].holds(argument) and not all_parts["trained"].holds(statement)
    assert all_parts["trained-statement"].holds(statement) and not all_parts["trained-statement"].holds(argument)
    assert all_parts["interval"].holds("lengthgen.proof.interval.x_gamma__mutmut_1")  # an unsplit part: all


def test_a_selection_outside_the_part_is_refused_before_anything_runs() -> None:
    """``--mutants`` on a split part with a pattern of another part's function would run mutants
    this part's report leaves out; a misspelt one would run nothing. Both are refused in one line
    by the command, before mutmut starts; a pattern of the part's own function is accepted."""
    mutate = module()
    assert mutate.unmatched_selection("trained-statement", ["lengthgen.proof.trained.x_configurations*"]) is None
    assert mutate.unmatched_selection("trained", ["*PositionCertifier*inputs__mutmut_7"]) is None
    assert mutate.unmatched_selection("interval", ["lengthgen.proof.interval.x_gamma__mutmut_1500"]) is None
    assert mutate.unmatched_selection("trained", ["lengthgen.proof.trained.x_configurations*"]) == (
        "--mutants 'lengthgen.proof.trained.x_configurations*' selects no mutant of part trained: "
        "it names mutants of part trained-statement")
    assert mutate.unmatched_selection("interval", ["lengthgen.proof.interval.x_gamma*", "*x_no_such_function*"]) == (
        "--mutants '*x_no_such_function*' selects no mutant of part interval: it names no mutant of any part")
    run = subprocess.run([sys.executable, "bench/mutate.py", "trained", "--mutants",
                          "lengthgen.proof.trained.x_configurations*"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().splitlines()[-1] == (
        "mutate.py: error: --mutants 'lengthgen.proof.trained.x_configurations*' selects no mutant of part "
        "trained: it names mutants of part trained-statement")


def test_a_stopped_run_lists_its_unrun_mutants_apart(tmp_path, monkeypatch) -> None:
    """Mutants a stopped run never reached ("not checked") are neither killed nor open: the
    summary counts them as not run and the report names their functions."""
    mutate = module()
    monkeypatch.setattr(mutate, "RESULTS", tmp_path)
    monkeypatch.setattr(mutate, "EQUIVALENTS", tmp_path / "equivalent.txt")
    diff = "--- src/lengthgen/proof/interval.py\n+++ src/lengthgen/proof/interval.py\n@@ -1,1 +1,1 @@\n-a\n+b\n"
    survivor = mutate.Mutant("lengthgen.proof.interval.x_gamma__mutmut_1", "survived", diff,
                             "src/lengthgen/proof/interval.py", "gamma", 10)
    mutants = [mutate.Mutant("lengthgen.proof.interval.x_gamma__mutmut_2", "killed"), survivor,
               mutate.Mutant("lengthgen.proof.interval.x_up__mutmut_1", "not checked"),
               mutate.Mutant("lengthgen.proof.interval.x_up__mutmut_2", "not checked")]
    summary = mutate.report("demo", mutate.PARTS["interval"], mutants, 1.0)
    assert "4 mutants, killed 1, survived 1, no tests 0, timeout 0, other 0, not run 2;" in summary
    assert summary.endswith("1 open; 1 s wall")
    text = (tmp_path / "demo.md").read_text()
    assert "Not run (2: the run was stopped before them), by function: `up` 2" in text
    assert "## Open (1)" in text


def test_a_selected_run_names_its_command(tmp_path, monkeypatch) -> None:
    mutate = module()
    monkeypatch.setattr(mutate, "RESULTS", tmp_path)
    monkeypatch.setattr(mutate, "EQUIVALENTS", tmp_path / "equivalent.txt")
    mutants = [mutate.Mutant("rasp.weights.heads.x_compact__mutmut_1", "killed")]
    mutate.report("rasp-attention-selected", mutate.PARTS["rasp-attention"], mutants, 2.0,
                  "python bench/mutate.py rasp-attention --mutants 'rasp.weights.heads.x_compact*'")
    text = (tmp_path / "rasp-attention-selected.md").read_text()
    assert "Written by `python bench/mutate.py rasp-attention --mutants 'rasp.weights.heads.x_compact*'`" in text
    assert "1 mutants, killed 1," in text


def test_a_recheck_after_a_selected_run_stays_within_its_selection(tmp_path, monkeypatch) -> None:
    """After ``--mutants``, the selection is kept in mutants/: ``--report-only`` and ``--recheck``
    read it, so the report is ``PART-selected.md`` (never the full part's report, which would then
    count every unselected mutant as not run) and a recheck runs only selected mutants."""
    mutate = module()
    monkeypatch.setattr(mutate, "ROOT", tmp_path)
    monkeypatch.setattr(mutate, "CONFIG", tmp_path / "setup.cfg")
    monkeypatch.setattr(mutate, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(mutate, "EQUIVALENTS", tmp_path / "equivalent.txt")
    (tmp_path / "results").mkdir()
    (tmp_path / "mutants").mkdir()
    assert mutate.last_selection("interval") is None
    (tmp_path / "mutants" / "interval.seconds").write_text("3.0\n")
    (tmp_path / "mutants" / "interval.selected").write_text("lengthgen.proof.interval.x_gamma*\nlengthgen.proof.interval.x_up*")
    assert mutate.last_selection("interval") == ["lengthgen.proof.interval.x_gamma*", "lengthgen.proof.interval.x_up*"]
    seen = []
    monkeypatch.setattr(mutate, "collect", lambda part, selected=None: seen.append(selected) or
                        [mutate.Mutant("lengthgen.proof.interval.x_gamma__mutmut_1", "killed")])
    monkeypatch.setattr(mutate, "write_config", lambda part: None)
    summary = mutate.run("interval", report_only=True)
    assert seen == [["lengthgen.proof.interval.x_gamma*", "lengthgen.proof.interval.x_up*"]]
    assert summary.startswith("interval-selected: 1 mutants")
    assert (tmp_path / "results" / "interval-selected.md").exists()
    assert not (tmp_path / "results" / "interval.md").exists()
