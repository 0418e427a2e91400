"""Scorers: pure functions from a model's response (and the reference) to a ``Score``."""
