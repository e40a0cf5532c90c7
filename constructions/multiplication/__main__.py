"""``python -m constructions.multiplication``: see :mod:`constructions.multiplication.cli`."""
from .cli import main

raise SystemExit(main())
