"""``python -m constructions.copying.certify``: see :mod:`constructions.copying.certify.cli`."""
from .cli import main

raise SystemExit(main())
