"""The one error type that bad input raises, printed as one line by the CLI."""

from __future__ import annotations


def one_line(text: object) -> str | None:
    """Return ``text`` on one line: every unprintable character (newline, CR, ESC) escaped."""
    if text is None:
        return None
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


class InputError(Exception):
    """Bad input: names the file, the field and the problem in one line."""

    def __init__(self, problem: str, *, file: str | None = None, field: str | None = None):
        self.problem = one_line(" ".join(str(problem).split())) or ""
        self.file = one_line(file)
        self.field = one_line(field)
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        return ": ".join([*parts, self.problem])

    def within(self, *, file: str | None = None, field: str | None = None) -> InputError:
        """Return a copy located in ``file`` with ``field`` prefixed to the field path."""
        path = ".".join(p for p in (field, self.field) if p) or None
        return InputError(self.problem, file=self.file or file, field=path)
