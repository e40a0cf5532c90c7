"""``python -m constructions.addition.certify``: see :mod:`constructions.addition.certify.cli`."""
from .cli import main

raise SystemExit(main())
