"""The mutation parts of bench/mutate.py name files and tests that exist: a test ID that a renamed
test or a changed parameter no longer matches makes mutmut's first pytest session fail, and the
whole part then reports every mutant as "other" instead of scoring it."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parts() -> dict:
    spec = importlib.util.spec_from_file_location("bench_mutate", ROOT / "bench" / "mutate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name].PARTS


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
