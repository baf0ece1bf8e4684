"""pytest plugin (being written)."""
