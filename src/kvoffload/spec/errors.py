"""The one error type that bad input raises, printed as one line by the CLI."""

from __future__ import annotations


class InputError(Exception):
    """Bad input: names the file, the field and the problem in one line."""

    def __init__(self, problem: str, *, file: str | None = None, field: str | None = None):
        self.problem = " ".join(str(problem).split())
        self.file = file
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        return ": ".join([*parts, self.problem])

    def within(self, *, file: str | None = None, field: str | None = None) -> InputError:
        """Return a copy located in ``file`` with ``field`` prefixed to the field path."""
        path = ".".join(p for p in (field, self.field) if p) or None
        return InputError(self.problem, file=self.file or file, field=path)
