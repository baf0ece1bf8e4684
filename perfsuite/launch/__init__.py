"""Starting worlds: ``launchers`` builds command lines (pure), ``world`` runs them (the only
place in the suite that starts processes)."""
