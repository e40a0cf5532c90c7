"""Turing machines and their Turing-Program simulators (Hou et al., arXiv 2407.03310).

- :mod:`rasp.turing.machines`: machines, the trace format, the plain-Python reference simulator;
- :mod:`rasp.turing.library`: the library machines (addition, parity, ...) and random machines;
- :mod:`rasp.turing.program`: program P, the RASP simulator of a machine;
- :mod:`rasp.turing.transformer`: program P compiled to transformer weights;
- :mod:`rasp.turing.rules`: what the last two share (the local rule, the lookup guard, the monitor);
- :mod:`rasp.turing.cli`: ``python -m rasp.turing``; :mod:`rasp.turing.plot`: the attention figure of a compiled simulator.

The RASP language itself (:mod:`rasp.core`, :mod:`rasp.evaluate`) and the weight compiler
(:mod:`rasp.weights`) know nothing of machines.
"""
from rasp.turing.machines import TuringMachine, Vocab, build_trace, min_ngram, simulate
from rasp.turing.program import TuringProgram, compile_turing_machine

__all__ = ["TuringMachine", "TuringProgram", "Vocab", "build_trace", "compile_turing_machine", "min_ngram", "simulate"]
