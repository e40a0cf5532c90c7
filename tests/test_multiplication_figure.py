"""``python -m constructions.multiplication.figure`` draws one panel per head that attends."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from constructions.multiplication.figure import attention_maps, main, role_labels


def test_maps_are_titled_by_what_each_head_reads_and_rows_sum_to_one() -> None:
    maps, labels = attention_maps("653", 49)
    assert labels == role_labels(3) and len(labels) == 13 and labels[7] == "="
    assert [t.split("\nreads ")[1] for t, _ in maps][2:] == ["b_0", "b_1", "a_{i+1}", "a_i", "a_{i-1}", "a_{i-2}"]
    for _, pattern in maps:
        assert pattern.shape == (13, 13) and np.allclose(pattern.sum(axis=1), 1)


def test_cli_writes_the_png_and_refuses_bad_input(tmp_path: Path) -> None:
    out = tmp_path / "att.png"
    assert main(["--a", "12", "--b", "7", "--output", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["--a", "12", "--b", "123"]) == 2
