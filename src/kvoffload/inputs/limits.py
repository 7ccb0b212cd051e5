"""Plausible maxima for every number an input may give, stated once.

Each bound sits well above the largest published model or deployment, so no real input is
refused, and low enough that the model's int64 and float64 arithmetic cannot wrap or lose the
count for any accepted input: one request's cache is at most ``MAX_CONTEXT_TOKENS x
MAX_KV_BYTES_PER_TOKEN + MAX_STATE_BYTES_PER_REQUEST`` bytes, and a batch of ``MAX_BATCH`` of
them stays below 2**63 (checked at import, below).
"""

from __future__ import annotations

# -- files and names ------------------------------------------------------------------------
MAX_FILE_BYTES = 1 << 20  # a profile, scenario or config.json is a few kB; 1 MiB is 100x that
MAX_PATH_BYTES = 4096  # Linux PATH_MAX: no longer path can be opened anyway
MAX_NAME_BYTES = 255  # Linux NAME_MAX: no longer file name can exist on ext4, xfs or tmpfs
MAX_ID_CHARS = 128  # catalog ids are under 40; Hugging Face repo names stop at 96 characters
MAX_DEPTH = 32  # nesting of a YAML or JSON input; real files nest 4 levels deep
MAX_INT_DIGITS = 30  # digits of any integer a file gives; 10**30 exceeds every bound here
# a GGUF file's header (metadata and tensor infos; not its weights): a 262k-token vocabulary with
# its merges and scores is about 15 MB; 256 MiB is 17x that
MAX_GGUF_HEADER_BYTES = 1 << 28
MAX_GGUF_STRING_BYTES = 1 << 20  # one metadata string (chat templates are tens of kB)
MAX_GGUF_TENSORS = 1 << 20  # DeepSeek-V3 has 1,025 tensors (experts merged per layer)
MAX_GGUF_SPLITS = 1024  # gguf-split parts of one model; published ones have under 100

# -- model shape ----------------------------------------------------------------------------
MAX_LAYERS = 1024  # deepest published decoders have under 200 layers (Llama 3.1 405B: 126)
MAX_HIDDEN = 1 << 16  # widest published residual stream is 18,432 (PaLM 540B); 65,536 is 3.5x
MAX_INTERMEDIATE = 1 << 20  # widest published FFN is 73,728 (PaLM); 1,048,576 is 14x
MAX_HEADS = 1024  # most query heads published is 128 (Llama 3.1 405B, DeepSeek-V3)
MAX_HEAD_DIM = 4096  # widest cached vector published is 576 (DeepSeek MLA latent + rope)
MAX_EXPERTS = 4096  # most routed experts published is 2,048 (Switch-C); DeepSeek-V3 has 256
MAX_VOCAB = 1 << 22  # largest published vocabulary is 262,144 (Gemma 3); 4,194,304 is 16x
MAX_STATE_DIM = 1 << 16  # Mamba d_state / conv taps / expand: published values are <= 256
MAX_PARAMS = 1 << 50  # 1.1e15 parameters: 500x the largest published model (about 2e12)
# all layers' K and V for one token at 4 bytes a value: OPT-175B / BLOOM at fp32 is 9.4 MB
MAX_KV_BYTES_PER_TOKEN = 1 << 24
# one request's recurrent state (Mamba, gated DeltaNet), all layers, fp32: published ones are MBs
MAX_STATE_BYTES_PER_REQUEST = 1 << 36

# -- workload -------------------------------------------------------------------------------
MAX_CONTEXT_TOKENS = 1 << 25  # 33,554,432: 3x the longest published context (Llama 4 Scout, 10M)
MAX_BATCH = 1 << 13  # 8,192 requests: 8x the 1,024 sequences vLLM schedules at most by default
MAX_GENERATE_TOKENS = MAX_CONTEXT_TOKENS  # tokens generated count towards the context

# -- prefix-cache traffic -------------------------------------------------------------------
MAX_SESSIONS = 1 << 24  # 16.8M sessions sharing one cache: 100x a large chatbot fleet's replica
MAX_TURN_GAP_S = 366 * 86_400  # a year between two turns of one conversation
MAX_ARRIVAL_RATE = 1e6  # requests a second on one machine: 1,000x what one H100 prefills

_INT64_MAX = (1 << 63) - 1
assert (  # the bounds above keep a batch's cache inside int64
    MAX_BATCH * (MAX_CONTEXT_TOKENS * MAX_KV_BYTES_PER_TOKEN + MAX_STATE_BYTES_PER_REQUEST)
    <= _INT64_MAX
)


def bound_problem(value: int, maximum: int, what: str = "") -> str | None:
    """Return why ``value`` exceeds ``maximum`` (``what``: its unit, e.g. 'tokens'), or None."""
    if value <= maximum:
        return None
    shown = f"{value:,}" if value < 10**MAX_INT_DIGITS else f"a {len(str(value))}-digit number"
    unit = f" {what}" if what else ""
    return f"{shown} is more than {maximum:,}{unit}, the plausible maximum"
