"""Beyond PCIe 4: the same offloaded decode over faster links, the link a TPOT budget needs, and
the floor that no link removes (the GPU's own work, layer after layer)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from msgspec.structs import replace

from kvoffload.inputs import catalog
from kvoffload.inputs.figures import Figure, Kind
from kvoffload.inputs.hardware import System, build_part
from kvoffload.inputs.models import Model
from kvoffload.inputs.units import Dim, format_bandwidth, format_number
from kvoffload.model import decode
from kvoffload.model.search import smallest_true_log

LINK_IDS = tuple(catalog.parts("link"))  # every catalog link, in catalog order
# A x8 CXL 2.0 expander on PCIe 5.0 electricals: 31.5 GB/s per direction on the wire (cxl-spec-x8);
# Micron measured up to 36 GB/s on one CZ120 at a 2:1 read/write mix, which uses both directions
# (micron-cz120), so a read-only stream is held to the one-direction figure.
CXL_X8 = 31.5e9


def with_link(system: System, link_id: str) -> System:
    """Return the system with another catalog link."""
    return replace(system, link=build_part("link", link_id))


def with_cxl_host(system: System) -> System:
    """Return the system with the cache in a CXL memory expander: host memory at the x8 CXL rate."""
    fig = Figure(
        CXL_X8,
        Dim.BANDWIDTH,
        Kind.SPEC,
        "cxl-spec-x8",
        "x8 CXL 2.0 expander, one direction; Micron measured up to 36 GB/s at a 2:1 read/write mix"
        " (micron-cz120); measured cards show 2-5x local DRAM latency (cxl-real-world-2024), which"
        " a bulk stream of megabytes hides",
    )
    host = replace(system.host, memory_bandwidth=fig, memory_bandwidth_peak=None)
    return replace(system, host=host)


def link_rows(
    system: System, model: Model, context: int = 128_000, batch: int = 1, generate: int = 1
) -> pd.DataFrame:
    """Return, per link, TPOT with every cache byte in host memory, one step's link time and GPU work.

    TPOT is ``decode.tpot`` over ``generate`` tokens; the link time and its ratio to the GPU's
    work are the first step's (at ``context``).
    """
    variants = [
        (build_part("link", i).name, with_link(system, i), build_part("link", i).h2d_bandwidth)
        for i in LINK_IDS
    ]
    cxl = with_cxl_host(with_link(system, "pcie5-x16"))
    variants.append(
        ("PCIe 5.0 x16, cache in a CXL x8 memory expander", cxl, cxl.host.memory_bandwidth)
    )
    rows = []
    for name, sys_, fig in variants:
        st = decode.offloaded(sys_, model)
        step = decode.step(st, context, batch)  # the first step's streams
        hbm = float(step.streams["gpu"])
        rows.append(
            {
                "link": name,
                "copy rate": format_bandwidth(sys_.copy_rate("h2d")),
                "link time (ms)": float(step.streams["h2d"]) * 1e3,
                "TPOT, no overlap (ms)": float(decode.tpot(st, context, generate, batch)) * 1e3,
                "TPOT, perfect overlap (ms)": float(
                    decode.tpot(st, context, generate, batch, "perfect")
                )
                * 1e3,
                "link / GPU work (×)": float(step.streams["h2d"]) / hbm,
                "rate kind": fig.kind.value,
                "rate source": catalog.source_title(fig.source),
            }
        )
    return pd.DataFrame(rows)


def required_link(
    system: System,
    model: Model,
    context: int,
    batch: int,
    budget_s: float,
    overlap: str = "none",
    generate: int = 1,
) -> float:
    """Return the host-to-GPU rate (B/s) that meets the TPOT budget with the cache in host memory.

    inf when no rate does: the GPU's own work (and the per-copy latency) already exceeds it.
    """
    return _solve(
        lambda rate: tpot_with_link(system, model, context, batch, rate, overlap, generate),
        budget_s,
    )


def tpot_with_link(
    system: System,
    model: Model,
    context: int,
    batch: int,
    rate: float,
    overlap: str = "none",
    generate: int = 1,
) -> float:
    """Return TPOT (s, ``decode.tpot``) with the cache in host memory reached at ``rate`` (B/s).

    Host memory is raised to the rate where it is slower, so the figure is the link's alone.
    """
    link = replace(system.link, **{
        k: Figure(rate, Dim.BANDWIDTH, Kind.ASSUMED) for k in ("raw_bandwidth", "h2d_bandwidth", "d2h_bandwidth")
    }, pageable_bandwidth=None)  # fmt: skip
    host = replace(
        system.host,
        memory_bandwidth=Figure(
            max(rate, system.host.memory_bandwidth.value), Dim.BANDWIDTH, Kind.ASSUMED
        ),
        memory_bandwidth_peak=None,
    )
    s = replace(system, link=link, host=host)
    return float(
        decode.tpot(decode.offloaded(s, model, overlap), context, generate, batch, overlap)
    )


UNLIMITED = 1e16  # B/s: a link so fast its copy time is nil; what remains is the GPU's own work


def _solve(tpot_at, budget_s: float) -> float:
    """Return the smallest rate (B/s) with tpot_at(rate) <= budget_s; inf when none does."""
    # TPOT falls as the rate rises: bisect in log space from 1 MB/s to an unlimited link
    return smallest_true_log(lambda rate: tpot_at(rate) <= budget_s, 1e6, UNLIMITED, iters=80)


def required_table(
    system: System,
    model: Model,
    contexts: tuple[int, ...] = (32_000, 128_000),
    batches: tuple[int, ...] = (1, 4, 16),
    budget_s: float = 0.05,
    generate: int = 1,
) -> pd.DataFrame:
    """Return the link rate a TPOT budget needs, per context and batch, and what limits it."""
    own = system.copy_rate("h2d")
    rows = []
    for c in contexts:
        for b in batches:
            none = required_link(system, model, c, b, budget_s, "none", generate)
            perfect = required_link(system, model, c, b, budget_s, "perfect", generate)
            rows.append(
                {
                    "context": c,
                    "batch": b,
                    "needed, no overlap (GB/s)": none / 1e9,
                    "needed, perfect overlap (GB/s)": perfect / 1e9,
                    "this link (GB/s)": own / 1e9,
                    "TPOT, unlimited link (ms)": tpot_with_link(
                        system, model, c, b, UNLIMITED, generate=generate
                    )
                    * 1e3,
                    "GPU work, all in HBM (ms)": float(
                        decode.tpot(decode.Setup(system, model), c, generate, b)
                    )
                    * 1e3,
                    "limit": "GPU work, layer after layer"
                    if np.isinf(perfect)
                    else ("this link suffices" if perfect <= own else "the wire"),
                }
            )
    return pd.DataFrame(rows)


def verdict(
    system: System,
    model: Model,
    context: int = 128_000,
    batch: int = 1,
    budget_s: float = 0.05,
    generate: int = 1,
) -> dict[str, float | bool | str]:
    """Return offloaded TPOT over this system's link and over PCIe 4.0 x16, against a budget."""
    pcie4 = with_link(system, "pcie4-x16")
    out: dict[str, float | bool | str] = {"link": system.link.name}
    for tag, s in (("own", system), ("pcie4", pcie4)):
        out[f"{tag}_gbs"] = s.copy_rate("h2d") / 1e9  # achievable host->GPU rate, GB/s
        for mode in ("none", "perfect"):
            t = float(decode.tpot(decode.offloaded(s, model, mode), context, generate, batch, mode))
            out[f"{tag}_{mode}_ms"] = t * 1e3
            out[f"{tag}_{mode}_meets"] = t <= budget_s
    out["hbm_ms"] = float(decode.tpot(decode.Setup(system, model), context, generate, batch)) * 1e3
    out["changes"] = bool(out["own_perfect_meets"]) and not bool(out["pcie4_perfect_meets"])
    return out


