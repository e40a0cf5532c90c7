"""Exact integer arithmetic for comparisons between key indices and arbitrary real queries.

The fast attention paths of :mod:`rasp.kernels` replace a comparison such as
``indices + c < q`` by a range of key positions. That replacement is exact only if it
is derived from ``floor``/``ceil`` of the query itself, never from float arithmetic on
``q - c`` and never from integer rewrites such as ``k < q  <=>  k <= q - 1`` (true only
for integer ``q``). For an integer ``j`` and offset ``c``:

* ``j + c <= q``  iff  ``j <= floor(q) - c``;
* ``j + c <  q``  iff  ``j <= ceil(q) - 1 - c``  (equivalently ``floor(q) - c``, minus one
  when ``q`` is itself an integer);
* ``j + c == q``  iff  ``q`` is an integer and ``j == q - c``.

``math.floor`` is exact for Python ints, floats, Fractions and numpy scalars, and an
int/float comparison in Python is exact, so no rounding enters. NaN compares false with
everything (no key selected); ``+inf`` bounds nothing; ``-inf`` selects no key.
See docs/rasp.md, "Fast paths".
"""
from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from rasp.errors import RASPTypeError

NO_KEY = -1                      # an upper bound below every key index
FLOAT_EXACT = 2 ** 53            # integers up to this size convert to float64 exactly


def index_upper_bound(q: Any, offset: int, strict: bool, selector_label: str) -> float:
    """Largest key index ``j`` with ``j + offset < q`` (``strict``) or ``j + offset <= q``.

    Returns ``NO_KEY - offset`` or lower when no index qualifies, ``math.inf`` when every
    index does. A query that cannot be ordered against an integer is a RASPTypeError,
    as in the dense path.
    """
    if type(q) is int:                                # the common case, kept cheap
        return q - strict - offset
    try:
        top = math.floor(q)
    except OverflowError:                             # +-inf
        return math.inf if q > 0 else NO_KEY
    except ValueError:
        if q != q:                                    # NaN: every comparison is false
            return NO_KEY
        raise RASPTypeError(f"selector {selector_label!r}: cannot bound key indices by the "
                            f"query {q!r}") from None
    except TypeError:
        raise RASPTypeError(f"selector {selector_label!r}: an index bound compares key indices "
                            f"with the query {q!r}, which is not a real number") from None
    if strict and top == q:
        top -= 1
    return top - offset


def exact_index(q: Any) -> int | None:
    """``q`` as an int when it equals one exactly (``2``, ``2.0``, ``Fraction(4, 2)``), else None."""
    if isinstance(q, numbers.Integral):
        return int(q)
    if isinstance(q, numbers.Complex) and not isinstance(q, numbers.Real) and q.imag == 0:
        q = q.real                                    # 2+0j == 2 in Python
    try:
        top = math.floor(q)
    except (TypeError, ValueError, OverflowError):
        return None
    return top if top == q else None


def self_equal(key: Any) -> bool:
    """False for keys that an EQ select can never match: NaN, or a tuple holding NaN.

    (A dict lookup matches the very same NaN object by identity; ``==`` does not.)
    """
    if isinstance(key, tuple):
        return all(k == k for k in key)
    return bool(key == key)


def numpy_compare_is_exact(arr: np.ndarray, q: Any) -> bool:
    """Whether comparing the numeric array ``arr`` with ``q`` in numpy gives Python's answer.

    numpy compares an int64 with a float64 by rounding the int to float64, which is
    inexact beyond 2**53 (``2**53 + 1 == 2.0**53`` there, not in Python).
    """
    int_array = arr.dtype.kind in "biu"
    if isinstance(q, np.integer):
        return int_array and np.result_type(arr, q).kind in "biu"
    if isinstance(q, int):                            # bool included
        return int_array or abs(q) <= FLOAT_EXACT
    if isinstance(q, (float, np.floating)) and np.dtype(type(q)).itemsize <= 8:
        if not int_array or arr.size == 0:
            return True
        return max(abs(int(arr.min())), abs(int(arr.max()))) <= FLOAT_EXACT
    return False
