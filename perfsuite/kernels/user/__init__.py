"""The ranks' side of a user's own benchmark (``step.py``)."""
