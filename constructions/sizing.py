"""How every construction here turns ``n_digits``/``d_model`` into a width and a bound.

Each construction has a position block of P dimensions determined by d_model, a bound
n_max(d) on the operand length that P allows, and the smallest d whose bound reaches n. The
argument checks are the same for all of them, so they are written once here."""
from __future__ import annotations

import math
import numbers
import sys
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Callable

import torch

from lengthgen.cli import UsageError, device_problem

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


class CapacityError(ValueError, UsageError):
    """More digits than a construction (or its position table) can hold. It is also a
    :class:`lengthgen.cli.UsageError`, so every command line reports it as bad input: one line, exit 2."""


def resolve_width(
    n_digits: int | None,
    d_model: int | None,
    *,
    d_model_for: Callable[[int], int],
    position_dims: Callable[[int], int],
    max_digits_for: Callable[[int], int],
    bound_name: str,
) -> tuple[int, int, int]:
    """``(d_model, P, bound)`` for a request of ``n_digits`` and/or ``d_model`` (at least one given).

    ``d_model`` defaults to the smallest width whose bound holds ``n_digits``; a given ``d_model``
    must hold ``n_digits``. Raises :class:`CapacityError` naming the bound (``bound_name``, with a
    ``{P}`` field: "the bound 2^{P} - 2") and a width that fits."""
    if n_digits is None and d_model is None:
        raise ValueError("give n_digits or d_model")
    for name, value in (("n_digits", n_digits), ("d_model", d_model)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise TypeError(f"{name} must be a whole number (int), got {value!r} of type {type(value).__name__}")
    if n_digits is not None and n_digits < 1:
        raise CapacityError(f"n_digits must be at least 1, got {n_digits}")
    d_model = d_model_for(n_digits) if d_model is None else d_model
    P, bound = position_dims(d_model), max_digits_for(d_model)
    if bound < 1:
        raise CapacityError(f"d_model = {d_model} holds no digits ({bound_name.format(P=P)} = {bound}); "
                            f"d_model = {d_model_for(1)} is the smallest that does")
    if n_digits is not None and n_digits > bound:
        raise CapacityError(
            f"{n_digits} digits exceed {bound_name.format(P=P)} = {bound} for d_model = {d_model}; "
            f"d_model = {d_model_for(n_digits)} fits"
        )
    return d_model, P, bound


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """``dtype`` as a torch dtype; a name or dtype outside float32/float64/float16/bfloat16 is a
    ``ValueError`` that lists the allowed ones."""
    if isinstance(dtype, str) and dtype.removeprefix("torch.") in DTYPES:
        return DTYPES[dtype.removeprefix("torch.")]
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    raise ValueError(f"dtype must be one of {', '.join(DTYPES)} (a name or a torch dtype), got {dtype!r}")


def check_model(model: Any) -> None:
    """A ``TypeError`` unless ``model`` is a :class:`lengthgen.model.Transformer` (a common slip:
    passing ``build_model()``'s ``(model, meta)`` pair, or ``None``)."""
    from lengthgen.model import Transformer

    if not isinstance(model, Transformer):
        hint = ": build_model() returns (model, meta), unpack it" if isinstance(model, tuple) else ""
        raise TypeError(f"model must be a lengthgen Transformer, got {type(model).__name__}{hint}")


def check_device(device: str | torch.device) -> None:
    """A ``ValueError`` for a device torch does not know, or CUDA where none is available
    (:func:`lengthgen.cli.device_problem`)."""
    problem = device_problem(device)
    if problem:
        raise ValueError(problem)


def long_str(value: int) -> str:
    """``str(value)`` for an integer of any length (Python refuses more than 4300 digits by default)."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return str(value)
    finally:
        sys.set_int_max_str_digits(limit)


def scientific(value: int, digits: int = 3) -> str:
    """``2.26 × 10^74`` (``digits`` significant digits, round half to even)."""
    text = long_str(value)
    if len(text) <= digits:
        return text
    exp = len(text) - 1
    mant = Decimal(text).scaleb(-exp).quantize(Decimal(1).scaleb(-(digits - 1)), rounding=ROUND_HALF_EVEN)
    if mant >= 10:
        mant, exp = mant / 10, exp + 1
    return f"{mant} × 10^{exp}"


#: above this many position dimensions a bound is printed from logarithms: 2^P itself would have
#: more than 30 000 digits (and at d = 10^12 would not fit in memory)
EXACT_P = 100_000


def count_texts(base: int, P: int, offset: int, slope: int = 1) -> tuple[str, str]:
    """``(exact, approximate)`` text of n_max = ⌊(base^P − offset)/slope⌋, instantly for any P: the exact
    decimal value up to :data:`EXACT_P`, above it its number of digits; the approximation from
    base-10 logarithms (mpmath, 30 significant digits, so the first 3 digits are right)."""
    if P <= EXACT_P:
        value = (base**P - offset) // slope
        return long_str(value), scientific(value)
    import mpmath

    with mpmath.workdps(30 + len(str(P))):
        x = P * mpmath.log10(base) - mpmath.log10(slope)  # the offset moves it by less than 10^-30000
        exp = int(mpmath.floor(x))
        mant = mpmath.power(10, x - exp)
    m = round(float(mant), 2)
    if m >= 10:
        m, exp = m / 10, exp + 1
    text = f"{m:.2f} × 10^{exp}"
    return f"(a number of {exp + 1} digits; 2^P is not expanded above P = {EXACT_P})", text


def power_text(base: int, P: int) -> str:
    """``base^P`` as text: exact up to 10^6, else approximate (:func:`count_texts`)."""
    if P * math.log10(base) <= 6:
        return str(base**P)
    return count_texts(base, P, 0)[1]


def bound_table(derive: Callable[[int], Any], d_min: int, d_max: int, formula: str) -> list[str]:
    """The ``--table`` of a construction's ``certify bound``: one line per width d with P and n_max(d),
    both read from ``derive(d)`` (the construction's own bound derivation, with ``.P`` and ``.n_max``)."""
    lines = [f"{'d':>5} {'P':>4}  n_max(d) = {formula}"]
    for d in range(d_min, d_max + 1):
        b = derive(d)
        exact, approx = b.n_max_texts()
        small = len(exact) < 16 and exact.lstrip("-").isdigit()
        lines.append(f"{d:>5} {b.P:>4}  {exact if small else '≈ ' + approx}" + ("  (none fits)" if small and int(exact) < 1 else ""))
    return lines
