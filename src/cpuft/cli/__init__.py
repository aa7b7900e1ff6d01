"""The ``cpuft`` command line: a thin layer over the library."""
