"""Experts and recurrent mixers from a config: MoE, gated DeltaNet, Mamba-1 and Mamba-2."""

from __future__ import annotations

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.models.architecture import GatedDeltaNet, Mamba, Moe
from kvoffload.inputs.models.config_values import _bool, _int, _int_list


def _moe(cfg: dict, mt: str, n_layers: int) -> tuple[Moe | None, tuple[bool, ...]]:
    n = _int(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=None, minimum=0)
    if not n:  # absent, or 0 (GraniteMoeHybrid's dense models)
        return None, ()
    k = _int(cfg, "num_experts_per_tok", "experts_per_token", "num_experts_per_token")
    if k > n:
        raise InputError(f"{k} exceeds the {n} experts", field="num_experts_per_tok")
    f = _int(cfg, "moe_intermediate_size", "intermediate_size")
    shared = _int(cfg, "n_shared_experts", default=0, minimum=0)
    shared_f = _int(cfg, "moe_intermediate_size", default=f) if shared else 0
    if cfg.get("shared_expert_intermediate_size"):  # Qwen-MoE: one shared expert of its own width
        shared, shared_f = 1, _int(cfg, "shared_expert_intermediate_size")
    if mt == "llama4_text":  # Llama4TextMoe: shared_expert = Llama4TextMLP(config), width f
        shared, shared_f = 1, f
    if mt == "granitemoehybrid":  # shared_mlp beside block_sparse_moe in every layer
        shared, shared_f = 1, _int(cfg, "shared_intermediate_size", default=1024)
    dense_only = set(_int_list(cfg, "mlp_only_layers", n_layers) or [])
    if mt == "llama4_text":
        moe_at = _int_list(cfg, "moe_layers", n_layers)
        if moe_at is None:  # Llama4TextConfig: range(step - 1, layers, step)
            step = _int(cfg, "interleave_moe_layer_step", default=1)
            moe_at = list(range(step - 1, n_layers, step))
        moe_set = set(moe_at)
        layers = tuple(i in moe_set for i in range(n_layers))
    elif mt == "jamba":  # JambaConfig.layers_num_experts
        period = _int(cfg, "expert_layer_period", default=2)
        offset = _int(cfg, "expert_layer_offset", default=1, minimum=0)
        layers = tuple(i % period == offset for i in range(n_layers))
    elif cfg.get("decoder_sparse_step") is not None:  # Qwen-MoE: (i + 1) % step == 0
        step = _int(cfg, "decoder_sparse_step")
        layers = tuple((i + 1) % step == 0 and i not in dense_only for i in range(n_layers))
    else:  # DeepSeek: first_k_dense_replace dense layers, then every moe_layer_freq-th
        first_dense = _int(cfg, "first_k_dense_replace", default=0, minimum=0)
        freq = _int(cfg, "moe_layer_freq", default=1)
        layers = tuple(
            i >= first_dense and i % freq == 0 and i not in dense_only for i in range(n_layers)
        )
    # e_score_correction_bias, one fp32 value per routed expert: DeepSeek-V3's noaux_tc router
    # and GLM-4.5's Glm4MoeTopkRouter (a buffer stored in the checkpoint)
    router_bias = mt == "glm4_moe" or cfg.get("topk_method") == "noaux_tc"
    return (
        Moe(
            n,
            k,
            f,
            shared,
            shared_f,
            expert_bias=(mt == "gpt_oss"),
            shared_expert_gate=bool(cfg.get("shared_expert_intermediate_size")),
            router_bias=router_bias,
        ),
        layers,
    )


def _deltanet(cfg: dict, kinds: tuple[str, ...]) -> GatedDeltaNet | None:
    if "linear_attention" not in kinds:
        return None
    d = GatedDeltaNet(
        num_k_heads=_int(cfg, "linear_num_key_heads"),
        num_v_heads=_int(cfg, "linear_num_value_heads"),
        head_k_dim=_int(cfg, "linear_key_head_dim"),
        head_v_dim=_int(cfg, "linear_value_head_dim"),
        conv_kernel=_int(cfg, "linear_conv_kernel_dim"),
    )
    if d.num_v_heads % d.num_k_heads:
        raise InputError(
            f"{d.num_v_heads} value heads is not a multiple of {d.num_k_heads} key heads",
            field="linear_num_value_heads",
        )
    return d


