"""Charts: one Altair theme, an offline HTML embedding with stable ids, the chapters' charts."""

from __future__ import annotations

import hashlib
import html
import json
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from kvoffload.model import decode, kv, transfer
from kvoffload.spec.hardware import System
from kvoffload.spec.models import Model
from kvoffload.spec.precision import KvFormat, WeightFormat
from kvoffload.spec.units import format_bytes

PALETTE = ["#1f5a99", "#d9822b", "#3a8f5c", "#b03a48", "#6c4f9c", "#7a7a7a"]


@alt.theme.register("kvoffload", enable=True)
def _theme() -> alt.theme.ThemeConfig:
    return {
        "config": {
            "view": {"continuousWidth": 560, "continuousHeight": 320, "stroke": None},
            "font": "system-ui, -apple-system, 'Segoe UI', sans-serif",
            "axis": {
                "labelFontSize": 11,
                "titleFontSize": 12,
                "titleFontWeight": "normal",
                "grid": True,
                "gridOpacity": 0.4,
            },
            "legend": {"labelFontSize": 11, "titleFontSize": 12, "titleFontWeight": "normal"},
            "range": {"category": PALETTE},
            "line": {"strokeWidth": 2},
        }
    }


def _log_axis(field: str, title: str) -> alt.X:
    """Return a logarithmic quantitative x axis with SI-suffixed labels."""
    return alt.X(f"{field}:Q", scale=alt.Scale(type="log"), title=title, axis=alt.Axis(format="~s"))


def chart_id(spec: dict) -> str:
    """Return a div id derived from the spec, so identical inputs give identical HTML."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    return f"kvo-chart-{digest[:16]}"


def to_html(chart: alt.TopLevelMixin) -> str:
    """Return the chart as an HTML fragment that draws with the page's local Vega bundle."""
    spec = chart.to_dict()
    div = chart_id(spec)
    payload = json.dumps(spec, sort_keys=True).replace("</", "<\\/")
    return (
        f'<div id="{div}" class="kvoffload-chart" role="img"></div>\n'
        '<script type="text/javascript">\n'
        "(function () {\n"
        f"  var spec = {payload};\n"
        "  function draw() {\n"
        f'    var el = document.getElementById("{div}");\n'
        '    if (!window.vegaEmbed) { el.textContent = "(chart: the local Vega bundle did not load)"; return; }\n'
        '    window.vegaEmbed(el, spec, {actions: false, renderer: "svg"}).catch(function (e) { console.error(e); });\n'
        "  }\n"
        '  if (document.readyState === "complete") { draw(); } else { window.addEventListener("load", draw); }\n'
        "})();\n"
        "</script>"
    )


class Embedded:
    """A chart that displays in a notebook as offline HTML (and as the spec for other front ends)."""

    def __init__(self, chart: alt.TopLevelMixin):
        self.chart = chart

    def _repr_html_(self) -> str:
        return to_html(self.chart)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict:
        return {
            "text/html": to_html(self.chart),
            "text/plain": f"<chart {chart_id(self.chart.to_dict())}>",
        }


def show(chart: alt.TopLevelMixin) -> Embedded:
    """Wrap a chart for display in a chapter (offline, stable ids)."""
    return Embedded(chart)


def escape(text: str) -> str:
    """Escape text for HTML."""
    return html.escape(text, quote=True)


# -- chapter 01: memory tiers ------------------------------------------------------------------
def transfer_curves(system: System, sizes_bytes: np.ndarray | None = None) -> pd.DataFrame:
    """Return time and effective rate to move each payload size over each tier (one transfer)."""
    sizes = np.logspace(3, 10, 57) if sizes_bytes is None else np.asarray(sizes_bytes, float)
    rows = []
    for tier in transfer.tiers(system):
        t = tier.time(sizes)
        for size, seconds in zip(sizes, t, strict=True):
            rows.append(
                {
                    "tier": tier.name,
                    "payload_bytes": float(size),
                    "time_ms": float(seconds) * 1e3,
                    "effective_gb_s": float(size / seconds) / 1e9,
                }
            )
    return pd.DataFrame(rows)