@dataclass(frozen=True)
class VerdictWords:
    """A ``verdict`` in words: whether each link meets the budget, whether the link matters."""

    own_meets: str  # 'meets' or 'misses', with perfect overlap over this machine's link
    pcie4_meets: str  # the same over PCIe 4.0 x16
    changes: str  # 'changes the conclusion' or 'does not change the conclusion'


def verdict_words(v: dict[str, float | bool | str]) -> VerdictWords:
    """Return a ``verdict`` as the words a sentence needs."""
    return VerdictWords(
        own_meets="meets" if v["own_perfect_meets"] else "misses",
        pcie4_meets="meets" if v["pcie4_perfect_meets"] else "misses",
        changes="changes the conclusion" if v["changes"] else "does not change the conclusion",
    )


@dataclass(frozen=True)
class LinkFindings:
    """PCIe 4.0, PCIe 5.0 and NVLink-C2C side by side, from a ``link_rows`` frame."""

    pcie4_ms: float  # offloaded TPOT, no overlap
    pcie5_ms: float
    pcie5_ratio: float  # PCIe 5.0 link time over the GPU's work
    c2c_ms: float  # NVLink-C2C (Grace <-> Hopper)
    c2c_ratio: float

    @property
    def pcie5_gain(self) -> float:
        """Return how many times shorter the offloaded TPOT is over PCIe 5.0 than over PCIe 4.0."""
        return self.pcie4_ms / self.pcie5_ms


