"""The ``kvoffload`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from kvoffload.build.errors import BuildError, ChapterError
from kvoffload.build.extras import require_book_extras
from kvoffload.spec.errors import InputError, one_line
from kvoffload.spec.limits import MAX_BATCH, MAX_CONTEXT_TOKENS, bound_problem

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


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False))


# -- hardware --------------------------------------------------------------------------------
def _hardware_list(_: argparse.Namespace) -> int:
    from kvoffload.spec.hardware import load_system, system_ids

    width = max(len(i) for i in system_ids())
    for ident in system_ids():
        system = load_system(ident)
        print(f"{ident:<{width}}  {system.name}")
    return 0


def _hardware_show(args: argparse.Namespace) -> int:
    from kvoffload.spec import catalog
    from kvoffload.spec.hardware import load_system

    system = load_system(args.profile)
    if args.json:
        _print_json(system.to_json())
        return 0
    registry = catalog.sources()
    print(f"{system.id}: {system.name}")
    if system.description:
        print(f"  {system.description}")
    print(f"  (from {system.origin})")
    current = ""
    for key, fig in system.figures().items():
        part, field = key.split(".", 1)
        if part != current:
            current = part
            print(f"{part}: {getattr(system, part).name}")
        source = registry.get(fig.source, {}).get("title", fig.source) or "no source given"
        print(f"  {field:<28} {fig!s:<26} {fig.kind.value:<9} {source}")
    return 0


def _hardware_validate(args: argparse.Namespace) -> int:
    from kvoffload.spec.hardware import load_system

    system = load_system(args.file)
    counts: dict[str, int] = {}
    for fig in system.figures().values():
        counts[fig.kind.value] = counts.get(fig.kind.value, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"{args.file}: valid profile '{system.id}' ({summary})")
    return 0


# -- models ---------------------------------------------------------------------------------
def _model_json(model: Any) -> dict[str, Any]:
    from kvoffload.model.kv import bytes_per_token
    from kvoffload.spec.precision import WeightFormat

    out = {
        "id": model.id,
        "name": model.name,
        "source": model.source,
        "model_type": model.model_type,
        "layers": model.n_layers,
        "hidden_size": model.hidden,
        "attention": model.attention_kind,
        "heads": model.n_heads,
        "kv_heads": model.n_kv_heads,
        "head_dim": model.head_dim,
        "v_head_dim": model.v_head_dim,
        "layer_windows": list(model.layer_windows),
        "vocab_size": model.vocab,
        "intermediate_size": model.intermediate,
        "tie_embeddings": model.tie_embeddings,
        "params": model.params,
        "active_params": model.active_params,
        "published_params": model.published_params,
        "kv_bytes_per_token_bf16": bytes_per_token(model),
        "weight_bytes": {f.value: model.weight_bytes(f).total for f in WeightFormat},
    }
    if model.mla:
        out["mla"] = {
            "kv_lora_rank": model.mla.kv_lora_rank,
            "qk_rope_head_dim": model.mla.qk_rope_head_dim,
        }
    if model.moe:
        out["moe"] = {
            "experts": model.moe.n_experts,
            "experts_per_token": model.moe.experts_per_token,
            "shared_experts": model.moe.n_shared_experts,
            "moe_layers": sum(model.moe_layers),
        }
    return out


def _models_list(_: argparse.Namespace) -> int:
    from kvoffload.spec.models import load_model, model_ids

    for ident in model_ids():
        m = load_model(ident)
        print(
            f"{ident:<16} {m.name:<24} {m.attention_kind:<4} {m.n_layers:>4} layers  {m.params / 1e9:8.2f} B params"
        )
    return 0


def _models_show(args: argparse.Namespace) -> int:
    from kvoffload.spec.models import load_model
    from kvoffload.spec.units import format_bytes

    model = load_model(args.model)
    info = _model_json(model)
    if args.json:
        _print_json(info)
        return 0
    print(f"{model.id}: {model.name}  ({model.source})")
    # attention layers by window; recurrent (state) and MLP-only layers by kind
    attn = [w for w, k in zip(model.layer_windows, model.kinds, strict=True) if k == "attention"]
    windows = set(attn)
    parts = [
        f"{sum(1 for w in attn if w == x)} layers {'full' if x is None else f'window {x}'}"
        for x in sorted(windows, key=lambda v: -1 if v is None else v)
    ]
    others = {
        "linear_attention": "gated DeltaNet (state)",
        "mamba": "Mamba (state)",
        "mlp": "MLP only",
    }
    for kind, label in others.items():
        n = sum(1 for k in model.kinds if k == kind)
        if n:
            parts.append(f"{n} layers {label}")
    span = "full attention" if windows == {None} and len(parts) == 1 else ", ".join(parts)
    print(
        f"  {model.n_layers} layers, hidden {model.hidden}, {model.attention_kind.upper()}: "
        f"{model.n_heads} heads, {model.n_kv_heads} KV heads, head_dim {model.head_dim}; {span}"
    )
    if model.mla:
        print(
            f"  MLA: caches kv_lora_rank {model.mla.kv_lora_rank} + rope {model.mla.qk_rope_head_dim} per token and layer"
        )
    if model.moe:
        print(
            f"  MoE: {model.moe.n_experts} experts, {model.moe.experts_per_token} per token, "
            f"{model.moe.n_shared_experts} shared, {sum(model.moe_layers)} MoE layers"
        )
    published = (
        f" (published {model.published_params / 1e9:.4g} B)" if model.published_params else ""
    )
    print(
        f"  parameters: {model.params / 1e9:.4g} B total, {model.active_params / 1e9:.4g} B active{published}"
    )
    print(f"  KV cache: {info['kv_bytes_per_token_bf16']} B per token (bf16, all layers)")
    print("  weights:")
    for fmt, total in info["weight_bytes"].items():
        print(f"    {fmt:<7} {format_bytes(total)}")
    return 0


# -- kv ---------------------------------------------------------------------------------------
def _kv(args: argparse.Namespace) -> int:
    from kvoffload.model.kv import kv_size
    from kvoffload.spec.models import load_model
    from kvoffload.spec.precision import kv_format
    from kvoffload.spec.units import format_bytes

    model = load_model(args.model)
    fmt = kv_format(args.dtype, field="--dtype")
    try:
        model.check_context(args.seq)
    except InputError as exc:
        raise exc.within(field="--seq") from None
    size = kv_size(model, args.seq, args.batch, fmt)
    if args.json:
        _print_json(size.to_json())
        return 0
    print(f"{model.id}, {fmt.value} KV, context {size.seq:,} tokens, batch {size.batch}")
    print(
        f"  per token:   {size.bytes_per_token:,} B ({size.bytes_per_token // model.n_layers:,} B per layer)"
    )
    if size.window_capped_layers:
        print(
            f"  {size.window_capped_layers} sliding-window layers are full and hold only their window"
        )
    print(f"  per request: {format_bytes(size.per_request_bytes)}")
    print(f"  total:       {format_bytes(size.total_bytes)}  ({size.total_bytes:,} B)")
    return 0


# -- predict ----------------------------------------------------------------------------------------
def _predict(args: argparse.Namespace) -> int:
    from kvoffload.engines.scenario import load_scenario, predict
    from kvoffload.spec.units import format_bytes

    result = predict(load_scenario(args.scenario), name=args.scenario)
    out = result.to_json()
    if args.json:
        _print_json(out)
        return 0
    st, mem = out["step"], out["memory"]
    print(
        f"{out['model']} on {out['hardware']} ({out['engine']}), batch {out['workload']['batch']}, "
        f"prompt {out['workload']['prompt']:,}, generate {out['workload']['generate']:,}, overlap {out['overlap']}"
    )
    print(
        f"  TPOT {out['tpot_ms']:.2f} ms   TTFT {out['ttft_ms']:.1f} ms   "
        f"{out['decode_tokens_per_s']:.2f} tokens/s decoding, {out['throughput_tokens_per_s']:.2f} tokens/s overall"
    )
    print(
        f"  per step: GPU {st['compute_ms']:.2f} ms, link {st['transfer_ms']:.2f} ms, CPU {st['cpu_ms']:.2f} ms, "
        f"disk {st['disk_ms']:.2f} ms; bottleneck: {out['bottleneck']}"
    )
    if out.get("policy"):
        print(f"  policy: {out['policy']}")
    by_mode = {k: v for k, v in out["tpot_ms_by_overlap"].items() if v is not None}
    if by_mode:
        modes = ", ".join(f"{k} {v:.2f} ms" for k, v in by_mode.items())
        print(f"  TPOT by overlap mode: {modes}")
    print(
        f"  memory: GPU {format_bytes(mem['gpu_bytes'])} of {format_bytes(mem['gpu_capacity_bytes'])}, "
        f"host {format_bytes(mem['cpu_bytes'])}, disk {format_bytes(mem['disk_bytes'])}"
    )
    return 0


# -- validate -----------------------------------------------------------------------------------------
def _validate(args: argparse.Namespace) -> int:
    from kvoffload.studies import validation

    results = validation.run()
    summary = validation.summary(results)
    tables = validation.table_summary(results)
    roles = validation.role_summary(results)
    meta = validation.tables()
    if args.json:
        rows = [
            {"id": r.row["id"], "role": validation.role(r.row), "table": r.row["table"],
             "engine": r.row["engine"], "model": r.row["model"], "system": r.row["system"],
             "metric": r.row["metric"], "measured": r.row["measured"], "predicted": r.predicted,
             "ratio": r.ratio, "refused": r.refusal, "source": r.row["source"],
             "source_version": validation.cite(r.row)}
            for r in results
        ]  # fmt: skip
        per_table = {name: {**meta[name], **stats} for name, stats in tables.items()}
        _print_json({"rows": rows, "roles": roles, "tables": per_table, "summary": summary})
        return 0
    heading = {
        "calibration": "calibration rows: a constant was set, or the model was built, while looking at them",
        "check": "check rows: never looked at before the model was frozen",
    }
    for role in validation.ROLES:
        group = [r for r in results if validation.role(r.row) == role]
        print(f"== {heading[role]} ({len(group)} rows)")
        for name, t in meta.items():
            if t["role"] != role:
                continue
            print(f"table {name}: {t['title']}; {role} since {t['since']}: {t['why']}")
            if "moved" in t:
                m = t["moved"]
                print(f"  moved from {m['from']} on {m['when']}: {m['why']}")
        print(
            f"{'row':<12} {'engine':<15} {'model':<12} {'measured':>10} {'predicted':>10} {'ratio':>6}"
        )
        for r in group:
            pred = "refused" if r.predicted is None else f"{r.predicted:.4g}"
            ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
            print(
                f"{r.row['id']:<12} {r.row['engine']:<15} {r.row['model']:<12} "
                f"{r.row['measured']:>10.4g} {pred:>10} {ratio:>6}"
            )
            if r.refusal:
                print(f"    refused: {r.refusal}")
            print(f"    source: {validation.cite(r.row)}")
        print()
    lines = [
        *((f"{role} rows", s) for role, s in roles.items()),
        *((f"table {t}", s) for t, s in tables.items()),
        *((f"engine {e}" if e != "all" else "all rows", s) for e, s in summary.items()),
    ]
    for name, s in lines:
        median = "n/a" if s["median_abs_rel_error"] is None else f"{s['median_abs_rel_error']:.1%}"
        refused = f", {s['refused']} refused" if s["refused"] else ""
        print(
            f"{name}: {s['rows']} row{'s' * (s['rows'] != 1)}{refused}, median |error| {median}, within 2x {s['within_2x']:.0%}"
        )
    return 0


# -- measure ------------------------------------------------------------------------------------------
def _progress(total: int, *, quiet: bool) -> tuple[Callable[[str], None], Callable[[], None]]:
    """Return (step, close): a tqdm bar with the book extras, plain lines on stderr without."""
    try:
        from tqdm import tqdm
    except ImportError:  # a core install
        done = 0

        def line(what: str) -> None:
            nonlocal done
            done += 1
            if not quiet:
                print(f"measuring [{done}/{total}] {what}", file=sys.stderr, flush=True)

        return line, lambda: None
    bar = tqdm(total=total, desc="measuring", unit="test", disable=quiet)

    def step(what: str) -> None:
        bar.set_postfix_str(what[:60])
        bar.update(1)

    return step, bar.close


def _measure(args: argparse.Namespace) -> int:
    import socket

    from kvoffload.spec import catalog
    from kvoffload.spec.signals import Interrupted, stop_on_signals
    from kvoffload.studies import measure

    if args.base not in catalog.systems():
        raise InputError(f"unknown system id {args.base!r}", field="--base")
    directory = Path(args.dir)
    if not directory.is_dir():
        raise InputError("no such directory", field="--dir", file=str(directory))
    host = socket.gethostname().split(".")[0].lower() or "this-machine"
    out = Path(args.out or f"measured-{host}.yaml")
    measure.check_out(out)  # before minutes of measuring, not after
    plan = measure.Plan.quick() if args.quick else measure.Plan.full()
    steps = 5 + 1 + len(plan.request_sizes) * len(plan.queue_depths) + len(plan.gpu_sizes) + 2
    ident = "measured-" + "".join(c if c.isalnum() else "-" for c in host)
    progress, done = _progress(steps, quiet=args.quiet)
    try:
        # Ctrl-C, kill and a closed terminal stop it cleanly: the scratch file and any
        # half-written profile are removed on the way out
        with stop_on_signals():
            try:
                report = measure.run(quick=args.quick, directory=directory, progress=progress)
            finally:
                done()
            # validated against the hardware schema: a profile that would not load is never written
            raw = measure.profile(
                report, base=args.base, ident=ident, name=f"{host}, measured by kvoffload"
            )
            measure.write_profile(raw, out)
    except Interrupted as stop:
        print(
            f"kvoffload: measure stopped by {stop.name}: its scratch file was removed and "
            "no profile was written",
            file=sys.stderr,
        )
        return 128 + stop.signum
    for line in measure.summarise(report):
        print(line)
    print(f"profile: {out}  (use it with: kvoffload run --hardware {out} --chapter 03)")
    return 0


# -- book and run -------------------------------------------------------------------------------
def _jobs(text: str) -> int:
    """Return a number of parallel jobs, 1 to 64 (argparse type)."""
    value = _whole_number(text, MAX_CONTEXT_TOKENS, "parallel jobs")
    if value > 64:
        raise argparse.ArgumentTypeError(f"{text!r}: at most 64 parallel jobs")
    return value


def _book(args: argparse.Namespace) -> int:
    require_book_extras()
    from kvoffload.build.runner import find_root
    from kvoffload.build.site import build_book

    root = find_root()
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()] if args.profiles else None
    result = build_book(root, profiles, n_jobs=args.jobs, progress=not args.quiet)
    executed = result.executed
    cached = len(result.outcomes) - executed
    print(f"chapters: {executed} executed, {cached} unchanged (cached)")
    if not result.built:
        print("site: nothing changed, the site was not rebuilt")
    print(f"open {result.html / 'index.html'}  ({result.seconds:.1f} s)")
    return 0


def _run_out(out: Path) -> Path:
    """Return ``out``; InputError when it is not a folder or could not be created or written."""
    from kvoffload.spec.inputs import check_writable

    where = {"file": str(out), "field": "--out"}
    existing = out.absolute()
    while not existing.exists() and existing != existing.parent:  # the folder it would go in
        existing = existing.parent
    if not existing.is_dir():
        what = (
            "exists and is not a folder" if existing == out.absolute() else f"{existing} is a file"
        )
        raise InputError(what, **where)
    check_writable(existing, **where)
    return out


def _run(args: argparse.Namespace) -> int:
    require_book_extras()
    from kvoffload.build.profile_run import run_for_profile
    from kvoffload.build.runner import find_root

    out = _run_out(Path(args.out)) if args.out else None
    try:
        result = run_for_profile(
            find_root(),
            args.hardware,
            model=args.model,
            chapter_keys=args.chapter,
            out=out,
            n_jobs=args.jobs,
            progress=not args.quiet,
        )
    except OSError as exc:  # a full disk, a folder changed under it: one line, not a traceback
        where = exc.filename or out or "kvoffload-run"
        raise InputError(exc.strerror or str(exc), file=str(where)) from None
    for nb in result.notebooks:
        print(f"notebook: {nb}")
    for nb in result.notebooks:
        print(f"page:     {result.html / (nb.stem + '.html')}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``kvoffload`` command."""
    p = _Parser(
        prog="kvoffload",
        description="What offloading the KV cache and weights costs during decode.",
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    hw = sub.add_parser("hardware", help="hardware profiles: list, show, validate")
    hws = hw.add_subparsers(dest="action", required=True, parser_class=_Parser)
    hws.add_parser("list", help="list the catalog's system profiles").set_defaults(
        func=_hardware_list
    )
    show = hws.add_parser("show", help="show a profile with every figure's kind and source")
    show.add_argument("profile", help="a catalog id or a profile YAML file")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=_hardware_show)
    val = hws.add_parser("validate", help="check a profile file")
    val.add_argument("file")
    val.set_defaults(func=_hardware_validate)

    md = sub.add_parser("models", help="model architectures: list, show")
    mds = md.add_subparsers(dest="action", required=True, parser_class=_Parser)
    mds.add_parser("list", help="list the catalog's models").set_defaults(func=_models_list)
    ms = mds.add_parser("show", help="show a catalog model or import a HF config.json")
    ms.add_argument("model", help="a catalog id, a config.json path, or a model YAML file")
    ms.add_argument("--json", action="store_true", help="print JSON")
    ms.set_defaults(func=_models_show)

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
    kv.set_defaults(func=_kv)
    pr = sub.add_parser("predict", help="predict TPOT, TTFT and memory for a scenario file")
    pr.add_argument("scenario", help="a scenario YAML (see the README)")
    pr.add_argument("--json", action="store_true", help="print JSON")
    pr.set_defaults(func=_predict)

    va = sub.add_parser("validate", help="predictions beside published measurements")
    va.add_argument("--json", action="store_true", help="print JSON")
    va.set_defaults(func=_validate)

    me = sub.add_parser("measure", help="measure this machine and write a hardware profile")
    me.add_argument("--out", help="profile file to write (default: measured-<host>.yaml)")
    me.add_argument("--quick", action="store_true", help="about 30 s instead of about 5 minutes")
    me.add_argument(
        "--base", default="a100-80gb-sxm-pcie4", help="catalog system for the parts not measured"
    )
    me.add_argument(
        "--dir", default=".", help="folder for the scratch file of the storage test (default: here)"
    )
    me.add_argument("--quiet", action="store_true", help="no progress bar")
    me.set_defaults(func=_measure)

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
    bk.set_defaults(func=_book)

    rn = sub.add_parser(
        "run", help="re-run chapters for one machine: executed notebooks and offline pages"
    )
    rn.add_argument("--hardware", required=True, help="a catalog system id or your profile YAML")
    rn.add_argument(
        "--model", help="a catalog model id or a HF config.json (default: each chapter's own)"
    )
    rn.add_argument(
        "--chapter", nargs="+", help="chapters by number or name, e.g. 01 03 (default: all)"
    )
    rn.add_argument("--out", help="output folder (default: kvoffload-run/<profile id>)")
    rn.add_argument("--jobs", type=_jobs, default=None, help="chapters executed in parallel")
    rn.add_argument("--quiet", action="store_true", help="no progress bar")
    rn.set_defaults(func=_run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; bad input exits 2 with one line on stderr."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        print(f"kvoffload: error: {exc}", file=sys.stderr)
        return 2
    except (ChapterError, BuildError) as exc:
        print(f"kvoffload: build failed: {one_line(' '.join(str(exc).split()))}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except KeyboardInterrupt as exc:  # Ctrl-C, or spec.signals.Interrupted (SIGTERM, SIGHUP too)
        return _interrupted(args.command, exc)


def _interrupted(command: str, exc: KeyboardInterrupt) -> int:
    """Print one line for an interrupted command; return 128 + the signal's number."""
    import signal

    try:  # Interrupted's message is the signal's name; a plain Ctrl-C has no message
        stop = signal.Signals[str(exc)]
    except KeyError:
        stop = signal.SIGINT
    kept = (
        "; finished chapters stay cached and the last site is kept"
        if command in ("book", "run")
        else ""
    )
    print(f"kvoffload: interrupted ({stop.name}){kept}", file=sys.stderr)
    return 128 + stop.value


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
