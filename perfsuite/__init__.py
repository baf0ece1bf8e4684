"""perfsuite: a pytest-based performance regression suite for distributed deep learning."""
__version__ = "0.1.0"