def transfer_time_chart(system: System) -> alt.Chart:
    """Chart transfer time against payload size per tier, log-log, latency visible at the left."""
    data = transfer_curves(system)
    return (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=_log_axis("payload_bytes", "payload (bytes)"),
            y=alt.Y("time_ms:Q", scale=alt.Scale(type="log"), title="time for one transfer (ms)"),
            color=alt.Color(
                "tier:N",
                title="tier",
                legend=alt.Legend(orient="bottom", columns=2, labelLimit=360),
            ),
            tooltip=[
                alt.Tooltip("tier:N"),
                alt.Tooltip("payload_bytes:Q", title="payload (B)", format=",.0f"),
                alt.Tooltip("time_ms:Q", title="time (ms)", format=".4g"),
                alt.Tooltip("effective_gb_s:Q", title="effective rate (GB/s)", format=".3g"),
            ],
        )
    )


# -- chapter 02: KV sizing -------------------------------------------------------------------------
def memory_fit_frame(
    system: System,
    model: Model,
    contexts: np.ndarray,
    batches: np.ndarray,
    *,
    weights: WeightFormat = WeightFormat.BF16,
    kv_fmt: KvFormat = KvFormat.BF16,
) -> pd.DataFrame:
    """Return weights + KV bytes on the GPU for every (batch, context), in one vectorised call."""
    s = np.asarray(contexts, dtype=np.int64)
    b = np.asarray(batches, dtype=np.int64)
    w = model.weight_bytes(weights).total
    kv_bytes = kv.batch_bytes(model, s[None, :], b[:, None], kv_fmt)
    total = w + kv_bytes
    capacity = system.gpu.memory.value
    bb, ss = np.meshgrid(b, s, indexing="ij")
    return pd.DataFrame(
        {
            "batch": bb.ravel(),
            "context": ss.ravel(),
            "weights_gb": w / 1e9,
            "kv_gb": kv_bytes.ravel() / 1e9,
            "total_gb": total.ravel() / 1e9,
            "fits": total.ravel() <= capacity,
        }
    )


def memory_fit_chart(
    system: System, model: Model, contexts: np.ndarray, batches: np.ndarray, **kw: Any
) -> alt.LayerChart:
    """Chart weights + KV against context per batch, with the GPU's capacity as a rule."""
    data = memory_fit_frame(system, model, contexts, batches, **kw)
    capacity_gb = system.gpu.memory.value / 1e9
    lines = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=14))
        .encode(
            x=_log_axis("context", "context (tokens)"),
            y=alt.Y("total_gb:Q", scale=alt.Scale(type="log"), title="weights + KV cache (GB)"),
            color=alt.Color("batch:O", title="batch"),
            tooltip=[
                alt.Tooltip("batch:O"),
                alt.Tooltip("context:Q", format=","),
                alt.Tooltip("kv_gb:Q", title="KV (GB)", format=".3g"),
                alt.Tooltip("total_gb:Q", title="weights + KV (GB)", format=".3g"),
                alt.Tooltip("fits:N", title="fits in GPU memory"),
            ],
        )
    )
    rule_data = pd.DataFrame(
        {"capacity_gb": [capacity_gb], "label": [f"GPU memory {capacity_gb:.4g} GB"]}
    )
    rule = (
        alt.Chart(rule_data)
        .mark_rule(strokeDash=[6, 4], color="#b03a48")
        .encode(y="capacity_gb:Q", tooltip=[alt.Tooltip("label:N", title="limit")])
    )
    text = (
        alt.Chart(rule_data)
        .mark_text(align="left", dx=4, dy=-6, color="#b03a48")
        .encode(y="capacity_gb:Q", x=alt.value(0), text="label:N")
    )
    return alt.layer(lines, rule, text)


