"""The folder ``cpuft bench --script`` puts first on a script's PYTHONPATH: its
``sitecustomize`` times the script's optimizer steps."""
