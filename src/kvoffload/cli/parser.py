"""The ``kvoffload`` argument parser: one-line errors, bounded numbers, a handler per command."""

from __future__ import annotations

import argparse
from typing import NoReturn

from kvoffload.cli import advise, book, hardware, kv_predict, measure, models, validate
from kvoffload.inputs.errors import one_line
from kvoffload.inputs.limits import MAX_BATCH, MAX_CONTEXT_TOKENS, bound_problem

# Each command imports what it uses when it runs: `kvoffload kv` on a core install (numpy,
# pyyaml, msgspec) must not reach the book's optional dependencies.


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit with status 2."""

    def error(self, message: str) -> NoReturn:
        line = one_line(message)  # an argument may hold a newline or an escape sequence
        self.exit(2, f"kvoffload: error: {line} (see '{self.prog} --help')\n")


def _whole_number(text: str, maximum: int, what: str) -> int:
    """Return ``text`` as a whole number from 1 to ``maximum`` (``what``: its unit)."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {what}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    problem = bound_problem(value, maximum, what)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def _tokens(text: str) -> int:
    """Return a context length in tokens, 1 to MAX_CONTEXT_TOKENS (argparse type)."""
    return _whole_number(text, MAX_CONTEXT_TOKENS, "tokens")


def _batch(text: str) -> int:
    """Return a batch size, 1 to MAX_BATCH requests (argparse type)."""
    return _whole_number(text, MAX_BATCH, "requests")


def _jobs(text: str) -> int:
    """Return a number of parallel jobs, 1 to 64 (argparse type)."""
    value = _whole_number(text, MAX_CONTEXT_TOKENS, "parallel jobs")
    if value > 64:
        raise argparse.ArgumentTypeError(f"{text!r}: at most 64 parallel jobs")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``kvoffload`` command."""
    p = _Parser(
        prog="kvoffload",
        description="What offloading the KV cache and weights costs during decode.",
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    hw = sub.add_parser("hardware", help="hardware profiles: list, show, detect, validate")
    hws = hw.add_subparsers(dest="action", required=True, parser_class=_Parser)
    hws.add_parser("list", help="list the catalog's system profiles").set_defaults(
        func=hardware.list_profiles
    )
    show = hws.add_parser("show", help="show a profile with every figure's kind and source")
    show.add_argument("profile", help="a catalog id or a profile YAML file")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=hardware.show_profile)
    det = hws.add_parser(
        "detect", help="read this machine into a profile over the closest catalog parts"
    )
    det.add_argument("--json", action="store_true", help="print JSON")
    det.add_argument("--out", help="write the profile to this file (whole or not at all)")
    det.set_defaults(func=hardware.detect_profile)
    val = hws.add_parser("validate", help="check a profile file")
    val.add_argument("file")
    val.set_defaults(func=hardware.validate_profile)

    md = sub.add_parser("models", help="model architectures: list, show")
    mds = md.add_subparsers(dest="action", required=True, parser_class=_Parser)
    mds.add_parser("list", help="list the catalog's models").set_defaults(func=models.list_models)
    ms = mds.add_parser("show", help="show a catalog model or import a HF config.json")
    ms.add_argument("model", help="a catalog id, a config.json path, or a model YAML file")
    ms.add_argument("--json", action="store_true", help="print JSON")
    ms.set_defaults(func=models.show_model)

    kv = sub.add_parser("kv", help="KV cache size of a model at a context and batch")
    kv.add_argument("model", help="a catalog id or a config.json path")
    kv.add_argument(
        "--seq",
        type=_tokens,
        required=True,
        help="context length in tokens (exact: 128000 or 131072)",
    )
    kv.add_argument("--batch", type=_batch, default=1, help="requests in the batch")
    kv.add_argument(
        "--dtype", default="bf16", help="KV precision: bf16 fp16 fp8 int8 int4 q8_0 q4_0"
    )
    kv.add_argument("--json", action="store_true", help="print JSON")
    kv.set_defaults(func=kv_predict.kv)
    pr = sub.add_parser("predict", help="predict TPOT, TTFT and memory for a scenario file")
    pr.add_argument("scenario", help="a scenario YAML (see the README)")
    pr.add_argument("--json", action="store_true", help="print JSON")
    pr.set_defaults(func=kv_predict.predict)

    ad = sub.add_parser(
        "advise", help="what to run on a machine, with which flags: configurations ranked"
    )
    ad.add_argument(
        "--hardware", required=True, help="a catalog system id, a profile YAML, or 'detect'"
    )
    ad.add_argument(
        "--model",
        required=True,
        help="a catalog id, a config.json, a .gguf file, or 'all' (every catalog model)",
    )
    ad.add_argument(
        "--context", type=_tokens, default=32768, help="tokens per request (default 32768)"
    )
    ad.add_argument("--batch", type=_batch, default=1, help="requests decoded together")
    ad.add_argument(
        "--budget-ms",
        type=advise.budget_ms,
        default=None,
        help="the most ms per generated token accepted (default: no limit)",
    )
    ad.add_argument(
        "--engines",
        type=advise.engine_list,
        default=("llamacpp", "vllm"),
        help="engines to search, comma-separated: llamacpp, vllm, ktransformers (default: llamacpp,vllm)",
    )
    ad.add_argument("--json", action="store_true", help="print JSON")
    ad.set_defaults(func=advise.advise)

    va = sub.add_parser("validate", help="predictions beside published measurements")
    va.add_argument("--json", action="store_true", help="print JSON")
    va.set_defaults(func=validate.validate)

    me = sub.add_parser("measure", help="measure this machine and write a hardware profile")
    me.add_argument("--out", help="profile file to write (default: measured-<host>.yaml)")
    me.add_argument("--quick", action="store_true", help="about 30 s instead of about 5 minutes")
    me.add_argument(
        "--base",
        default="a100-80gb-sxm-pcie4",
        help="catalog system for the parts not measured, or 'detect' (this machine's)",
    )
    me.add_argument(
        "--dir", default=".", help="folder for the scratch file of the storage test (default: here)"
    )
    me.add_argument("--quiet", action="store_true", help="no progress bar")
    me.set_defaults(func=measure.measure)

    bk = sub.add_parser(
        "book", help="execute every chapter for every profile and build _build/html"
    )
    bk.add_argument(
        "--profiles",
        help="comma-separated catalog ids (default: all); article-reference is always built",
    )
    bk.add_argument(
        "--jobs",
        type=_jobs,
        default=None,
        help="chapters executed in parallel (default: the number of cores)",
    )
    bk.add_argument("--quiet", action="store_true", help="no progress bar")
    bk.set_defaults(func=book.book)

    rn = sub.add_parser(
        "run", help="re-run chapters for one machine: executed notebooks and offline pages"
    )
    rn.add_argument(
        "--hardware",
        required=True,
        help="a catalog system id, your profile YAML, or 'detect' (this machine)",
    )
    rn.add_argument(
        "--model", help="a catalog model id or a HF config.json (default: each chapter's own)"
    )
    rn.add_argument(
        "--chapter", nargs="+", help="chapters by number or name, e.g. 01 03 (default: all)"
    )
    rn.add_argument("--out", help="output folder (default: kvoffload-run/<profile id>)")
    rn.add_argument("--jobs", type=_jobs, default=None, help="chapters executed in parallel")
    rn.add_argument("--quiet", action="store_true", help="no progress bar")
    rn.set_defaults(func=book.run)
    return p
