"""The session's book build, run in the background from the test run's start: ``python -m
tests.support.book_build SHARED`` computes the calculator's data, then builds the book for the
test profiles with it, storing each (pickled, written whole) in SHARED for the fixtures."""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from pathlib import Path

from tests.support.paths import BOOK_PROFILES, copy_book_sources
from tests.support.shared import BOOK, CALCULATOR


def _store(shared: Path, name: str, value: object) -> None:
    tmp = shared / f"{name}.pickle.tmp"
    tmp.write_bytes(pickle.dumps(value))
    os.replace(tmp, shared / f"{name}.pickle")


def main(shared: Path) -> None:
    """Compute and store the calculator's data, then build and store the book."""
    from kvoffload.bookbuild.runner import package_memo
    from kvoffload.bookbuild.site import DERIVED, build_book
    from kvoffload.report import calculator_page
    from kvoffload.studies.calculator_data import calculator_data

    data = calculator_data()
    _store(shared, CALCULATOR, data)
    root = shared / BOOK
    copy_book_sources(root)
    # the build keeps what it derives from the package alone here: it reads the files back
    package_memo(root / DERIVED, "calculator", lambda: calculator_page.site_files(data))
    _store(shared, BOOK, (root, build_book(root, BOOK_PROFILES, n_jobs=2, progress=False)))


if __name__ == "__main__":
    where = Path(sys.argv[1])
    try:
        main(where)
    except BaseException:
        traceback.print_exc()
        (where / f"{BOOK}.failed").touch()
        raise
