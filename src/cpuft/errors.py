"""Errors that end a command with one clear line and exit code 2."""


class CpuftError(ValueError):
    """A problem with the user's input or environment, found before or during a run.

    The CLI prints ``cpuft: <message>`` on stderr and exits with ``exit_code``. To a program
    using the library it is a ``ValueError``, so that ``except ValueError`` catches it.
    """

    exit_code = 2


class CpuftTypeError(CpuftError, TypeError):
    """A value of the wrong type given to the library: a ``TypeError`` too."""
