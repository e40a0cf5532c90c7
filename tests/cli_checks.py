"""The check every command-line test here makes of bad input: exit status 2, nothing on stdout, and
exactly one ``PROG: error: …`` line on stderr that names the problem (never a traceback)."""
from __future__ import annotations

from typing import Callable

import pytest


def assert_one_line_error(main: Callable[[list[str]], int], argv: list[str], prog: str, message: str,
                          capsys: pytest.CaptureFixture) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # a CLI that let argparse exit would fail here, not pass
        code = exc.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, err
    assert out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error:") and message in lines[0], err
