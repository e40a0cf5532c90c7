"""``python -m constructions.multiplication.certify``: see :mod:`constructions.multiplication.certify.cli`."""
from .cli import main

raise SystemExit(main())