# -- chapter 03: decode timing ------------------------------------------------------------------------
def _budget_rule(budget_ms: float) -> alt.Chart:
    data = pd.DataFrame({"budget_ms": [budget_ms], "label": [f"TPOT budget {budget_ms:g} ms"]})
    return (
        alt.Chart(data)
        .mark_rule(strokeDash=[6, 4], color="#b03a48")
        .encode(y="budget_ms:Q", tooltip=[alt.Tooltip("label:N", title="budget")])
    )


def overlap_frame(setup: decode.Setup, contexts: np.ndarray, batch: int = 1) -> pd.DataFrame:
    """Return TPOT (ms) against context for every overlap mode, one vectorised call per mode."""
    rows = []
    for mode in decode.OVERLAP_MODES:
        t = decode.step(setup, contexts, batch, mode).total * 1e3
        rows += [
            {"overlap": mode, "context": int(c), "tpot_ms": float(v)}
            for c, v in zip(contexts, t, strict=True)
        ]
    return pd.DataFrame(rows)


def overlap_chart(
    setup: decode.Setup, contexts: np.ndarray, batch: int = 1, budget_ms: float = 50.0
) -> alt.LayerChart:
    """Chart TPOT against context for each overlap mode, with the TPOT budget as a rule."""
    lines = (
        alt.Chart(overlap_frame(setup, contexts, batch))
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=_log_axis("context", "context (tokens)"),
            y=alt.Y("tpot_ms:Q", scale=alt.Scale(type="log"), title="time per output token (ms)"),
            color=alt.Color("overlap:N", title="overlap", sort=list(decode.OVERLAP_MODES)),
            strokeDash=alt.StrokeDash("overlap:N", sort=list(decode.OVERLAP_MODES), legend=None),
            tooltip=[
                "overlap:N",
                alt.Tooltip("context:Q", format=","),
                alt.Tooltip("tpot_ms:Q", title="TPOT (ms)", format=".4g"),
            ],
        )
    )
    return alt.layer(lines, _budget_rule(budget_ms))


def layer_frame(setup: decode.Setup, contexts: np.ndarray, batch: int = 1) -> pd.DataFrame:
    """Return one full-attention layer's GPU time and link time (ms) against context."""
    per = decode.stream_times(setup, contexts, batch)
    rows = []
    for name, key in (("GPU work of the layer", "gpu"), ("host→GPU copy of its KV", "h2d")):
        for c, v in zip(contexts, per[key][..., 0], strict=True):
            rows.append({"stream": name, "context": int(c), "ms": float(v) * 1e3})
    return pd.DataFrame(rows)


def layer_chart(setup: decode.Setup, contexts: np.ndarray, batch: int = 1) -> alt.Chart:
    """Chart a layer's GPU time against the time to copy its offloaded KV."""
    return (
        alt.Chart(layer_frame(setup, contexts, batch))
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=_log_axis("context", "context (tokens)"),
            y=alt.Y("ms:Q", scale=alt.Scale(type="log"), title="time per layer (ms)"),
            color=alt.Color("stream:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=[
                "stream:N",
                alt.Tooltip("context:Q", format=","),
                alt.Tooltip("ms:Q", format=".4g"),
            ],
        )
    )


def batch_frame(setup: decode.Setup, context: int, batches: np.ndarray) -> pd.DataFrame:
    """Return TPOT (ms) against batch: all KV offloaded, and KV spilled only when HBM is full."""
    offloaded = decode.Setup(
        setup.system,
        setup.model,
        setup.weights,
        setup.kv,
        decode.Placement(kv=decode.Split(0, 1, 0), overlap=setup.placement.overlap),
    )
    spilled = decode.spill(
        decode.Setup(
            setup.system,
            setup.model,
            setup.weights,
            setup.kv,
            decode.Placement(overlap=setup.placement.overlap),
        ),
        context,
        batches,
    )
    rows = []
    for name, st in (
        ("all KV in host memory", offloaded),
        ("KV on the GPU until it is full", spilled),
    ):
        t = decode.step(st, context, batches).total * 1e3
        rows += [
            {"placement": name, "batch": int(b), "tpot_ms": float(v)}
            for b, v in zip(batches, t, strict=True)
        ]
    return pd.DataFrame(rows)


