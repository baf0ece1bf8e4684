"""The asv history store of perfsuite, below the benchmark registry: how cases appear in asv
(``layout``), the project and where to record (``project``), recording (``record``) and
reading the history back (``read``). Its faces (``asv run``'s classes, the offline site) are
``perfsuite.faces``; the options that name a record target are in ``perfsuite.faces.options``."""
