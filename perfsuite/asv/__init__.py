"""asv history of perfsuite: how cases appear in asv (``layout``), the project and where to
record (``project``), recording (``record``), reading the history back (``read``), the
``asv run`` side (``bench``) and an offline site (``offline``)."""