def batch_chart(
    setup: decode.Setup, context: int, batches: np.ndarray, budget_ms: float = 50.0
) -> alt.LayerChart:
    """Chart TPOT against batch size for the two placements."""
    lines = (
        alt.Chart(batch_frame(setup, context, batches))
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=alt.X("batch:Q", title="batch (requests)"),
            y=alt.Y("tpot_ms:Q", scale=alt.Scale(type="log"), title="time per output token (ms)"),
            color=alt.Color("placement:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=[
                "placement:N",
                "batch:Q",
                alt.Tooltip("tpot_ms:Q", title="TPOT (ms)", format=".4g"),
            ],
        )
    )
    return alt.layer(lines, _budget_rule(budget_ms))


def gantt_chart(events: pd.DataFrame) -> alt.Chart:
    """Chart a step's timeline: one row per resource, one bar per segment of work."""
    order = ["disk_read", "h2d", "cpu", "gpu", "d2h", "disk_write"]
    return (
        alt.Chart(events)
        .mark_bar(height=14, stroke="white", strokeWidth=0.3)
        .encode(
            x=alt.X("start_ms:Q", title="time within the step (ms)"),
            x2="end_ms:Q",
            y=alt.Y(
                "resource:N", sort=[r for r in order if r in set(events["resource"])], title=None
            ),
            color=alt.Color("task:N", title="work", sort=["load", "compute", "store"]),
            tooltip=[
                "resource:N",
                "layer:Q",
                "task:N",
                alt.Tooltip("start_ms:Q", format=".3f"),
                alt.Tooltip("ms:Q", title="duration (ms)", format=".3f"),
            ],
        )
        .properties(height=alt.Step(22))
    )


def interactive_frame(setup: decode.Setup, contexts: np.ndarray) -> pd.DataFrame:
    """Return, per context, the constants the in-browser TPOT formula needs (bytes, FLOPs)."""
    model = setup.model
    lay = decode.layers(model, setup.weights)
    s = np.asarray(contexts, dtype=np.int64)
    kv_bytes = kv.request_bytes(model, s, setup.kv).astype(float)  # one request
    held = np.minimum(s[:, None].astype(float), lay.window)
    attn = (lay.attn_flops * held) @ lay.count  # per request and token
    return pd.DataFrame({"context": s, "kv_bytes": kv_bytes, "attn_flops": attn})


def interactive_constants(setup: decode.Setup) -> dict[str, float]:
    """Return the profile's and model's constants for the in-browser formula."""
    sysm = setup.system
    lay = decode.layers(setup.model, setup.weights)
    return {
        "weights_bytes": float(lay.weight_bytes @ lay.count),
        "dense_flops": float(lay.dense_flops @ lay.count),
        "hbm_bps": sysm.gpu.streaming_bandwidth,
        "attn_bps": sysm.gpu.attention_rate,
        "peak_flops": sysm.compute_rate,
        "link_gbps": sysm.copy_rate("h2d") / 1e9,
        "latency_s": sysm.link.latency.value * setup.model.n_layers,
    }


def tpot_formula(
    c: dict[str, float],
    kv_bytes: np.ndarray,
    attn_flops: np.ndarray,
    link_gbps: float,
    batch: float,
    overlap: str,
) -> np.ndarray:
    """Evaluate, in Python, the formula the interactive chart evaluates in the browser (ms)."""
    gpu = np.maximum(
        c["weights_bytes"] / c["hbm_bps"] + batch * kv_bytes / c["attn_bps"],
        batch * (c["dense_flops"] + attn_flops) / c["peak_flops"],
    )
    link = batch * kv_bytes / (link_gbps * 1e9) + c["latency_s"]
    return 1e3 * (gpu + link if overlap == "none" else np.maximum(gpu, link))


