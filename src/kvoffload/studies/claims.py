"""The article's claims as data: each recomputed by the package and judged by a stated rule."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

from kvoffload.inputs import catalog
from kvoffload.inputs.units import Dim, UnitError, format_number, format_quantity, parse_quantity
from kvoffload.studies.claim_figures import FUNCTIONS

VERDICTS = ("holds", "imprecise", "wrong", "not verifiable")

# -- the rule: one for every recomputed claim, stated here once ----------------------------------
HOLDS_WITHIN = 0.05  # relative error |claimed - recomputed| / |recomputed| at most this: holds
IMPRECISE_WITHIN = 0.25  # at most this: imprecise; beyond it: wrong
# What a claim's number is, which says how the rule applies to it:
#   measure     a quantity (bytes, seconds, a rate, a ratio): judged by its relative error; a range
#               ({min, max}, either end open) holds inside and is judged by its distance to the
#               nearer end outside
#   count       a whole number fixed by a definition (layers, heads, device crossings): right only
#               if equal (or inside its range), else wrong, however close
#   comparison  an order the article asserts ({gt: x} or {lt: x}: "faster than", "below"): holds
#               if strictly true, else wrong
KINDS = ("measure", "count", "comparison")
NEW = "not listed"  # previous_verdict of a claim the earlier version of the chapter did not check


def rule_verdict(error: float) -> str:
    """Return the verdict a relative error earns under the rule."""
    if error <= HOLDS_WITHIN:
        return "holds"
    return "imprecise" if error <= IMPRECISE_WITHIN else "wrong"


# -- claims --------------------------------------------------------------------------------------
def _value(x: Any) -> float:
    """Read a claimed value: a number, or a quantity string with a unit."""
    if isinstance(x, int | float) and not isinstance(x, bool):
        return float(x)
    for dim in Dim:
        try:
            return parse_quantity(x, dim)
        except UnitError:
            continue
    raise ValueError(f"cannot read claimed value {x!r}")


def _is_range(c: Any) -> bool:
    return isinstance(c, dict) and ("min" in c or "max" in c)


def _is_order(c: Any) -> bool:
    return isinstance(c, dict) and ("gt" in c or "lt" in c)


@dataclass(frozen=True)
class Claim:
    """One claim of the article."""

    id: str
    section: str
    quote: str
    gloss: str
    verdict: str
    reason: str
    claimed: Any = None  # a value, {min, max} (either may be left out), or {gt|lt: x}
    recompute: dict | None = None  # {call: name, args: {...}}
    kind: str = "measure"  # how the rule applies: see KINDS
    quantity: str = ""  # what the claimed number measures, where the quote does not say it
    unit: str = ""  # how to show the values: a Dim name, or '' for a plain number
    source: str = ""
    correct: str = ""
    conclusion: str = ""
    previous_verdict: str = ""  # the verdict before the re-judging (NEW for an added claim)
    previous_gloss: str = ""  # the gloss before, where it changed
    change_reason: str = ""  # why the verdict or the gloss changed
    previous_reason: str = ""  # the reason the previous verdict gave, where the verdict changed
    earlier: tuple = ()  # older re-judgings, newest first: {verdict, change_reason}

    def __post_init__(self) -> None:
        problems = []
        if self.kind not in KINDS:
            problems.append(f"kind {self.kind!r} is not one of {KINDS}")
        if (self.kind == "comparison") != _is_order(self.claimed):
            problems.append("a comparison, and only a comparison, claims {gt: x} or {lt: x}")
        if self.verdict not in VERDICTS:
            problems.append(f"verdict {self.verdict!r} is not one of {VERDICTS}")
        if self.previous_verdict not in ("", NEW, *VERDICTS):
            problems.append(f"previous_verdict {self.previous_verdict!r} is not a verdict")
        changed = self.previous_verdict or self.previous_gloss
        if changed and not self.change_reason:
            problems.append("a changed verdict or gloss needs a change_reason")
        if self.change_reason and not changed:
            problems.append("change_reason without a previous_verdict or previous_gloss")
        if self.previous_verdict == self.verdict:
            problems.append("previous_verdict equals the verdict: leave it out")
        if self.previous_reason and not self.previous_verdict:
            problems.append("previous_reason without a previous_verdict")
        if self.earlier and not self.previous_verdict:
            problems.append("earlier re-judgings without a previous_verdict")
        for e in self.earlier:
            if e.get("verdict") not in (NEW, *VERDICTS) or len(e.get("change_reason", "")) < 20:
                problems.append(f"earlier re-judging {e!r} needs a verdict and a change_reason")
        if problems:
            raise ValueError(f"claim {self.id}: " + "; ".join(problems))

    def recomputed(self) -> float | None:
        """Return the package's value for the claim, or None for a fact checked against a source."""
        if not self.recompute:
            return None
        return float(FUNCTIONS[self.recompute["call"]](**self.recompute.get("args", {})))

    def error(self, value: float) -> float:
        """Return the relative distance from the claim to ``value`` (0 when a range or order holds)."""
        c = self.claimed
        if _is_order(c):
            ok = value > _value(c["gt"]) if "gt" in c else value < _value(c["lt"])
            return 0.0 if ok else math.inf
        if _is_range(c):
            lo, hi = _value(c.get("min", -math.inf)), _value(c.get("max", math.inf))
            if lo <= value <= hi:
                return 0.0
            target = lo if value < lo else hi
        else:
            target = _value(c)
        if value == 0:
            return 0.0 if target == 0 else math.inf
        return abs(target - value) / abs(value)

    def judged(self, value: float) -> str:
        """Return the verdict the recomputed value implies under the rule."""
        err = self.error(value)
        if self.kind == "count" and err > 0:
            return "wrong"  # a count is right or wrong, however close
        return rule_verdict(err)

    @property
    def changed(self) -> bool:
        """Whether the re-judging changed this claim's verdict or gloss, or added the claim."""
        return bool(self.previous_verdict or self.previous_gloss)

    @property
    def verdicts(self) -> tuple[str, ...]:
        """Return the claim's verdicts, oldest first, ending with the current one."""
        older = [e["verdict"] for e in reversed(self.earlier)]
        return (*older, *([self.previous_verdict] if self.previous_verdict else []), self.verdict)

    @property
    def added(self) -> bool:
        """Whether a re-judging added this claim (the earlier chapter did not list it)."""
        return self.verdicts[0] == NEW

    def show(self, value: float | None) -> str:
        """Format a value in the claim's unit."""
        if value is None:
            return "—"
        if self.unit:
            return format_quantity(value, Dim[self.unit])
        return format_number(value, 4)

    def claimed_text(self) -> str:
        """Format what the article claims."""
        c = self.claimed
        if c is None:
            return "—"
        if _is_range(c):
            if "max" not in c:
                return f"at least {c['min']}"
            if "min" not in c:
                return f"at most {c['max']}"
            return f"{c['min']}–{c['max']}"
        if _is_order(c):
            return ", ".join(f"{'>' if k == 'gt' else '<'} {v}" for k, v in c.items())
        return str(c)


@cache
def load_claims() -> tuple[Claim, ...]:
    """Return the article's claims from catalog/claims.yaml."""
    raw = catalog.load("claims")
    return tuple(Claim(**{**c, "earlier": tuple(c.get("earlier", ()))}) for c in raw["claims"])


@cache
def omitted() -> tuple[dict, ...]:
    """Return the article's numbers that are not claims, each with the reason it is left out."""
    raw = catalog.load("claims")
    return tuple(raw.get("omitted", []))


def sections() -> list[str]:
    """Return the article's sections in the order the claims appear."""
    return list(dict.fromkeys(c.section for c in load_claims()))


def changed() -> tuple[Claim, ...]:
    """Return the claims whose verdict or gloss the re-judging changed, and the claims it added."""
    return tuple(c for c in load_claims() if c.changed)


def summary() -> dict[str, int]:
    """Return how many claims got each verdict."""
    counts = dict.fromkeys(VERDICTS, 0)
    for c in load_claims():
        counts[c.verdict] += 1
    return counts
