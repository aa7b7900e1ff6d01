"""Errors that end a command with one clear line and exit code 2."""


class CpuftError(ValueError):
    """A problem with the user's input or environment, found before or during a run.

    The CLI prints ``cpuft: <message>`` on stderr and exits with ``exit_code``. To a program
    using the library it is a ``ValueError``, so that ``except ValueError`` catches it.
    """

    exit_code = 2


class CpuftTypeError(CpuftError, TypeError):
    """A value of the wrong type given to the library: a ``TypeError`` too."""


def first_line(error: BaseException | str, width: int = 160) -> str:
    """The first line of ``error``'s message with text on it, cut at ``width`` characters; an
    exception's type name where its message is empty (a bare ``str(e).splitlines()[0]`` raises
    IndexError there, in the middle of reporting another error)."""
    text = str(error)
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    if not line and isinstance(error, BaseException):
        line = type(error).__name__
    return line[:width]
