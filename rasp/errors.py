"""Exception classes of the mini-RASP package.

Every error names its culprit (the s-op, the selector, the machine field, the
input symbol, the step) so that the CLI can print one clear line and exit 2
(see docs/rasp.md).
"""
from __future__ import annotations


class RASPError(Exception):
    """Base class of every error raised by the :mod:`rasp` package."""


class RASPTypeError(RASPError, TypeError):
    """A value has the wrong type for an operation, e.g. a mean over non-numbers
    (the original RASP refuses to average non-numbers too)."""


class AmbiguousAggregateError(RASPError, ValueError):
    """A categorical Aggregate selected several *different* values
    (tracr's compiled model would silently mix their one-hot encodings)."""


class RASPSizeError(RASPError):
    """A dense (n x n) selector evaluation was refused by the size guard
    (docs/rasp.md, "Fast paths")."""


class RASPEvaluationError(RASPError):
    """A user function inside a Map / SequenceMap / predicate raised."""


class ConstantLengthError(RASPError, ValueError):
    """A ConstantSOp / ConstantSelector does not cover the input's length
    (tracr raises ValueError for the same mismatch)."""


class MachineSpecError(RASPError, ValueError):
    """A Turing-machine specification is malformed or incomplete
    (unknown state or symbol, duplicate or missing transition)."""


class MachineInputError(RASPError, ValueError):
    """The input tape contains a symbol outside the machine's alphabet, or an
    input cannot be parsed by a library task."""


class StepBudgetExceeded(RASPError):
    """The reference simulator did not reach a halting state within the step budget."""


class AmbiguousLookupError(RASPError):
    """The runtime monitor of the compiled Turing program found that the n-gram
    lookup matched a key other than the aligned one (the no-repeated-n-gram
    premise of the construction failed)."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position