def interactive_tpot_chart(
    setup: decode.Setup, contexts: np.ndarray, budget_ms: float = 50.0
) -> alt.LayerChart:
    """Chart TPOT against context with sliders for link bandwidth, batch and a marked context.

    All KV in host memory, attention on the GPU; the browser evaluates the whole-model roofline
    (``tpot_formula``) from per-context constants computed by the package, with no kernel.
    """
    c = interactive_constants(setup)
    link = alt.param(
        name="link_gbps",
        value=round(c["link_gbps"], 1),
        bind=alt.binding_range(min=1, max=500, step=1, name="link bandwidth (GB/s) "),
    )
    batch = alt.param(
        name="batch", value=1, bind=alt.binding_range(min=1, max=64, step=1, name="batch ")
    )
    mark = alt.param(
        name="mark_context",
        value=32000,
        bind=alt.binding_range(
            min=1000, max=int(max(contexts)), step=1000, name="context marker (tokens) "
        ),
    )
    gpu = f"max({c['weights_bytes']!r} / {c['hbm_bps']!r} + batch * datum.kv_bytes / {c['attn_bps']!r}, batch * ({c['dense_flops']!r} + datum.attn_flops) / {c['peak_flops']!r})"
    xfer = f"batch * datum.kv_bytes / (link_gbps * 1e9) + {c['latency_s']!r}"
    base = (
        alt.Chart(interactive_frame(setup, contexts))
        .transform_calculate(gpu_s=gpu, link_s=xfer)
        .transform_calculate(
            none="1000 * (datum.gpu_s + datum.link_s)",
            perfect="1000 * max(datum.gpu_s, datum.link_s)",
        )
        .transform_fold(["none", "perfect"], as_=["overlap", "tpot_ms"])
    )
    x = alt.X(
        "context:Q",
        scale=alt.Scale(type="log"),
        title="context (tokens)",
        axis=alt.Axis(format="~s"),
    )
    y = alt.Y("tpot_ms:Q", scale=alt.Scale(type="log"), title="time per output token (ms)")
    lines = base.mark_line().encode(
        x=x,
        y=y,
        color=alt.Color("overlap:N", title="overlap"),
        tooltip=[
            "overlap:N",
            alt.Tooltip("context:Q", format=","),
            alt.Tooltip("tpot_ms:Q", title="TPOT (ms)", format=".4g"),
        ],
    )
    marker = (
        alt.Chart(pd.DataFrame({"x": [0]}))
        .mark_rule(color="#7a7a7a")
        .encode(x=alt.X("mark_context:Q", scale=alt.Scale(type="log")))
        .transform_calculate(mark_context="mark_context")
    )
    return alt.layer(lines, marker, _budget_rule(budget_ms)).add_params(link, batch, mark)


def random_read_chart(rows: list[dict]) -> alt.LayerChart:
    """Chart random-read bandwidth as a share of sequential, per request size and queue depth."""
    data = pd.DataFrame(rows)
    data["request"] = [format_bytes(b, binary=True) for b in data["request_bytes"]]
    lines = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=30))
        .encode(
            x=alt.X(
                "queue_depth:Q",
                scale=alt.Scale(type="log", base=2),
                title="requests in flight (queue depth)",
            ),
            y=alt.Y(
                "share_of_sequential:Q",
                title="share of sequential read bandwidth",
                axis=alt.Axis(format="%"),
            ),
            color=alt.Color(
                "request:N",
                title="request size",
                sort=sorted(
                    set(data["request"]),
                    key=lambda r: data.loc[data["request"] == r, "request_bytes"].iloc[0],
                ),
            ),
            tooltip=[
                "request:N",
                "queue_depth:Q",
                alt.Tooltip("gb_s:Q", title="GB/s", format=".3g"),
                alt.Tooltip("share_of_sequential:Q", format=".1%"),
            ],
        )
    )
    rule = (
        alt.Chart(pd.DataFrame({"y": [0.1], "label": ["the article's 10% line"]}))
        .mark_rule(strokeDash=[6, 4], color="#b03a48")
        .encode(y="y:Q", tooltip="label:N")
    )
    return alt.layer(lines, rule)


