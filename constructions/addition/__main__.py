"""``python -m constructions.addition``: see :mod:`constructions.addition.cli`."""
from .cli import main

raise SystemExit(main())
