"""``plateau``: MLP tables held flat around their points (rasp/weights/mlp.py, ``_piecewise_linear``).

An input within ``p`` of a gap of its point gives that point's output exactly, so the errors of
earlier layers stop at each table instead of passing on times its slope. The tables' outputs are
checked in exact rationals (every compiler-test and tracr-lib program against the interpreter with
flat tables: tests/test_rasp_weights_codes.py); and program P's certificate, whose MLP errors grow with each table without it, keeps
them at rounding level with it.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from rasp import lib
from rasp.core import Map, tokens
from rasp.weights import CompileError, compile_to_transformer
from rasp.weights.mlp import _piecewise_linear
from tests.test_rasp_weights_programs import VOCAB


def _table_output(block, z: Fraction) -> dict[int, Fraction]:
    """The block's output at the scalar ``z`` (its units read ``z`` with weight 1), in rationals."""
    out = {d: Fraction(c) for d, c in block.out_bias.items()}
    for feat, bias, w_out in block.units:
        pre = z * Fraction(feat[0]) + Fraction(bias)
        for d, c in w_out.items():
            out[d] = out.get(d, Fraction(0)) + max(pre, Fraction(0)) * Fraction(c)
    return out


@pytest.mark.parametrize("p", [Fraction(1, 4), Fraction(1, 8), Fraction(0)])
def test_a_table_is_exact_on_its_plateaus_and_monotone_between(p):
    points = [Fraction(x) for x in (-3, 0, 1, 2, 6, 7)]
    values = [5, 5, -2, 7, 7, 0]                    # constant runs, steps both ways
    table = {float(z): {0: float(v)} for z, v in zip(points, values)}
    block = _piecewise_linear(None, {0: 1.0}, 0.0, table, "t", float(p))
    for i, (z, v) in enumerate(zip(points, values)):
        left = p * (z - points[i - 1]) if i else Fraction(1)
        right = p * (points[i + 1] - z) if i + 1 < len(points) else Fraction(1)
        for x in (z - left, z - left / 2, z, z + right / 2, z + right):
            if p or x == z:
                assert _table_output(block, x).get(0, 0) == v, (z, x)
    for a, b, va, vb in zip(points, points[1:], values, values[1:]):
        xs = [a + (b - a) * Fraction(k, 16) for k in range(17)]
        ys = [_table_output(block, x).get(0, 0) for x in xs]
        assert ys == sorted(ys) or ys == sorted(ys, reverse=True)
        assert min(va, vb) <= min(ys) and max(ys) <= max(va, vb)
    changes = sum(a != b for a, b in zip(values, values[1:]))
    assert len(block.units) == (2 * changes if p else 4)   # p = 0: one per change of slope (0, -7, 9, 0, -7)


def test_an_input_off_its_code_gives_the_exact_output_only_with_a_plateau():
    """The MLP of ``(j * 7) % 5`` over an ordinal ``lasts`` (40 positions): its input code moved by
    0.2 leaves the output's code where it was with ``plateau=0.25`` (up to the float64 pass's rounding;
    exact in rationals, above) and moves it without."""
    last = lib.lasts(tokens, tokens)
    program = Map(lambda j: (j * 7) % 5, last)
    moved = {}
    for p in (0.0, 0.25):
        ct = compile_to_transformer(program, VOCAB, 40, plateau=p)
        lay = ct.layout
        node_in = ct.program.by_uid[last.uid]
        node_out = ct.program.output
        assert node_in.encoding == "ordinal"
        mlp = ct.model.blocks[node_out.slot // 2].mlp
        diffs = []
        for v in sorted(node_in.values):
            x = torch.zeros(len(lay), dtype=torch.float64)
            x[lay.one] = 1.0
            for d, c in lay.write(node_in, v).items():
                x[d] = c
            code = lay.dims[id(node_in)][0]
            want = (v * 7) % 5
            for shift in (-0.2, 0.2):
                y = x.clone()
                y[code] += shift
                with torch.no_grad():
                    got = mlp(y[None, None])[0, 0]
                dim = lay.dims[id(node_out)][0] if node_out.encoding == "ordinal" else lay.value_dims[id(node_out)][want]
                diffs.append(abs(float(got[dim]) - (float(lay.write(node_out, want)[dim]))))
        moved[p] = max(diffs)
    assert moved[0.25] <= 1e-12 and moved[0.0] > 0.1        # float64 rounding only, against a slope times 0.2


@pytest.mark.parametrize("p, gap, ramp", [(0.25, 1, 0.5), (0.2, 1, 0.5), (0.25, 4, 2.0), (0.3, 1, 0.25), (0.1, 3, 2.0)])
def test_the_ramp_is_the_widest_power_of_two_that_leaves_p_of_the_gap_on_each_side(p, gap, ramp):
    block = _piecewise_linear(None, {0: 1.0}, 0.0, {0.0: {0: 0.0}, float(gap): {0: 1.0}}, "t", p)
    starts = sorted(-bias for _, bias, _ in block.units)
    assert starts == [(gap - ramp) / 2, (gap + ramp) / 2]
    assert [w[0] for _, _, w in sorted(block.units, key=lambda u: -u[1])] == [1 / ramp, -1 / ramp]


@pytest.mark.parametrize("bad", [0.5, -0.1, 1, True, "0.25", float("nan")])
def test_plateau_must_be_below_one_half(bad):
    with pytest.raises(CompileError, match=r"plateau must be a number with 0 <= plateau < 0.5"):
        compile_to_transformer(tokens, VOCAB, 4, plateau=bad)


def test_zero_is_the_interpolation_through_the_points():
    """The default is 0, the interpolation through the points (whose sizes the other compiler tests pin),
    and flat tables have more hidden units."""
    program = lib.make_hist()
    a = compile_to_transformer(program, VOCAB, 12)
    b = compile_to_transformer(program, VOCAB, 12, plateau=0.0)
    for (k, u), (_, v) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(u, v), k
    assert a.stats["params"] == b.stats["params"]
    flat = compile_to_transformer(program, VOCAB, 12, plateau=0.25)
    assert flat.model.cfg.d_mlp > a.model.cfg.d_mlp and np.isfinite(flat.stats["params"])