def link_findings(links: pd.DataFrame) -> LinkFindings:
    """Return the PCIe 4.0, PCIe 5.0 and NVLink-C2C rows' TPOT and link-over-GPU ratios."""
    by = links.set_index("link")
    c2c = next(n for n in by.index if n.startswith("NVLink-C2C (Grace CPU <-> Hopper"))
    tpot = "TPOT, no overlap (ms)"
    return LinkFindings(
        pcie4_ms=float(by.loc["PCIe 4.0 x16", tpot]),
        pcie5_ms=float(by.loc["PCIe 5.0 x16", tpot]),
        pcie5_ratio=float(by.loc["PCIe 5.0 x16", "link / GPU work (×)"]),
        c2c_ms=float(by.loc[c2c, tpot]),
        c2c_ratio=float(by.loc[c2c, "link / GPU work (×)"]),
    )


@dataclass(frozen=True)
class NeedFindings:
    """The link one (context, batch) needs, and how many cases no link can serve."""

    perfect_gbs: float  # needed with perfect overlap (GB/s; inf: no link suffices)
    none_gbs: float  # needed without overlap
    own_gbs: float  # this machine's link
    n_floor: int  # cases where no link meets the budget
    n_rows: int
    context: int = 128_000
    batch: int = 1

    @property
    def need_text(self) -> str:
        """Return the rate needed with perfect overlap for prose, or say that no rate is enough."""
        if math.isinf(self.perfect_gbs):
            return "more than any link can give"
        return f"{format_number(self.perfect_gbs, 4)} GB/s"

    def sentence(self) -> str:
        """Return the case's needed rates against this machine's link, as one sentence."""
        case = f"At {self.context:,} tokens and batch {self.batch}"
        own = f"this machine's link gives {format_number(self.own_gbs, 4)} GB/s"
        if math.isinf(self.perfect_gbs):
            return f"{case} no link rate meets the budget, with overlap or without; {own}."
        without = (
            "and no rate at all without it"
            if math.isinf(self.none_gbs)
            else f"({format_number(self.none_gbs, 4)} GB/s without)"
        )
        return f"{case} the budget needs {self.need_text} with perfect overlap {without}; {own}."


def need_findings(need: pd.DataFrame, context: int = 128_000, batch: int = 1) -> NeedFindings:
    """Return, from a ``required_table``, one case's needed rate and the count of unreachable cases."""
    row = need[(need["context"] == context) & (need["batch"] == batch)].iloc[0]
    perfect = "needed, perfect overlap (GB/s)"
    return NeedFindings(
        perfect_gbs=float(row[perfect]),
        none_gbs=float(row["needed, no overlap (GB/s)"]),
        own_gbs=float(row["this link (GB/s)"]),
        n_floor=int(np.isinf(need[perfect]).sum()),
        n_rows=len(need),
        context=context,
        batch=batch,
    )


def source_ids() -> tuple[str, ...]:
    """Return the sources this module's figures rest on (checked by the tests)."""
    return tuple(
        s for s in ("cxl-spec-x8", "cxl-real-world-2024", "micron-cz120") if s in catalog.sources()
    )
