"""``sandboxlite eval``: the paper's domains, sandbox mode against vanilla mode."""

from .score import Score

__all__ = ["Score"]
