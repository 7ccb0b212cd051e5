"""The weight tensors of each layer kind: attention, gated DeltaNet, Mamba, MLP and MoE."""

from __future__ import annotations

from kvoffload.inputs.models.architecture import Architecture, Tensor


def _tensors(m: Architecture) -> tuple[Tensor, ...]:
    h = m.hidden
    out: list[Tensor] = []
    emb_dim = m.embed_proj_dim or h
    out.append(Tensor("embed", None, m.vocab, emb_dim))
    if m.learned_positions:
        out.append(Tensor("pos", None, m.learned_positions, h))
    if m.embed_proj_dim and m.embed_proj_dim != h:
        out.append(Tensor("proj", None, h, m.embed_proj_dim))
        out.append(Tensor("proj", None, m.embed_proj_dim, h))
    if m.model_type == "bloom":  # word_embeddings_layernorm
        out.append(Tensor("norm_embed", None, 1, 2 * h, vector=True))
    kinds = m.kinds
    for i in range(m.n_layers):
        if kinds[i] == "linear_attention":
            out.extend(_deltanet_tensors(m, i))
        elif kinds[i] == "mamba":
            out.extend(_mamba_tensors(m, i))
        elif kinds[i] == "attention":
            out.extend(_attention_tensors(m, i))
            if m.parallel_mamba:  # Falcon-H1: a Mamba-2 mixer beside the attention
                out.extend(_mamba_tensors(m, i))
        if m.has_mlp(i):  # an 'mlp' block is only this
            out.extend(_mlp_tensors(m, i))
        norms = m.norms_per_layer * (2 if m.norm_bias else 1)  # a LayerNorm has a bias too
        out.append(Tensor("norm", i, 1, h, count=norms, vector=True))
    out.append(Tensor("norm_final", None, 1, h * (2 if m.norm_bias else 1), vector=True))
    if not m.tie_embeddings:
        out.append(Tensor("output", None, m.vocab, emb_dim))
    return tuple(out)


def _attention_tensors(m: Architecture, i: int) -> list[Tensor]:
    h, nh = m.hidden, m.n_heads
    if m.mla:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        t = []
        if a.q_lora_rank:
            t += [
                Tensor("attn_q_a", i, a.q_lora_rank, h),
                Tensor("norm", i, 1, a.q_lora_rank, vector=True),
                Tensor("attn_q_b", i, nh * qk, a.q_lora_rank),
            ]
        else:
            t.append(Tensor("attn_q", i, nh * qk, h))
        t += [
            Tensor("attn_kv_a", i, a.kv_lora_rank + a.qk_rope_head_dim, h),
            Tensor("norm", i, 1, a.kv_lora_rank, vector=True),
            Tensor("attn_kv_b", i, nh * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank),
            Tensor("attn_o", i, h, nh * a.v_head_dim),
        ]
        return t
    q, kv, v = nh * m.head_dim, m.n_kv_heads * m.head_dim, m.n_kv_heads * m.v_head_dim
    gate = q if m.attn_output_gate else 0  # Qwen3-Next: q_proj is 2 x heads x head_dim wide
    t = [
        Tensor("attn_q", i, q + gate, h),
        Tensor("attn_k", i, kv, h),
        Tensor("attn_v", i, v, h),
        Tensor("attn_o", i, h, nh * m.v_head_dim),
    ]
    if m.attention_bias:
        t.append(Tensor("bias", i, 1, q + gate + kv + v, vector=True))
    if m.o_bias:
        t.append(Tensor("bias", i, 1, h, vector=True))
    if m.qk_norm:
        t.append(Tensor("norm", i, 1, 2 * m.head_dim, vector=True))
    if m.attention_sinks:
        t.append(Tensor("sinks", i, 1, nh, vector=True))
    return t


def _deltanet_tensors(m: Architecture, i: int) -> list[Tensor]:
    """Gated DeltaNet: transformers' Qwen3NextGatedDeltaNet (modeling_qwen3_next.py @ 01cdc608)."""
    d = m.deltanet
    assert d is not None
    h = m.hidden
    return [
        # in_proj_qkvz: q, k (key_dim each), v and the output gate z (value_dim each); no bias
        Tensor("ssm_in", i, 2 * d.key_dim + 2 * d.value_dim, h),
        Tensor("ssm_ba", i, 2 * d.num_v_heads, h),  # in_proj_ba: beta and the decay input a
        Tensor("ssm_conv1d", i, d.conv_dim, d.conv_kernel, vector=True),  # depthwise, no bias
        Tensor("ssm_a", i, 1, 2 * d.num_v_heads, vector=True),  # dt_bias and A_log
        Tensor("norm", i, 1, d.head_v_dim, vector=True),  # gated RMSNorm over each value head
        Tensor("ssm_out", i, h, d.value_dim),  # out_proj, no bias
    ]


