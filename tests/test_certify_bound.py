"""Theorem 5.1's length bound n_max(d) against brute-force counting."""
from __future__ import annotations

import itertools

import pytest

from constructions.addition import START_ID, CapacityError, hypercube_code
from constructions.addition.certify.bound import bound_lines, derive_bound, n_max, table_lines
from constructions.sizing import scientific
from constructions.addition.certify.cli import main
from constructions.addition.certify.exact import ExactModel, check_pairs
from lengthgen.positions import coupled_addition_ids


def brute_force_n_max(P: int) -> int:
    """Largest n for which some start s ≥ 2 gives every ID of the format its own non-zero code."""
    best = 0
    for n in itertools.count(1):
        ok = False
        for s in range(2, 2**P + 3):
            ids = sorted(set(coupled_addition_ids(n, s).tolist()) - {0})
            codes = {tuple(hypercube_code(p, P)) for p in ids}
            if len(codes) == len(ids) and all(any(c) for c in codes):
                ok = True
                break
        if not ok:
            return best
        best = n


@pytest.mark.parametrize("d", range(21, 30))
def test_bound_matches_brute_force_counting(d: int) -> None:
    P = (d - 17) // 2
    assert len({tuple(hypercube_code(p, P)) for p in range(1, 2**P + 1)}) == 2**P  # distinct non-zero codes
    assert n_max(d) == brute_force_n_max(P)


def test_paper_figure_for_d512() -> None:
    b = derive_bound(512)
    assert (b.P, b.token_dims, b.unused, b.alphabet) == (247, 17, 1, (-1, 1))
    assert b.n_max == 2**247 - 2
    assert scientific(b.n_max) == "2.26 × 10^74"
    text = "\n".join(bound_lines(512))
    assert str(2**247 - 2) in text and "2^247 − 2" in text


def test_scientific_rounding() -> None:
    assert scientific(999) == "999"
    assert scientific(123_456) == "1.23 × 10^5"
    assert scientific(99_960) == "1.00 × 10^5"
    assert scientific(2**503 - 2) == "2.62 × 10^151"  # the d = 1024 row of `bound --table`


def test_table_covers_21_to_1024() -> None:
    lines = table_lines(21, 1024)
    assert len(lines) == 1 + (1024 - 21 + 1)
    row = {int(line.split()[0]): line for line in lines[1:]}
    assert row[23].split()[-1] == "6" and row[64].split()[-1] == str(2**23 - 2)
    assert row[512].endswith("≈ 2.26 × 10^74")


def test_d_below_21_is_rejected() -> None:
    with pytest.raises(CapacityError):
        derive_bound(20)


def test_bound_cli(capsys) -> None:
    assert main(["bound", "--d-model", "512"]) == 0
    out = capsys.readouterr().out
    assert "226156424291633194186662080095093570025917938800079226639565593765455331326" in out
    assert "2.26 × 10^74" in out


def test_bound_is_tight_one_more_digit_breaks_the_construction() -> None:
    """At d = 21 (P = 2, n_max = 2) a 3-digit addition needs 5 non-zero IDs but only 4 codes exist:
    with the table extended anyway (IDs wrap around the hypercube), exact hard-max arithmetic fails."""
    model = ExactModel.build(21, START_ID + 3 + 1)
    assert check_pairs(model, 2, [(99, 99), (57, 68)])[1] == []
    pairs = [(a, b) for a in range(0, 1000, 199) for b in range(0, 1000, 211)]
    _, wrong = check_pairs(model, 3, pairs)
    assert len(wrong) > len(pairs) // 2, "the construction should break beyond n_max(d)"
