"""The article's own figures (catalog/article.yaml), read once and parsed into SI units."""

from __future__ import annotations

from dataclasses import dataclass

from kvoffload.inputs import catalog
from kvoffload.inputs.units import Dim, parse_quantity


def article() -> dict:
    """Return the article's own figures as the catalog writes them (catalog/article.yaml)."""
    return catalog.load("article")


def layer_times() -> dict[str, float]:
    """Return the article's per-tier times (s) for one layer's K+V, keyed by tier."""
    return {
        row["tier"]: parse_quantity(row["time"], Dim.TIME) for row in article()["layer_transfer"]
    }


@dataclass(frozen=True)
class LayerPayload:
    """The article's one-layer K+V payload beside the package's."""

    article_text: str  # as the article writes it, e.g. "500 MB"
    article_bytes: float
    computed_bytes: int

    @property
    def article_short_pct(self) -> float:
        """Return how far (%) the article's payload falls short of the computed one."""
        return 100 * (1 - self.article_bytes / self.computed_bytes)


def layer_payload(computed_bytes: int) -> LayerPayload:
    """Return the article's one-layer K+V payload set beside ``computed_bytes``."""
    text = article()["layer_kv"]["k_plus_v"]
    return LayerPayload(text, parse_quantity(text, Dim.BYTES), int(computed_bytes))


def tpot_bound_rows() -> list[dict]:
    """Return the rows of the article's TPOT-bound table: label, tokens and time as written."""
    return list(article()["tpot_bound"]["rows"])


def tpot_bound_numbers() -> str:
    """Return the article's TPOT-bound times as it prints them, joined: '… / … / …'."""
    return " / ".join(r["time"].split()[0] for r in tpot_bound_rows())