def engine_time_chart(frame: pd.DataFrame) -> alt.Chart:
    """Chart each engine's time per step by resource (stacked), for one workload on one machine."""
    cols = {
        "GPU (ms/step)": "GPU",
        "link (ms/step)": "host↔GPU link",
        "CPU (ms/step)": "CPU",
        "disk (ms/step)": "disk",
    }
    data = frame.dropna(subset=["TPOT (ms)"]) if "TPOT (ms)" in frame else frame
    long = data.melt(
        id_vars=["engine"], value_vars=list(cols), var_name="resource", value_name="ms"
    )
    long["resource"] = long["resource"].map(cols)
    return (
        alt.Chart(long)
        .mark_bar()
        .encode(
            y=alt.Y("engine:N", title=None, sort=list(data["engine"])),
            x=alt.X("ms:Q", title="busy time per decode step, by resource (ms)"),
            color=alt.Color("resource:N", title="resource", legend=alt.Legend(orient="bottom")),
            tooltip=["engine:N", "resource:N", alt.Tooltip("ms:Q", format=".4g")],
        )
    )


def ngl_frame(
    hardware: str, model: str, weights: str = "q4_k_m", prompt: int = 512, generate: int = 128
) -> pd.DataFrame:
    """Return llama.cpp's tokens/s for every --n-gpu-layers value, with whether it fits."""
    from kvoffload.engines.scenario import check_fits, parse_scenario, predict
    from kvoffload.spec.errors import InputError

    n = load_model_cached(model).n_layers
    rows = []
    for ngl in range(n + 2):
        raw = {"hardware": hardware, "model": model, "engine": "llamacpp", "precision": {"weights": weights, "kv": "fp16"},
               "workload": {"batch": 1, "prompt": prompt, "generate": generate}, "options": {"n_gpu_layers": ngl}}  # fmt: skip
        sc = parse_scenario(raw, name="ngl")
        pred = predict(sc, check=False)
        try:
            check_fits(sc, pred.memory)
            fits = True
        except InputError:
            fits = False
        rows.append({"n_gpu_layers": ngl, "tokens_per_s": 1 / pred.tpot_s, "fits": fits})
    return pd.DataFrame(rows)


def load_model_cached(model: str) -> Model:
    """Return a catalog model (imported here to keep the chart helpers' imports light)."""
    from kvoffload.spec.models import load_model

    return load_model(model)


def ngl_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Chart llama.cpp's tokens/s against --n-gpu-layers, with the naive straight line between the ends."""
    ends = frame.iloc[[0, -1]]
    naive = pd.DataFrame(
        {
            "n_gpu_layers": ends["n_gpu_layers"],
            "tokens_per_s": ends["tokens_per_s"],
            "line": "straight line between the ends",
        }
    )
    curve = (
        alt.Chart(frame)
        .mark_line(point=alt.OverlayMarkDef(size=20))
        .encode(
            x=alt.X("n_gpu_layers:Q", title="--n-gpu-layers (the output layer counts as one)"),
            y=alt.Y("tokens_per_s:Q", title="tokens/s (decode, batch 1)"),
            color=alt.Color(
                "fits:N",
                title="fits in GPU memory",
                scale=alt.Scale(domain=[True, False], range=["#1f5a99", "#b03a48"]),
            ),
            tooltip=["n_gpu_layers:Q", alt.Tooltip("tokens_per_s:Q", format=".3g"), "fits:N"],
        )
    )
    line = (
        alt.Chart(naive)
        .mark_line(strokeDash=[6, 4], color="#7a7a7a")
        .encode(x="n_gpu_layers:Q", y="tokens_per_s:Q", tooltip=["line:N"])
    )
    return alt.layer(curve, line)


