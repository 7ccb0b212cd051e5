"""Fuzz the profile, scenario and model-config loaders: InputError is the only way to fail.

Hypothesis draws seeds that mutate valid documents (a catalog system profile, a scenario, a catalog
config.json) by putting junk at one place, writes them as YAML or JSON, and loads them the way
the CLI does; it also feeds raw bytes. A few thousand examples in all. A last test runs the
CLI in-process on such files: exit 0 or 2, at most one stderr line on failure, no traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
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

# The junk is drawn from one seed per example with random.Random: Hypothesis draws the seed (and
# reports it on a failure), the generator below the documents. Drawing each leaf through
# Hypothesis's strategies took most of this module's time for the same number of examples.
_TRICKY = (
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
)
_INTS = (0, 1, -1, 2**31, 2**63, 2**64, 10**30, 10**100)
_FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, 5e-324, 1e300, -1e300, math.inf, -math.inf, math.nan)
# characters a loader may trip on: controls, separators, bidi marks, a BOM, non-BMP
_ODD_CHARS = "\x00\x01\t\n\r\x0b\x0c\x1b\x7f\x85\xa0\u2028\u2029\u200b\u202e\ufeff\U0001f600:#-{}[]&*!|>'\"%@`"


def _char(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.5:
        return chr(rng.randint(0x20, 0x7E))
    if pick < 0.75:
        return rng.choice(_ODD_CHARS)
    code = rng.randint(0x80, 0x10FFFF)
    return "?" if 0xD800 <= code <= 0xDFFF else chr(code)  # no lone surrogates: not UTF-8


def _text(rng: random.Random) -> str:
    return "".join(_char(rng) for _ in range(rng.choice((0, 1, 2, rng.randint(0, 40)))))


def _number(rng: random.Random) -> int | float:
    pick = rng.random()
    if pick < 0.3:
        return rng.randint(-100, 100)
    if pick < 0.5:
        return rng.randint(-(2**70), 2**70)
    if pick < 0.65:
        return rng.choice(_INTS)
    if pick < 0.8:
        return rng.choice(_FLOATS)
    return rng.uniform(-1, 1) * 10.0 ** rng.randint(-320, 308)


def _scalar(rng: random.Random) -> Any:
    pick = rng.random()
    if pick < 0.1:
        return None
    if pick < 0.2:
        return rng.random() < 0.5
    if pick < 0.5:
        return _number(rng)
    return _text(rng) if pick < 0.75 else rng.choice(_TRICKY)


def _key(rng: random.Random) -> str:
    return _text(rng) if rng.random() < 0.6 else rng.choice(_TRICKY)


def _junk(rng: random.Random, leaves: list[int]) -> Any:
    """Return a scalar, or a list or mapping of junk (at most 4 items), ``leaves`` the budget."""
    if leaves[0] <= 1 or rng.random() < 0.5:
        leaves[0] -= 1
        return _scalar(rng)
    n = rng.randint(0, 4)
    if rng.random() < 0.5:
        return [_junk(rng, leaves) for _ in range(n)]
    return {_key(rng): _junk(rng, leaves) for _ in range(n)}


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


def _mutate(seed: int, base: Any) -> Any:
    """``base`` with junk at one, two or three places (or a key removed), from ``seed``."""
    rng = random.Random(seed)
    doc = base
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_paths(doc))
        doc = _put(doc, path, _junk(rng, [12]), rng.random() < 0.5)
    if rng.random() < 0.5 and isinstance(doc, dict):  # an unknown key
        doc = {**doc, _key(rng): _junk(rng, [12])}
    return doc


def mutated(base: Any) -> st.SearchStrategy:
    """A strategy of ``base`` mutated from one drawn seed."""
    return st.integers(0, 2**64 - 1).map(lambda seed: _mutate(seed, base))


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
