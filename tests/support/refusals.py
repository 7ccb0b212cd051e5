"""The one-line refusal every bad input gets: exit 2, one line naming the file, nothing on stdout."""

from __future__ import annotations


def assert_refused(r, path, fragment) -> None:
    """Assert a run exited 2 with one line on stderr naming ``path`` and ``fragment``, no traceback."""
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert "Traceback" not in r.err
    assert str(path) in lines[0]
    assert fragment in lines[0], lines[0]
    assert r.out == ""
