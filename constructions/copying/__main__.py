"""``python -m constructions.copying``: see :mod:`constructions.copying.cli`."""
from .cli import main

raise SystemExit(main())
