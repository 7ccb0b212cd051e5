"""Chapter 10's table and charts: three ways to fit an MoE model, the two curves, routed bytes."""

from __future__ import annotations

import altair as alt
import pandas as pd

from kvoffload.inputs.units import format_number
from kvoffload.report.charting import PALETTE, limit_line, note_coinciding, wrapped_labels
from kvoffload.studies.cpu_experts import CpuExperts
from kvoffload.studies.fit_marks import FITS, marked, shortfall_text
from kvoffload.studies.moe_offload import KV, NCMOE, NGL, FitOptions

SETTING_LABELS = {
    NCMOE: "--n-cpu-moe N: experts of layers 0..N-1 on the CPU",
    NGL: "-ngl N: whole layers on the CPU, the last N on the GPU",
}


def _number(value: float) -> str:
    """Return a number with three significant figures, or a dash where there is none."""
    return "—" if pd.isna(value) else format_number(value)


# formats for styling.show: the fit table's empty rows show a dash, not 'nan'
FIT_FORMATS = {"GPU memory (GB)": _number, "host memory (GB)": _number}
ROUTED_FORMATS = {
    "experts touched per layer": "{:.3g}",
    "share of the experts": "{:.1%}",
    "GB read per step": "{:.3g}",
    "every expert (GB)": "{:.3g}",
    "link, touched experts (ms)": "{:.3g}",
    "link, every expert (ms)": "{:.3g}",
}


def fit_table(fits: FitOptions) -> pd.DataFrame:
    """Return the ways to run the model as a page table: options, formats, memory in GB, tokens/s.

    "fits the GPU" says what a way that does not fit needs of the GPU's memory, and the tokens/s
    of a way that does not fit GPU and host memory both carry ``fit_marks.UNFIT_MARK``.
    """
    rows = fits.rows
    yes_no = {True: "yes", False: "no"}
    some = rows["option"] != ""
    gpu_fit = [
        FITS if ok else (shortfall_text("GPU memory", b, fits.gpu_capacity_bytes) if w else "no")
        for ok, b, w in zip(rows["fits_gpu"], rows["gpu_bytes"], some, strict=True)
    ]
    rate = [
        v if pd.isna(v) else marked(_number(v), bool(g and h))
        for v, g, h in zip(rows["tokens_per_s"], rows["fits_gpu"], rows["host_holds"], strict=True)
    ]
    return pd.DataFrame(
        {
            "way": rows["way"],
            "llama.cpp options": rows["option"].where(some, "(none fits)"),
            "weights": rows["weights"].str.upper(),
            "KV cache": [KV.upper() if w else "" for w in some],
            "GPU memory (GB)": rows["gpu_bytes"] / 1e9,
            "host memory (GB)": rows["cpu_bytes"] / 1e9,
            "tokens/s": rate,
            "fits the GPU": gpu_fit,
            "host memory holds it": rows["host_holds"].map(yes_no).where(some, ""),
            "note": rows["note"],
        }
    )


CPU_EXPERTS_FORMATS = {
    "decode tokens/s": _number,
    "prefill tokens/s": _number,
    "GPU memory (GB)": _number,
    "host memory (GB)": _number,
}


def cpu_experts_table(result: CpuExperts) -> pd.DataFrame:
    """Return llama.cpp and KTransformers with every expert on the CPU as a page table, each row
    with the command that runs it (a note); a row that does not fit is marked."""
    rows = result.rows
    return pd.DataFrame(
        {
            "engine": rows["engine"],
            "setting": rows["setting"],
            "decode tokens/s": rows["decode_tokens_per_s"],
            "prefill tokens/s": rows["prefill_tokens_per_s"],
            "GPU memory (GB)": rows["gpu_bytes"] / 1e9,
            "host memory (GB)": rows["cpu_bytes"] / 1e9,
            "fits": rows["fits"],
            "command": rows["command"],
        }
    )


def routed_table(routed: pd.DataFrame) -> pd.DataFrame:
    """Return ``studies.moe_offload.routed_bytes`` with the page's column names."""
    return routed.rename(
        columns={
            "experts_touched": "experts touched per layer",
            "touched_share": "share of the experts",
            "routed_gb": "GB read per step",
            "all_experts_gb": "every expert (GB)",
            "link_touched_ms": "link, touched experts (ms)",
            "link_all_ms": "link, every expert (ms)",
        }
    )


