"""Mini-RASP interpreter and the Turing-machine -> RASP compiler.

Semantics, fast paths and the differences from tracr and RASP-L: docs/rasp.md.
The Turing-machine simulator (program P) follows the RASP construction of
Hou et al., "Universal Length Generalization with Turing Programs" (arXiv 2407.03310).

* :mod:`rasp.core`: the immutable expression graph with tracr's names;
* :mod:`rasp.evaluate`: batch (causal or not) and incremental evaluation;
* :mod:`rasp.lib`: RASP-L adapters and helpers; :mod:`rasp.analyse`: size and depth;
* :mod:`rasp.turing.machines`, :mod:`rasp.turing.library`: Turing machines, simulator, traces, tasks;
* :mod:`rasp.tracr_ops`: tracr's LinearSequenceMap, ConstantSOp, ConstantSelector;
* :mod:`rasp.turing.program`: ``compile_turing_machine``; :mod:`rasp.turing`: the CLI.
"""
from rasp.analyse import ProgramStats, analyse
from rasp.turing.program import TuringProgram, compile_turing_machine
from rasp.core import (Aggregate, Comparison, Encoding, Full, Map, Select, SelectorAnd,
                       SelectorNot, SelectorOr, SelectorWidth, SequenceMap, SOp, Selector,
                       categorical, indices, length, numerical, tokens)
from rasp.errors import (AmbiguousAggregateError, AmbiguousLookupError, ConstantLengthError,
                         MachineInputError, MachineSpecError, RASPError, RASPSizeError,
                         RASPTypeError, StepBudgetExceeded)
from rasp.evaluate import Evaluation, IncrementalEvaluator, evaluate
from rasp.turing.machines import TuringMachine, Vocab, build_trace, min_ngram, simulate
from rasp.tracr_ops import ConstantSelector, ConstantSOp, LinearSequenceMap

__all__ = [
    "Aggregate", "AmbiguousAggregateError", "AmbiguousLookupError", "Comparison",
    "ConstantLengthError", "ConstantSOp", "ConstantSelector", "Encoding", "Evaluation", "Full",
    "IncrementalEvaluator", "LinearSequenceMap", "MachineInputError", "MachineSpecError", "Map",
    "ProgramStats", "RASPError", "RASPSizeError", "RASPTypeError", "SOp", "Select", "Selector",
    "SelectorAnd", "SelectorNot", "SelectorOr", "SelectorWidth", "SequenceMap",
    "StepBudgetExceeded", "TuringMachine", "TuringProgram", "Vocab", "analyse", "build_trace",
    "categorical", "compile_turing_machine", "evaluate", "indices", "length", "min_ngram",
    "numerical", "simulate", "tokens",
]


_WEIGHTS = ("compile_to_transformer", "CompiledTransformer", "CompileError")


def __getattr__(name: str):
    """``rasp.compile_to_transformer`` & co. come from :mod:`rasp.weights`, imported on first use
    (it needs torch; the interpreter does not)."""
    if name in _WEIGHTS:
        from rasp import weights

        return getattr(weights, name)
    raise AttributeError(f"module 'rasp' has no attribute {name!r}")
