"""Errors that end a command with one clear line and exit code 2."""


class CpuftError(Exception):
    """A problem with the user's input or environment, found before or during a run.

    The CLI prints ``cpuft: <message>`` on stderr and exits with ``exit_code``.
    """

    exit_code = 2