def _mamba_tensors(m: Architecture, i: int) -> list[Tensor]:
    """Mamba-1 as transformers' JambaMambaMixer (modeling_jamba.py @ 97bb61d0), Mamba-2 as
    GraniteMoeHybridMambaLayer (modeling_granitemoehybrid.py @ 1c0ff25f), NemotronHMamba2Mixer
    (modeling_nemotron_h.py @ 008d9e95) and FalconH1Mixer (modeling_falcon_h1.py @ 001f85b3:
    d_inner is mamba_d_ssm, the gated norm only with mamba_rms_norm, out_proj's bias
    projectors_bias)."""
    s = m.mamba
    assert s is not None
    h, di = m.hidden, s.d_inner
    out_bias = s.proj_bias if s.out_bias is None else s.out_bias
    # Mamba-1: x and the gate; Mamba-2: the gate, x|B|C (the conv's input) and dt
    in_rows = 2 * di if s.version == 1 else di + s.conv_dim + s.n_heads
    t = [Tensor("ssm_in", i, in_rows, h)]
    t.append(Tensor("ssm_conv1d", i, s.conv_dim, s.d_conv, vector=True))
    if s.version == 1:
        t += [
            Tensor("ssm_x", i, s.dt_rank + 2 * s.d_state, di),  # x_proj: dt, B, C; no bias
            Tensor("ssm_dt", i, di, s.dt_rank),  # dt_proj
            Tensor("ssm_a", i, di, s.d_state, vector=True),  # A_log
            # dt_proj bias, D, and Jamba's RMSNorms over dt, B and C
            Tensor("ssm_d", i, 1, 2 * di + s.dt_rank + 2 * s.d_state, vector=True),
        ]
    else:
        # dt_bias, A_log, D (one per head) and the gated RMSNorm over d_inner
        norm = di if s.gated_norm else 0
        t.append(Tensor("ssm_d", i, 1, 3 * s.n_heads + norm, vector=True))
    t.append(Tensor("ssm_out", i, h, di))
    if s.conv_bias:
        t.append(Tensor("bias", i, 1, s.conv_dim, vector=True))
    biases = in_rows * s.proj_bias + h * out_bias
    if biases:
        t.append(Tensor("bias", i, 1, biases, vector=True))
    return t


def _mlp_tensors(m: Architecture, i: int) -> list[Tensor]:
    h = m.hidden
    if m.moe and m.moe_layers[i]:
        e = m.moe
        n, f = e.n_experts, e.expert_intermediate
        t = [
            Tensor("router", i, n, h),
            Tensor("exp_gate", i, f, h, count=n),
            Tensor("exp_up", i, f, h, count=n),
            Tensor("exp_down", i, h, f, count=n),
        ]
        if e.expert_bias:  # gpt-oss: gate_up and down biases per expert, and the router's
            t += [
                Tensor("bias", i, 1, 2 * f + h, count=n, vector=True, expert=True),
                Tensor("bias", i, 1, n, vector=True),
            ]
        if e.router_bias:
            t.append(Tensor("bias", i, 1, n, vector=True))  # e_score_correction_bias
        if e.n_shared_experts:
            fs = e.shared_intermediate * e.n_shared_experts
            t += [
                Tensor("shexp_gate", i, fs, h),
                Tensor("shexp_up", i, fs, h),
                Tensor("shexp_down", i, h, fs),
            ]
            if e.shared_expert_gate:
                t.append(Tensor("shexp_gate_inp", i, 1, h, vector=True))
        return t
    f = m.intermediate
    if m.mlp == "gated":
        t = [Tensor("ffn_gate", i, f, h), Tensor("ffn_up", i, f, h), Tensor("ffn_down", i, h, f)]
    else:
        t = [Tensor("ffn_up", i, f, h), Tensor("ffn_down", i, h, f)]
    if m.mlp_bias:
        t.append(Tensor("bias", i, 1, f * (2 if m.mlp == "gated" else 1) + h, vector=True))
    return t