def curves_chart(curve: pd.DataFrame) -> alt.LayerChart:
    """Chart tokens/s against the GPU memory each setting uses, --n-cpu-moe beside -ngl.

    ``curve`` is ``studies.moe_offload.ncmoe_curve``; the dashed rule is the machine's GPU memory,
    and a hollow point marks a setting that does not fit GPU and host memory both.
    """
    capacity_gb = float(curve["capacity_gb"].iloc[0])
    data = curve.drop(columns="capacity_gb").assign(
        label=curve["setting"].map(SETTING_LABELS),
        fits=curve["fits"].map({True: "fits GPU and host memory", False: "does not fit"}),
    )
    color = alt.Color(
        "label:N",
        title=None,
        scale=alt.Scale(domain=list(SETTING_LABELS.values()), range=PALETTE[:2]),
        legend=alt.Legend(labelExpr=wrapped_labels(list(SETTING_LABELS.values()))),
    )
    x = alt.X("gpu_gb:Q", title="GPU memory used (GB)")
    y = alt.Y("tokens_per_s:Q", title="tokens/s (decode, batch 1)")
    tooltip = [
        alt.Tooltip("option:N", title="option"),
        alt.Tooltip("gpu_gb:Q", title="GPU memory (GB)", format=".3g"),
        alt.Tooltip("tokens_per_s:Q", title="tokens/s", format=".3g"),
        alt.Tooltip("fits:N", title="this machine"),
    ]
    base = alt.Chart(data).encode(x=x, y=y, color=color, tooltip=tooltip)
    lines = base.mark_line(strokeWidth=1.5).encode(order="gpu_gb:Q")
    fits = alt.datum.fits == "fits GPU and host memory"
    filled = base.mark_point(size=28, filled=True, opacity=1).transform_filter(fits)
    hollow = base.mark_point(size=28, filled=False, opacity=1).transform_filter(~fits)
    # the label sits on the side of the line with more room
    side = "left" if capacity_gb > float(data["gpu_gb"].max()) / 2 else "right"
    rule = limit_line(capacity_gb, f"GPU memory {capacity_gb:.3g} GB", "x", side=side)
    chart = alt.layer(lines, filled, hollow, rule).properties(height=340)
    return note_coinciding(chart, data, "label", "gpu_gb", "tokens_per_s", log=False)


def routed_chart(routed: pd.DataFrame) -> alt.LayerChart:
    """Chart the routed-expert bytes one step reads against batch (log x), beside every expert.

    ``routed`` is ``studies.moe_offload.routed_bytes``.
    """
    long = pd.concat(
        [
            routed.assign(
                what="experts the batch touches (llama.cpp reads; an engine streaming routed experts moves)",
                gb=routed["routed_gb"],
                ms=routed["link_touched_ms"],
            ),
            routed.assign(
                what="every routed expert (an engine streaming all experts moves)",
                gb=routed["all_experts_gb"],
                ms=routed["link_all_ms"],
            ),
        ]
    )
    chart = (
        alt.Chart(long)
        .mark_line(point=alt.OverlayMarkDef(size=20))
        .encode(
            x=alt.X(
                "batch:Q",
                title="batch (requests decoded together)",
                scale=alt.Scale(type="log", nice=False),
                axis=alt.Axis(format="~s"),
            ),
            y=alt.Y("gb:Q", title="routed-expert bytes per decode step (GB)"),
            color=alt.Color(
                "what:N",
                title=None,
                scale=alt.Scale(range=[PALETTE[1], PALETTE[5]]),
                legend=alt.Legend(labelExpr=wrapped_labels(long["what"].unique())),
            ),
            strokeDash=alt.StrokeDash(
                "what:N", legend=alt.Legend(labelExpr=wrapped_labels(long["what"].unique()))
            ),
            tooltip=[
                alt.Tooltip("batch:Q"),
                alt.Tooltip("experts_touched:Q", title="experts touched per layer", format=".3g"),
                alt.Tooltip("touched_share:Q", title="share of the experts", format=".1%"),
                alt.Tooltip("gb:Q", title="GB per step", format=".3g"),
                alt.Tooltip("ms:Q", title="over this machine's link (ms)", format=".3g"),
            ],
        )
        .properties(height=300)
    )
    return note_coinciding(chart, long, "what", "batch", "gb", log=False)
