"""Errors that reach the user as one clear line, never a traceback."""
from __future__ import annotations


class NasStabError(Exception):
    """Base class of every error nas_stab reports to the user."""

    exit_code = 1


class SpecError(NasStabError):
    """Bad input: an experiment file, a `--set` override or a command-line value.

    Rendered as ``file:line: key: message``; the CLI exits with code 2.
    """

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None, key: str | None = None):
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        key = f"{self.key}: " if self.key else ""
        return f"{where}{key}{self.message}"


class SpecErrors(SpecError):
    """Several problems of one file, reported together (`nas-stab validate` lists them
    all); behaves as its first error where one is expected."""

    def __init__(self, errors: list[SpecError]):
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.message, file=first.file, line=first.line, key=first.key)

    def lines(self) -> list[str]:
        return [SpecError.__str__(e) for e in self.errors]

    def __str__(self) -> str:
        return "\n".join(self.lines()) if hasattr(self, "errors") else super().__str__()


class DataError(NasStabError):
    """A dataset file is missing, truncated or malformed; names the file."""

    exit_code = 2


class RunError(NasStabError):
    """A run directory cannot be used as asked (changed spec without --fresh, locked, ...)."""

    exit_code = 2


class RunErrors(RunError):
    """Several problems of one run directory's records, reported together (one line each); behaves as its first."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__(self.problems[0])

    def lines(self) -> list[str]:
        return list(self.problems)

    def __str__(self) -> str:
        return "\n".join(self.problems)


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: runs in progress are closed as interrupted and the
    records written so far stay; the same command resumes. Exit code 143 (128 + 15)."""


_termination_requested = False


def request_termination(signum: int | None = None, frame: object = None) -> None:
    """The SIGTERM handler of `nas-stab run`: raises `Terminated` where the program is, and remembers the request.
    Python drops an exception raised while it runs a garbage-collector callback (it prints "Exception ignored in"
    and goes on), so a SIGTERM arriving then would be lost; `check_termination` raises it again at the driver's
    next safe point (after the records of the runs that finished are written)."""
    global _termination_requested
    _termination_requested = True
    raise Terminated()


def check_termination() -> None:
    """Raise `Terminated` if a SIGTERM was received (its raise may have been dropped: `request_termination`)."""
    if _termination_requested:
        raise Terminated()


def clear_termination() -> None:
    """Forget a handled SIGTERM (a new command in the same process starts without one)."""
    global _termination_requested
    _termination_requested = False


class Interrupted(KeyboardInterrupt):
    """Ctrl-C that a library caught itself (Ray Tune's own SIGINT handler ends `Tuner.fit` early
    without raising): re-raised by the runner so that the run ends as interrupted, like Ctrl-C
    (records written so far stay, the same command resumes, exit code 130)."""
