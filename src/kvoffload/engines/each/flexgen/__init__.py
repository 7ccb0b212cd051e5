"""FlexGen: weights, KV cache and activations placed over GPU, CPU and disk by fractions; a block of
GPU batches shares each loaded layer (zig-zag); attention on the CPU over CPU-resident cache
(``--cpu``); optional 4-bit group-wise compression; and FlexGen's overlap.

``policy`` holds the options and the policy and cost arrays; ``cost_model`` the times;
``allocation`` the memory and the LP's GPU peak; ``policy_search`` the search; ``engine`` the
prediction and the registry entry. Their names are re-exported here.
"""

from kvoffload.engines.each.flexgen.allocation import ALPHA_G, _modules, fits, lp_gpu_bytes, memory
from kvoffload.engines.each.flexgen.cost_model import cost
from kvoffload.engines.each.flexgen.engine import ENGINE, predict
from kvoffload.engines.each.flexgen.policy import (
    COMPRESSED,
    DEQUANT_TRAFFIC,
    Costs,
    Options,
    Policies,
    given_policy,
    pin_weight,
)
from kvoffload.engines.each.flexgen.policy_search import (
    ACT_GPU,
    GBS,
    HALVES,
    NB,
    TOP,
    _score,
    policies,
    refine,
    search,
)
from kvoffload.model.prediction import Scenario

__all__ = [
    "ACT_GPU",
    "ALPHA_G",
    "COMPRESSED",
    "DEQUANT_TRAFFIC",
    "ENGINE",
    "GBS",
    "HALVES",
    "NB",
    "TOP",
    "Costs",
    "Options",
    "Policies",
    "Scenario",
    "_modules",
    "_score",
    "cost",
    "fits",
    "given_policy",
    "lp_gpu_bytes",
    "memory",
    "pin_weight",
    "policies",
    "predict",
    "refine",
    "search",
]
