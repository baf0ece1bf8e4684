"""tinyproj: a user's project (perfsuite's test data)."""
__version__ = "0.1.0"
