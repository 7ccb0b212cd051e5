"""One decode step, layer by layer, and the time per output token over a growing context.

Each layer's work is split into six streams: GPU (a roofline over the bytes it reads from its own
memory and the FLOPs at the dense peak times an efficiency from the profile), CPU (attention over
host-resident KV), host→GPU and GPU→host copies over the link, and disk reads and writes. The
overlap mode says how the streams combine into a step. Layers that are alike (same window, same
weights) are computed once as a class, so sweeps over context × batch stay cheap.

The package re-exports the names of its modules, each of which holds one job: placement (the
inputs), layer_classes, kv_bytes, traffic (weight work), streams, overlap (the step), exact_mean
and mean (the mean over generated tokens), prefill, footprint (memory per tier), limits and
overflow (placements that spill what does not fit). A test that patches a tunable patches the
module that reads it (``decode.exact_mean.BRUTE_STEPS``).
"""

from kvoffload.model.decode.exact_mean import BRUTE_STEPS, token_mean
from kvoffload.model.decode.exact_mean import _split as _split
from kvoffload.model.decode.footprint import Memory, memory, prefill_reserve
from kvoffload.model.decode.kv_bytes import _kv_token_bytes as _kv_token_bytes
from kvoffload.model.decode.kv_bytes import _kv_total as _kv_total
from kvoffload.model.decode.layer_classes import (
    Layers,
    layers,
    resident_weight_bytes,
    step_weight_bytes,
)
from kvoffload.model.decode.limits import hidden_tokens, knee_context, max_batch, max_context
from kvoffload.model.decode.mean import MeanStep, mean_step, tpot
from kvoffload.model.decode.overflow import spill, spill_weights
from kvoffload.model.decode.overlap import Step, combine, step
from kvoffload.model.decode.overlap import _pipeline as _pipeline
from kvoffload.model.decode.placement import (
    OVERLAP_MODES,
    AttentionWalk,
    GroupPlacement,
    Placement,
    Setup,
    Split,
    by_groups,
    offloaded,
)
from kvoffload.model.decode.prefill import prefill_attention_flops, prefill_flops, ttft
from kvoffload.model.decode.streams import STREAM_NAMES, STREAMS, cpu_stream_name, stream_times
from kvoffload.model.decode.traffic import WeightTraffic, weight_traffic

__all__ = [
    "BRUTE_STEPS",
    "OVERLAP_MODES",
    "STREAMS",
    "STREAM_NAMES",
    "AttentionWalk",
    "GroupPlacement",
    "Layers",
    "MeanStep",
    "Memory",
    "Placement",
    "Setup",
    "Split",
    "Step",
    "WeightTraffic",
    "by_groups",
    "combine",
    "cpu_stream_name",
    "hidden_tokens",
    "knee_context",
    "layers",
    "max_batch",
    "max_context",
    "mean_step",
    "memory",
    "offloaded",
    "prefill_attention_flops",
    "prefill_flops",
    "prefill_reserve",
    "resident_weight_bytes",
    "spill",
    "spill_weights",
    "step",
    "step_weight_bytes",
    "stream_times",
    "token_mean",
    "tpot",
    "ttft",
    "weight_traffic",
]
