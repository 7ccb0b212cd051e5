"""Fuzz the profile, scenario and model-config loaders: InputError is the only way to fail.

Hypothesis mutates valid documents (a catalog system profile, a scenario, a catalog
config.json) by putting junk at one place, writes them as YAML or JSON, and loads them the way
the CLI does; it also feeds raw bytes. A few thousand examples in all. A last test runs the
CLI in-process on such files: exit 0 or 2, at most one stderr line on failure, no traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvoffload.cli import main
from kvoffload.engines.scenario import load_scenario
from kvoffload.inputs import catalog
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.models import load_model

_TMP = Path(tempfile.mkdtemp(prefix="kvoffload-fuzz-"))
_FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)

SYSTEM = catalog.systems()["t4-pcie3"]
CONFIG = catalog.load("models/qwen3-30b-a3b")["config"]
MODEL_FILE = catalog.load("models/gpt-oss-20b")
SCENARIO = {
    "hardware": "t4-pcie3",
    "model": "qwen2.5-7b",
    "engine": "generic",
    "precision": {"weights": "int4", "kv": "fp8"},
    "workload": {"batch": 2, "prompt": 4096, "generate": 16},
    "placement": {"weights": {"gpu": 1.0}, "kv": {"cpu": 1.0}},
    "attention": "gpu",
    "overlap": "pipeline",
}

_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)),
    max_size=40,
)
_TRICKY = st.sampled_from(
    [
        "",
        " ",
        "25 GB",
        "25 GB/s",
        "1e400 GB/s",
        "-3 GB/s",
        "nan GB/s",
        "0 B",
        "a\nb",
        "\u202e",
        "x" * 300,
        " " * 2000 + "1 GB/s",
        "full_attention",
        "sliding_attention",
        "mamba",
        "auto",
        "../../etc/passwd",
        "/dev/zero",
        "llama-3.1-8b",
        "t4-pcie3",
        "hybrid",
    ]
)
_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 2**64, 10**30, 10**100]),
    st.floats(allow_nan=True, allow_infinity=True),
)
_SCALARS = st.one_of(st.none(), st.booleans(), _NUMBERS, _TEXT, _TRICKY)
JUNK = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(_TEXT, _TRICKY), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Return every key path into ``doc`` (mappings and lists), the root included."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            out += _paths(v, (*prefix, i))
    return out


def _put(doc: Any, path: tuple, value: Any, delete: bool) -> Any:
    if not path:
        return value
    doc = json.loads(json.dumps(doc))  # a deep copy of plain data
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = value
    return doc


@st.composite
def mutated(draw, base: Any) -> Any:
    """``base`` with junk at one, two or three places (or a key removed)."""
    doc = base
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        doc = _put(doc, path, draw(JUNK), draw(st.booleans()))
    if draw(st.booleans()) and isinstance(doc, dict):  # an unknown key
        doc = {**doc, draw(_TEXT): draw(JUNK)}
    return doc


def _dump(doc: Any, suffix: str) -> str:
    if suffix == ".json":
        return json.dumps(
            doc, ensure_ascii=False
        )  # NaN and Infinity stay, for the parser to refuse
    # libyaml's emitter where PyYAML has it: the pure-Python one took a third of this module's time
    return yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), allow_unicode=True)


_COUNT = iter(range(10**9))


def _write(doc: Any, suffix: str) -> Path:
    path = _TMP / f"f{next(_COUNT)}{suffix}"
    text = _dump(doc, suffix)
    path.write_text(text, encoding="utf-8")
    return path


def _only_input_errors(load, path: Path) -> None:
    try:
        load(path)
    except InputError as exc:
        text = str(exc)
        assert "\n" not in text and "\r" not in text, text
        assert len(text) < 5000, text[:200]
    finally:
        path.unlink(missing_ok=True)


@settings(_FUZZ, max_examples=1200)
@given(doc=mutated(CONFIG), suffix=st.sampled_from([".json", ".yaml"]))
def test_config_json_loader(doc, suffix):
    _only_input_errors(load_model, _write(doc, suffix))


@settings(_FUZZ, max_examples=500)
@given(doc=mutated(MODEL_FILE))
def test_model_file_loader(doc):
    _only_input_errors(load_model, _write(doc, ".yaml"))


@settings(_FUZZ, max_examples=700)
@given(doc=mutated(SYSTEM), suffix=st.sampled_from([".json", ".yaml"]))
def test_profile_loader(doc, suffix):
    _only_input_errors(load_system, _write(doc, suffix))


@settings(_FUZZ, max_examples=700)
@given(doc=mutated(SCENARIO))
def test_scenario_loader(doc):
    _only_input_errors(load_scenario, _write(doc, ".yaml"))


@settings(_FUZZ, max_examples=300)
@given(data=st.binary(max_size=300), suffix=st.sampled_from([".json", ".yaml"]))
def test_raw_bytes(data, suffix):
    for load in (load_model, load_system, load_scenario):
        path = _TMP / f"b{next(_COUNT)}{suffix}"
        path.write_bytes(data)
        _only_input_errors(load, path)


def _run_cli(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
    return code, err.getvalue()


@settings(_FUZZ, max_examples=150)
@given(
    which=st.sampled_from(["config", "profile", "scenario"]),
    data=st.data(),
)
def test_cli_exits_0_or_2_with_one_line(which, data):
    base, command = {
        "config": (CONFIG, ("models", "show")),
        "profile": (SYSTEM, ("hardware", "validate")),
        "scenario": (SCENARIO, ("predict",)),
    }[which]
    path = _write(data.draw(mutated(base)), ".yaml")
    try:
        code, err = _run_cli(*command, str(path))
    finally:
        path.unlink(missing_ok=True)
    assert code in (0, 2), err
    assert "Traceback" not in err
    if code == 2:
        assert len(err.splitlines()) == 1, err
        assert err.startswith("kvoffload: error: ")


def test_the_fuzzed_bases_are_valid():
    """The mutations start from documents that load, so junk is what a failure is about."""
    assert load_model(_write(CONFIG, ".json")).n_layers == 48
    assert load_system(_write(SYSTEM, ".yaml")).id
    assert load_scenario(_write(SCENARIO, ".yaml")).model.id == "qwen2.5-7b"
    assert math.isfinite(load_model(_write(MODEL_FILE, ".yaml")).params)
