"""``python -m constructions.nope``: see :mod:`constructions.nope.cli`."""
from .cli import main

raise SystemExit(main())
