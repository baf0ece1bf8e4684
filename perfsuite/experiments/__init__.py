"""Orchestrations beyond a plain run, each over ``suite.run_one``: the harness's overhead
against a C loop (``overhead``), the Stash stall breakdown (``stalls``), and how often the gate
catches an injected slowdown (``detection``)."""
