"""``kvoffload kv`` (KV cache size) and ``kvoffload predict`` (TPOT, TTFT and memory of a scenario)."""

from __future__ import annotations

import argparse

from kvoffload.cli.output import print_json
from kvoffload.inputs.errors import InputError


def kv(args: argparse.Namespace) -> int:
    """Print the KV cache size of a model at a context and batch."""
    from kvoffload.inputs.models import load_model
    from kvoffload.inputs.precision import kv_format
    from kvoffload.inputs.units import format_bytes
    from kvoffload.model.kv import kv_size

    model = load_model(args.model)
    fmt = kv_format(args.dtype, field="--dtype")
    try:
        model.check_context(args.seq)
    except InputError as exc:
        raise exc.within(field="--seq") from None
    size = kv_size(model, args.seq, args.batch, fmt)
    if args.json:
        print_json(size.to_json())
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


def predict(args: argparse.Namespace) -> int:
    """Print the prediction for a scenario file."""
    from kvoffload.engines.scenario import load_scenario, predict
    from kvoffload.inputs.units import format_bytes

    result = predict(load_scenario(args.scenario), name=args.scenario)
    out = result.to_json()
    if args.json:
        print_json(out)
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
    if out["reuse"] is not None:
        _print_reuse(out)
    return 0


def _print_reuse(out: dict) -> None:
    """Print a prediction's prefix-cache hit and, with traffic, its mix of hits per tier."""
    from kvoffload.inputs.units import format_bandwidth, format_bytes

    r = out["reuse"]
    if r["tier"] is not None:
        print(
            f"  prefix cache: {r['hit_tokens']:,} tokens from {r['tier']}, TTFT "
            f"{out['ttft_ms']:.1f} ms (recompute {out['ttft_recompute_ms']:.1f} ms): load "
            f"{r['load_ms']:.2f} ms of {format_bytes(r['load_bytes'])} at "
            f"{format_bandwidth(r['load_bandwidth'])}, new tokens {r['prefill_new_ms']:.2f} ms, "
            f"{format_bytes(r['store_bytes'])} stored"
        )
    if r["hit_rate_by_tier"] is not None:
        hits = ", ".join(f"{t} {v:.1%}" for t, v in r["hit_rate_by_tier"].items())
        alive = ", ".join(
            f"{t} {'for ever' if v is None else f'{v:.3g} s'}"
            for t, v in r["survival_s_by_tier"].items()
        )
        print(
            f"  traffic: hits {hits}; TTFT mean {r['ttft_mean_ms']:.1f} ms, p90 "
            f"{r['ttft_p90_ms']:.1f} ms; {r['prefill_tokens_per_s']:,.0f} tokens/s prefilled"
        )
        print(
            f"  a session stays cached: {alive}; 90% of turns hit with "
            f"{format_bytes(r['host_bytes_for_90pct'])} of host memory"
        )
