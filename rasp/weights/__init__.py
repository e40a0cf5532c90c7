"""Compile RASP programs to the weights of a :class:`lengthgen.Transformer`.

``compile_to_transformer(program, vocab, max_seq_len, causal=True)`` returns a
:class:`CompiledTransformer` whose ``.model`` is a standard lengthgen Transformer; see
docs/turing-programs.md ("Compiling RASP to weights") for the construction and its bounds.
"""
from rasp.weights.assemble import UNDECIDED_VALUE, CompiledTransformer, compile_to_transformer
from rasp.weights.graph import CompileError
from rasp.weights.heads import MARGIN

__all__ = ["CompileError", "CompiledTransformer", "MARGIN", "UNDECIDED_VALUE", "compile_to_transformer"]
