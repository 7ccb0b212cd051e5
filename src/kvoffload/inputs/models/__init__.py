"""Model architectures: HF config.json import, parameter tensors, weight bytes per precision."""

from kvoffload.inputs.models.architecture import (
    Architecture,
    GatedDeltaNet,
    Mamba,
    Mla,
    Moe,
    Tensor,
)
from kvoffload.inputs.models.config import from_hf_config
from kvoffload.inputs.models.loading import load_model, model_ids
from kvoffload.inputs.models.model import Model, WeightBytes
from kvoffload.inputs.models.tensor_bytes import _gguf_type

__all__ = [
    "Architecture",
    "GatedDeltaNet",
    "Mamba",
    "Mla",
    "Model",
    "Moe",
    "Tensor",
    "WeightBytes",
    "_gguf_type",
    "from_hf_config",
    "load_model",
    "model_ids",
]
