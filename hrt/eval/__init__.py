"""Retrieval-quality evaluations (``hrt eval ...``). Each suite is its own module: ``locomo``
(evidence retrieval on LoCoMo), ``changes`` (facts that change)."""
