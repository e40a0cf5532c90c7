"""The rasp package's layout: the language and the weight compiler know nothing of Turing machines,
no two modules import each other (directly or through others), and the public names stay
importable from ``rasp``."""
from __future__ import annotations

import ast
from pathlib import Path

import rasp

ROOT = Path(__file__).resolve().parents[1]


def module_imports() -> dict[str, set[str]]:
    """Module -> the rasp modules it imports anywhere in its text (function-level imports too)."""
    files = {".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): f
             for f in (ROOT / "rasp").rglob("*.py")}
    graph = {}
    for name, path in files.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "rasp":
                deps.add(node.module)
                deps.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in files)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.split(".")[0] == "rasp")
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    """Whether ``start`` imports ``goal`` through other modules (the package ``rasp`` itself,
    which re-exports everything, is not walked through)."""
    todo, seen = list(graph[start]), set()
    while todo:
        m = todo.pop()
        if m == goal:
            return True
        if m in seen or m == "rasp":
            continue
        seen.add(m)
        todo.extend(graph[m])
    return False


def test_no_two_rasp_modules_import_each_other():
    graph = module_imports()
    cycles = [(a, b) for a in graph for b in graph[a]
              if "rasp" not in (a, b) and not b.startswith(a + ".") and not a.startswith(b + ".") and reaches(graph, b, a)]
    assert cycles == []


def test_the_language_and_the_weight_compiler_know_nothing_of_machines():
    """Only the machines' own subpackage and the certificate's command line (``--machine`` builds
    program P) may import ``rasp.turing``."""
    graph = module_imports()
    for name, deps in graph.items():
        if name in ("rasp", "rasp.certify.cli") or name.startswith("rasp.turing"):
            continue
        assert not any(d.startswith("rasp.turing") for d in deps), (name, deps)


def test_the_turing_parts_live_in_their_subpackage():
    for old in ("machines", "library", "compiler", "specs", "weights/turing.py", "weights/plot.py"):
        assert not (ROOT / "rasp" / old).exists() and not (ROOT / "rasp" / f"{old}.py").exists(), old
    assert (ROOT / "rasp" / "turing" / "specs" / "parity.json").is_file()


def test_public_names_stay_importable_from_rasp():
    for name in ("TuringMachine", "TuringProgram", "Vocab", "compile_turing_machine", "simulate", "build_trace",
                 "min_ngram", "Aggregate", "Select", "evaluate", "LinearSequenceMap", "ConstantSOp"):
        assert hasattr(rasp, name), name
    assert rasp.TuringProgram.__module__ == "rasp.turing.program"
