"""The one refusal of engines modelled on one GPU: a profile with several is refused, saying why."""

from __future__ import annotations

from kvoffload.inputs.errors import InputError
from kvoffload.model.prediction import Scenario


def refuse_several_gpus(sc: Scenario, engine: str, unmodelled: str) -> None:
    """Refuse a profile with more than one GPU for ``engine``, whose ``unmodelled`` is not modelled."""
    if sc.system.gpu.count > 1:
        raise InputError(
            f"engine '{engine}' is modelled on one GPU ({unmodelled} not); give a profile with "
            f"1 GPU, not {sc.system.gpu.count}",
            field="hardware.gpu.count",
        )