def validation_chart(frame: pd.DataFrame) -> alt.LayerChart:
    """Chart predicted over measured for every published row, log scale, with the 2x band."""
    band = pd.DataFrame({"lo": [0.5], "hi": [2.0]})
    rule = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(color="#7a7a7a").encode(y="y:Q")
    area = alt.Chart(band).mark_rect(opacity=0.12, color="#3a8f5c").encode(y="lo:Q", y2="hi:Q")
    points = (
        alt.Chart(frame)
        .mark_circle(size=70)
        .encode(
            x=alt.X("row:N", title="published measurement", sort=list(frame["row"])),
            y=alt.Y(
                "ratio:Q",
                scale=alt.Scale(type="log", domain=[0.2, 5]),
                title="predicted / measured",
            ),
            color=alt.Color("engine:N", title="engine"),
            tooltip=[
                "row:N",
                "engine:N",
                "model:N",
                alt.Tooltip("measured:Q", format=".4g"),
                alt.Tooltip("predicted:Q", format=".4g"),
                alt.Tooltip("ratio:Q", format=".2f"),
            ],
        )
    )
    return alt.layer(area, rule, points)


def decision_frame(
    system: System,
    model: Model,
    budget_s: float,
    contexts: np.ndarray | None = None,
    batches: np.ndarray | None = None,
) -> pd.DataFrame:
    """Return, per (context, batch), the option meeting the TPOT budget with the least GPU memory."""
    from kvoffload.studies import alternatives

    contexts = (
        np.array([4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 512_000])
        if contexts is None
        else contexts
    )
    batches = np.array([1, 2, 4, 8, 16, 32, 64]) if batches is None else batches
    return alternatives.decision_grid(system, model, contexts, batches, budget_s)


def decision_chart(frame: pd.DataFrame, budget_ms: float) -> alt.Chart:
    """Chart which option meets the TPOT budget with the least GPU memory, per context and batch."""
    order = sorted(frame["context"].unique())
    return (
        alt.Chart(frame)
        .mark_rect(stroke="white", strokeWidth=1)
        .encode(
            x=alt.X(
                "context:O",
                title="context (tokens)",
                sort=order,
                axis=alt.Axis(labelAngle=0, labelExpr="format(datum.value, '~s')"),
            ),
            y=alt.Y("batch:O", title="batch (requests)", sort="descending"),
            color=alt.Color(
                "choice:N",
                title=f"least GPU memory within {budget_ms:g} ms per token",
                legend=alt.Legend(orient="bottom", columns=2, labelLimit=320),
            ),
            tooltip=["context:Q", "batch:Q", "choice:N"],
        )
    )


def link_chart(frame: pd.DataFrame, hbm_ms: float, budget_ms: float) -> alt.LayerChart:
    """Chart TPOT with the whole cache in host memory, per link, beside the all-in-HBM step."""
    long = frame.melt(
        id_vars=["link"],
        value_vars=["TPOT, no overlap (ms)", "TPOT, perfect overlap (ms)"],
        var_name="overlap",
        value_name="ms",
    )
    bars = (
        alt.Chart(long)
        .mark_bar()
        .encode(
            y=alt.Y("link:N", title=None, sort=list(frame["link"])),
            yOffset="overlap:N",
            x=alt.X(
                "ms:Q",
                title="TPOT with every cache byte in host memory (ms, log)",
                scale=alt.Scale(type="log"),
            ),
            color=alt.Color("overlap:N", title=None, legend=alt.Legend(orient="bottom")),
            tooltip=["link:N", "overlap:N", alt.Tooltip("ms:Q", format=".4g")],
        )
    )
    rules = (
        alt.Chart(
            pd.DataFrame(
                {
                    "ms": [hbm_ms, budget_ms],
                    "label": ["everything in HBM", f"{budget_ms:g} ms budget"],
                }
            )
        )
        .mark_rule(strokeDash=[6, 4])
        .encode(
            x="ms:Q",
            color=alt.value("#b03a48"),
            tooltip=["label:N", alt.Tooltip("ms:Q", format=".4g")],
        )
    )
    return alt.layer(bars, rules)
