"""``python -m rasp.certify``: see :mod:`rasp.certify.cli`."""
from rasp.certify.cli import main

raise SystemExit(main())