def _mamba(
    cfg: dict, mt: str, hidden: int, kinds: tuple[str, ...], parallel: bool = False
) -> Mamba | None:
    """Mamba-1 for Jamba (JambaConfig), Mamba-2 for the mamba_n_heads configs (Bamba,
    GraniteMoeHybrid, Falcon-H1) and Nemotron-H's; defaults are those config classes' own."""
    if "mamba" not in kinds and not parallel:
        return None
    if mt == "nemotron_h":
        return _nemotron_h_mamba(cfg)
    if mt == "falcon_h1":
        return _falcon_h1_mamba(cfg, hidden)
    expand = _int(cfg, "mamba_expand", default=2)
    d_inner = expand * hidden
    conv = _int(cfg, "mamba_d_conv", default=4)
    conv_bias = _bool(cfg, "mamba_conv_bias", True)
    proj_bias = _bool(cfg, "mamba_proj_bias", False)
    if mt == "jamba":
        rank = cfg.get("mamba_dt_rank", "auto")
        dt_rank = -(-hidden // 16) if rank == "auto" else _int(cfg, "mamba_dt_rank")
        return Mamba(
            1,
            d_inner,
            _int(cfg, "mamba_d_state", default=16),
            conv,
            dt_rank=dt_rank,
            conv_bias=conv_bias,
            proj_bias=proj_bias,
        )
    n_heads = _int(cfg, "mamba_n_heads")
    head = cfg.get("mamba_d_head", "auto")
    head_dim = d_inner // n_heads if head == "auto" else _int(cfg, "mamba_d_head")
    if n_heads * head_dim != d_inner:
        raise InputError(
            f"{n_heads} heads x {head_dim} is not mamba_expand x hidden_size = {d_inner}",
            field="mamba_d_head",
        )
    return Mamba(
        2,
        d_inner,
        _int(cfg, "mamba_d_state"),
        conv,
        n_heads=n_heads,
        head_dim=head_dim,
        n_groups=_int(cfg, "mamba_n_groups", default=1),
        conv_bias=conv_bias,
        proj_bias=proj_bias,
    )


def _nemotron_h_mamba(cfg: dict) -> Mamba:
    """NemotronHMamba2Mixer: d_inner = mamba_num_heads x mamba_head_dim, state ssm_state_size,
    n_groups groups, conv_kernel taps; use_bias on in_proj and out_proj (transformers
    modeling_nemotron_h.py @ 008d9e95; vLLM's MambaMixer2 call in nemotron_h.py @ 8744bb09).
    Defaults are NemotronHConfig's (configuration_nemotron_h.py @ 13923c63), which also reads
    the older names mamba_n_groups, mamba_d_conv and mamba_conv_bias."""
    n_heads = _int(cfg, "mamba_num_heads", default=128)
    head_dim = _int(cfg, "mamba_head_dim", default=64)
    return Mamba(
        2,
        n_heads * head_dim,
        _int(cfg, "ssm_state_size", default=128),
        _int(cfg, "conv_kernel", "mamba_d_conv", default=4),
        n_heads=n_heads,
        head_dim=head_dim,
        n_groups=_int(cfg, "n_groups", "mamba_n_groups", default=8),
        conv_bias=_bool(cfg, "use_conv_bias", _bool(cfg, "mamba_conv_bias", True)),
        proj_bias=_bool(cfg, "use_bias", False),
    )


def _falcon_h1_mamba(cfg: dict, hidden: int) -> Mamba:
    """FalconH1Mixer (modeling_falcon_h1.py @ 001f85b3): d_inner is mamba_d_ssm (else
    mamba_expand x hidden_size), the gated RMSNorm only with mamba_rms_norm, in_proj's bias
    mamba_proj_bias and out_proj's projectors_bias; defaults are FalconH1Config's
    (configuration_falcon_h1.py @ 020a37d2)."""
    if cfg.get("mamba_d_ssm") is not None:
        d_inner = _int(cfg, "mamba_d_ssm")
    else:
        d_inner = _int(cfg, "mamba_expand", default=2) * hidden
    n_heads = _int(cfg, "mamba_n_heads", default=128)
    head = cfg.get("mamba_d_head", "auto")
    head_dim = d_inner // n_heads if head in ("auto", None) else _int(cfg, "mamba_d_head")
    if n_heads * head_dim != d_inner:
        raise InputError(
            f"{n_heads} heads x {head_dim} is not mamba_d_ssm = {d_inner}", field="mamba_d_head"
        )
    return Mamba(
        2,
        d_inner,
        _int(cfg, "mamba_d_state", default=256),
        _int(cfg, "mamba_d_conv", default=4),
        n_heads=n_heads,
        head_dim=head_dim,
        n_groups=_int(cfg, "mamba_n_groups", default=1),
        conv_bias=_bool(cfg, "mamba_conv_bias", True),
        proj_bias=_bool(cfg, "mamba_proj_bias", False),
        out_bias=_bool(cfg, "projectors_bias", False),
        gated_norm=_bool(cfg, "mamba_rms_norm", False),
    )
