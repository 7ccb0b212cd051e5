"""The article's claims: every one recomputed, every verdict following from its number."""

from __future__ import annotations

import pytest

from kvoffload.spec import catalog
from kvoffload.studies.claims import FUNCTIONS, VERDICTS, load_claims, sections

CLAIMS = load_claims()


def test_there_are_about_forty_claims_or_more_with_unique_ids():
    assert len(CLAIMS) >= 40
    assert len({c.id for c in CLAIMS}) == len(CLAIMS)


@pytest.mark.parametrize("claim", [c for c in CLAIMS if c.recompute], ids=lambda c: c.id)
def test_verdict_follows_from_the_recomputation(claim):
    assert claim.recompute["call"] in FUNCTIONS
    value = claim.recomputed()
    assert claim.judged(value) == claim.verdict, (
        f"{claim.id}: claimed {claim.claimed_text()}, recomputed {claim.show(value)}"
    )


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_every_claim_is_complete(claim):
    assert claim.verdict in VERDICTS
    assert claim.quote and claim.gloss and claim.reason and claim.section
    if claim.source:
        assert claim.source in catalog.sources(), claim.source
    if not claim.recompute and claim.verdict != "not verifiable":  # a fact, checked at a source
        assert claim.source, f"{claim.id} is not recomputed, so it must name its source"
    if claim.verdict in ("wrong", "imprecise") and not claim.recompute:
        assert claim.correct or claim.reason


def test_every_section_of_the_article_is_covered():
    expected = {
        "Memory tiers", "KV sizing", "Transfer times", "Compute vs stall", "llama.cpp", "vLLM",
        "FlexGen and InfLLM", "When offload is practical", "Alternatives", "Beyond PCIe 4",
    }  # fmt: skip
    assert set(sections()) == expected


def test_a_wrong_number_would_change_the_verdict():
    # the rule is not vacuous: the article's 15.6 ms would "hold" only if the payload were 500 MB
    claim = next(c for c in CLAIMS if c.id == "move-pcie4")
    assert claim.judged(15.6e-3) == "holds"
    assert claim.judged(claim.recomputed()) == "imprecise"
    assert claim.judged(30e-3) == "wrong"


def test_numbers_left_out_say_why():
    from kvoffload.studies.claims import omitted

    assert len(omitted()) >= 3
    for o in omitted():
        assert o["quote"] and len(o["reason"]) > 20
