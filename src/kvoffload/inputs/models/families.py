"""What each Hugging Face model family implies that its config.json leaves unsaid."""

# Families whose MLP is up -> activation -> down (no gate): OPT, BLOOM, GPT-2 and kin.
# Nemotron-H's MLP blocks are up -> relu^2 -> down (NemotronHMLP).
_PLAIN_MLP = {
    "opt", "bloom", "gpt2", "gpt_neox", "gptj", "falcon", "phi", "gpt_bigcode", "nemotron_h",
}  # fmt: skip
# Families whose config omits the FFN width because the architecture fixes it at 4 x hidden.
_FFN_4X = {"bloom", "gpt2", "gpt_bigcode", "gptj", "falcon"}
# Families whose embeddings are untied when the config says nothing (their config class default).
_UNTIED_DEFAULT = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next",
    "deepseek_v2", "deepseek_v3", "gpt_oss", "glm4_moe", "llama4", "llama4_text", "jamba",
    "bamba", "granitemoehybrid", "nemotron_h", "falcon_h1",
}  # fmt: skip
# layer_types entries: attention over a span of tokens (a per-token KV cache) ...
_ATTENTION_TYPES = {"full_attention", "sliding_attention", "chunked_attention", "attention"}
# ... or a recurrent mixer that keeps a fixed state per request: gated DeltaNet (Qwen3-Next's
# "linear_attention") and Mamba ("mamba", GraniteMoeHybrid's layer_types).
_STATE_TYPES = {"linear_attention", "mamba"}
# ... or no token mixer at all: a block that is only an MLP (Nemotron-H's "-" blocks), which keeps
# neither a per-token cache nor a state.
_MLP_ONLY_TYPES = {"mlp"}
_LAYER_TYPES = _ATTENTION_TYPES | _STATE_TYPES | _MLP_ONLY_TYPES
# Nemotron-H's block names: hybrid_override_pattern characters (vLLM's ALL_DECODER_LAYER_TYPES,
# vllm/model_executor/models/nemotron_h.py @ 8744bb09) and the layers_block_type names of
# transformers' NemotronHConfig (configuration_nemotron_h.py @ 13923c63: "M" is
# "linear_attention", "*" "full_attention"; older files say "mamba" and "attention").
_NEMOTRON_H_BLOCKS = {
    "M": "mamba", "mamba": "mamba", "linear_attention": "mamba",
    "*": "attention", "attention": "attention", "full_attention": "attention",
    "-": "mlp", "mlp": "mlp",
}  # fmt: skip
# Families whose attention_bias puts a bias on q, k and v only, not on o_proj (transformers:
# Qwen2Attention, Glm4MoeAttention's o_proj is nn.Linear(..., bias=False)).
_QKV_BIAS_ONLY = {"qwen2", "glm4_moe"}
