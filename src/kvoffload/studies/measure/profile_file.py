"""The measured profile: its mapping over a catalog system, checked, and written whole or not at all."""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import stat
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import yaml

from kvoffload.inputs import catalog
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.files import check_writable
from kvoffload.inputs.hardware import PART_MODELS, build_system
from kvoffload.inputs.limits import MAX_NAME_BYTES
from kvoffload.inputs.text import NAME_CHARS
from kvoffload.studies.measure.plan import Report, plain_note

PROFILE_MODE = 0o644  # a profile is shared like any config file (less where the umask says so)


def profile(
    report: Report, *, base: str, ident: str, name: str, base_raw: dict | None = None
) -> dict[str, Any]:
    """Return the profile mapping to write, checked against the hardware schema before it is.

    Measured figures go over the ``base`` catalog system's parts; a part measured whole (every
    required field of its schema) replaces the base's. ``base_raw``: the base system's mapping
    when it is not a catalog one (a detected machine). InputError when it would not load.
    """
    base_raw = base_raw if base_raw is not None else catalog.systems()[base]
    measured: dict[str, dict[str, Any]] = {}
    for key, fig in report.figures.items():
        kind, fld = key.split(".")
        measured.setdefault(kind, {})[fld] = fig if "kind" in fig else fig["value"]
    names = {
        "host": plain_note(
            f"this machine's host ({platform.processor() or platform.machine()})", NAME_CHARS
        ),
        "storage": "the measured filesystem's device",
    }
    out: dict[str, Any] = {
        "id": ident,
        "name": name,
        "description": f"Measured by kvoffload measure; parts it could not measure come from {base}.",
    }
    for kind, model in PART_MODELS.items():
        ref, fields = base_raw[kind], measured.get(kind)
        if not fields:
            out[kind] = ref
            continue
        if kind in names:
            fields = {"name": names[kind], **fields}
        required = {f.encode_name for f in msgspec.structs.fields(model) if f.required}
        if required <= fields.keys():  # measured whole: the base part's peaks need not bound it
            out[kind] = fields
        else:  # measured figures over the base part
            out[kind] = {"base": ref, **fields} if isinstance(ref, str) else {**ref, **fields}
    out["measurements"] = {
        "tables": report.tables,
        "skipped": [plain_note(s) for s in report.skipped],
        "notes": [plain_note(n) for n in report.notes],
    }
    out = yaml.safe_load(yaml.safe_dump(out, sort_keys=False))  # plain values, as the file holds
    try:
        build_system(out, ident=ident, origin="kvoffload measure")
    except InputError as exc:  # a schema change the measurement did not follow: say so
        raise exc.within(file=f"measured profile {ident!r}") from None
    return out


def check_out(out: Path) -> Path:
    """Return the file a profile for ``out`` goes to; InputError when it could not be written.

    Called before measuring: a folder that is missing, not a folder or not writable, or an
    ``out`` that is a directory or another non-file, is refused in one line.
    """
    where = {"file": str(out), "field": "--out"}
    target = Path(os.path.realpath(out))  # through a symbolic link to the file it names
    if len(target.name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise InputError(f"the file name is longer than {MAX_NAME_BYTES} bytes", **where)
    if target.is_dir():
        raise InputError("is a directory; give a file name for the profile", **where)
    if target.exists() and not stat.S_ISREG(target.stat().st_mode):
        raise InputError("exists and is not a regular file; give a file name", **where)
    folder = target.parent
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a directory"
        raise InputError(f"its folder {folder} {what}", **where)
    check_writable(folder, **where)
    return target


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


MEASURED_HEADER = (
    "# Written by `kvoffload measure`: measured figures say how and when they were taken.\n"
)


def write_profile(raw: dict[str, Any], out: Path, header: str = MEASURED_HEADER) -> None:
    """Write a profile to ``out`` whole or not at all, mode 0644 (less where the umask says so).

    A temporary file in the same folder is written, synced and renamed over ``out``. On any failure (a full disk, a signal) the temporary file is removed and ``out`` is left
    as it was; an OSError becomes an InputError naming the file.
    """
    target = check_out(out)
    text = header + yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)
    umask = os.umask(0)
    os.umask(umask)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".kvoffload-profile-", suffix=".tmp", dir=target.parent)
        try:
            os.fchmod(fd, PROFILE_MODE & ~umask)
            _write_all(fd, text.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        problem = exc.strerror or str(exc)
        if exc.errno == errno.ENOSPC:
            problem += "; nothing was written"
        raise InputError(f"could not write the profile: {problem}", file=str(out)) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
