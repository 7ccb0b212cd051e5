"""FlexGen's policy: its options, policies and their costs as arrays, the compression's sizes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import msgspec
import numpy as np
from msgspec import UNSET, Meta, UnsetType

from kvoffload.inputs import catalog
from kvoffload.inputs.errors import FieldError
from kvoffload.inputs.limits import MAX_BATCH
from kvoffload.inputs.precision import int4_g64_bytes
from kvoffload.inputs.text import Strict
from kvoffload.model.prediction import Scenario

# shares are compared with FlexGen's percentages; float noise must not move a tensor
SHARE_EPS = 1e-9

# bytes per fp16 byte: 4-bit values plus an fp16 scale and minimum per group of 64 (int4_g64)
COMPRESSED = int4_g64_bytes(1, 64) / (2 * 64)
# HBM bytes FlexGen's TorchCompressedDevice.decompress moves per fp16 byte it produces, counted op
# by op from flexgen/compression.py for N values (packed N/2 bytes, output 2N bytes):
#   packed >> 4 and packed & 0xF: read N/2, write N/2 each          -> 2N
#   data[even] = ..., data[odd] = ...: read N/2, write N (fp16) each -> 3N
#   data.div_(scale), data.add_(mn): read 2N, write 2N each          -> 8N
# 13N bytes for 2N bytes of fp16: 6.5 per fp16 byte. No constant is fitted to a measurement; the
# value, its kind and source are kept in catalog/engine_constants.yaml (flexgen.dequant_traffic).
DEQUANT_TRAFFIC = float(catalog.load("engine_constants")["flexgen"]["dequant_traffic"]["value"])


class Options(Strict):
    """FlexGen's policy; leave out ``percent`` to let the search choose it."""

    percent: tuple[float, float, float, float, float, float] | None = None  # wG wC cG cC aG aC, %
    gpu_batch_size: Annotated[int, Meta(ge=1, le=MAX_BATCH)] | None = None
    num_gpu_batches: Annotated[int, Meta(ge=1, le=10_000)] | None = None
    cpu_attention: bool = False
    compress_weight: bool = False
    compress_cache: bool = False
    overlap: bool = True
    # --pin-weight as the file gives it (UNSET: not given; see ``pin_weight``)
    pin_weight_given: bool | UnsetType = msgspec.field(default=UNSET, name="pin_weight")

    def __post_init__(self) -> None:
        """Check that the shares of each of weights, cache and activations fit in 100%."""
        super().__post_init__()
        v = self.percent
        if v is None:
            return
        if any(not 0 <= x <= 100 for x in v):
            raise FieldError("percent", "each percentage must be from 0 to 100")
        for name, (a, b) in (("weights", v[0:2]), ("cache", v[2:4]), ("activations", v[4:6])):
            if a + b > 100:
                raise FieldError("percent", f"{name}: GPU and CPU shares add up to more than 100%")

    @property
    def pin_weight(self) -> bool:
        """Return the ``pin_weight`` option: True unless the file says false."""
        return self.pin_weight_given is not False


@dataclass(frozen=True)
class Policies:
    """Policies as arrays (one entry per policy): shares in [0, 1], batch sizes, attention side."""

    wg: np.ndarray
    wc: np.ndarray
    cg: np.ndarray
    cc: np.ndarray
    hg: np.ndarray
    hc: np.ndarray
    gbs: np.ndarray
    nb: np.ndarray
    cpu_att: np.ndarray

    @property
    def batch(self) -> np.ndarray:
        """Return the effective batch: GPU batch size x number of GPU batches."""
        return self.gbs * self.nb


@dataclass(frozen=True)
class Costs:
    """Per policy: prefill and decode time (s), bytes per tier, throughput (tokens/s).

    ``gpu_bytes`` is the GPU's peak as FlexGen's runtime allocates; ``lp_gpu_bytes`` is the peak
    FlexGen's cost model writes into its LP, which its policy search keeps within ``ALPHA_G``.
    """

    prefill: np.ndarray
    step: np.ndarray
    streams: dict[str, np.ndarray]
    gpu_bytes: np.ndarray
    cpu_bytes: np.ndarray
    disk_bytes: np.ndarray
    throughput: np.ndarray
    lp_gpu_bytes: np.ndarray


def pin_weight(sc: Scenario) -> bool:
    """Return FlexGen's --pin-weight: the option where given, else the scenario's pinned: (True)."""
    o = sc.options
    return sc.pinned_or(True) if o.pin_weight_given is UNSET else o.pin_weight_given


def given_policy(sc: Scenario) -> Policies:
    """Return the scenario's own policy as a one-element Policies."""
    o = sc.options
    p = [x / 100 for x in o.percent]
    gbs = o.gpu_batch_size or sc.batch
    nb = o.num_gpu_batches or max(sc.batch // gbs, 1)
    one = lambda x: np.array([x], dtype=np.float64)  # noqa: E731
    return Policies(*(one(x) for x in p), one(gbs), one(nb), one(float(o.cpu_attention)))
