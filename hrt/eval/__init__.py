"""Retrieval-quality evaluations (``hrt eval ...``). Each suite is its own module: ``locomo``."""
