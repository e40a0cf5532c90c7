"""rasp.weights.affine: which Maps and SequenceMaps are taken for affine (against forms worked out
by hand in exact rationals), and the folding of affine chains (a compiled model against the RASP
interpreter's dense path); docs/turing-programs.md, "Linear maps".
"""
from __future__ import annotations

import random
from fractions import Fraction

from rasp.core import Aggregate, Comparison, Map, Select, SequenceMap, indices, length, tokens
from rasp.weights.affine import affine_form
from rasp_weights_checks import assert_compiled_agrees

LIMIT = 100


def test_forms_affine_by_definition_are_integral_only_on_integers():
    """``+`` and unary ``-`` take their coefficients from the definition; the form is integral
    only when every input value is an int (floats and bools are not)."""
    assert affine_form(tokens + indices, [[0, 1], [2, 3]], LIMIT).integral
    for domain in ([0.5, 1.5], [False, True], [1, 2.0]):
        form = affine_form(tokens + indices, [domain, [0, 1]], LIMIT)
        assert (form.coeffs, form.const, form.integral) == ((1, 1), 0, False), domain
    assert affine_form(-tokens, [[0.5]], LIMIT).integral is False


def test_verified_forms_are_integral_only_with_integers_throughout():
    """A form found by evaluation is integral when the inputs, the coefficients and the constant
    all are integers: 2*x on floats is not, nor x + 1/2 or x/2 on ints."""
    double = Map(lambda x: 2 * x, tokens)
    assert affine_form(double, [[1, 3]], LIMIT).integral
    for f, domain, coeffs, const in ((double, [0.5, 1.5], (2,), 0),
                                     (Map(lambda x: x + 0.5, tokens), [1, 3], (1,), Fraction(1, 2)),
                                     (Map(lambda x: x / 2, tokens), [1, 3], (Fraction(1, 2),), 0)):
        form = affine_form(f, [domain], LIMIT)
        assert (form.coeffs, form.const, form.integral) == (coeffs, const, False), domain


def test_the_number_of_domains_must_match_the_arguments():
    """A Map reads one input and a SequenceMap two; any other count is not an affine form."""
    assert affine_form(-tokens, [[1, 2], [3]], LIMIT) is None
    assert affine_form(tokens + indices, [[1, 2]], LIMIT) is None
    assert affine_form(Map(lambda x: 2 * x, tokens), [[1, 2], [3]], LIMIT) is None


def test_unknown_or_empty_domains_and_the_pair_limit():
    """No form without every value set; exactly ``limit`` pairs are still checked."""
    double = Map(lambda x: 2 * x, tokens)
    assert affine_form(double, [None], LIMIT) is None
    assert affine_form(double, [[]], LIMIT) is None
    xs = list(range(-3, 17, 2))          # steps of 2: the slope is the rise over the step
    form = affine_form(Map(lambda x: 3 * x + 1, tokens), [xs], len(xs))
    assert (form.coeffs, form.const, form.integral) == ((3,), 1, True)
    assert affine_form(Map(lambda x: 3 * x + 1, tokens), [xs], len(xs) - 1) is None


def test_a_constant_input_gets_coefficient_zero():
    """x is always 3: f(x, y) = x*y + 2 is 3*y + 2, with no term in x (the printed form)."""
    for f, domains, coeffs in ((lambda x, y: x * y + 2, [[3], [0, 1, 2, 5]], (0, 3)),
                               (lambda y, x: x * y + 2, [[0, 1, 2, 5], [3]], (3, 0))):
        form = affine_form(SequenceMap(f, tokens, indices), domains, LIMIT)
        assert (form.coeffs, form.const, form.integral) == (coeffs, 2, True)
        assert form.text(["a", "b"]) == ("3*b + 2" if coeffs[0] == 0 else "3*a + 2")


def test_only_points_of_the_domains_are_evaluated():
    """x + 2*y on x in {10, 11}, y in {0, 1}; the function fails for y >= 5, outside its domain,
    so the check must not evaluate it there."""
    def f(x, y):
        if y >= 5:
            raise ValueError(y)
        return x + 2 * y

    for g, domains, coeffs in ((f, [[10, 11], [0, 1]], (1, 2)),
                               (lambda y, x: f(x, y), [[0, 1], [10, 11]], (2, 1))):
        form = affine_form(SequenceMap(g, tokens, indices), domains, LIMIT)
        assert (form.coeffs, form.const, form.integral) == (coeffs, 0, True)


def test_a_chain_folds_into_a_reader_that_also_reads_an_input():
    """opp = length - indices, d = 2*opp + 3 and y = d - indices fold into one identity table
    y = 2*length - 3*indices + 3 (coefficient 2 and constant 3 carried through the chain, indices
    read twice); the selector reads y, so tokens[2L - 3i + 3] or "-" at each position."""
    opp = (length - indices).named("opp")
    d = Map(lambda o: 2 * o + 3, opp).named("d")
    y = (d - indices).named("y")
    program = Aggregate(Select(indices, y, Comparison.EQ), tokens, default="-")
    rng = random.Random(0)
    inputs = [[rng.choice("abc") for _ in range(n)] for n in range(1, 13) for _ in range(3)]
    ct = assert_compiled_agrees(program, list("abc"), 12, False, inputs)
    folded = sorted(n.label for n in ct.program.nodes if n.kind == "folded")
    assert folded == ["d", "opp"], folded
    node = ct.program.by_uid[y.uid]
    assert [p.label for p in node.deps] == ["length", "indices"]
    assert (node.affine.coeffs, node.affine.const) == ((2, -3), 3)
    assert [b.node.label for bl in ct.mlps for b in bl] == ["length", "y"]
    for xs in inputs:
        n = len(xs)
        want = [xs[2 * n - 3 * i + 3] if 0 <= 2 * n - 3 * i + 3 < n else "-" for i in range(n)]
        assert ct.run(xs) == want, xs
