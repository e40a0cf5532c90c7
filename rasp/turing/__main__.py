"""``python -m rasp.turing``: see :mod:`rasp.turing.cli`."""
from rasp.turing.cli import main

raise SystemExit(main())
