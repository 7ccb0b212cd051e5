"""The step model as the scenario places it: ``placement:``, ``attention:`` and ``overlap:`` read
as given (model/decode.py); no options."""

from __future__ import annotations

from kvoffload.engines.spec import EngineSpec
from kvoffload.model.prediction import Prediction, Scenario, predict_setup


def predict(sc: Scenario) -> Prediction:
    """Return the step model's prediction for the scenario's own setup."""
    return predict_setup(sc, sc.setup)


ENGINE = EngineSpec(
    name="generic",
    options=None,
    predict=predict,
    placement_option=None,
    pin_option=None,
    refuses={},
    routing_ignored=((), ""),
)
