"""Copy and reverse with coupled position IDs: 1 layer, 1 head, no MLP (docs/copying.md)."""
from .model import *  # noqa: F401,F403
from .model import __all__  # noqa: F401
