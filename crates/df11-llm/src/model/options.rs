//! How a [`super::DecoderModel`] runs: the maximum context, the CUDA graph, decode-ahead, the
//! prompt's attention ([`DecodeOptions`], [`PromptAttention`]).

/// The context a model gets when none is asked for (capped by the model's own maximum).
pub const DEFAULT_MAX_CONTEXT: usize = 4096;

/// How decode steps run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Positions each sequence may reach (the KV cache's size); `None`: the model's maximum,
    /// capped at [`DEFAULT_MAX_CONTEXT`].
    pub max_context: Option<usize>,
    /// Capture decode steps as CUDA graphs (CUDA, BF16). Off with `DF11_CUDA_GRAPH=0`.
    pub cuda_graph: bool,
    /// Run decode steps through the step kernels (CUDA, BF16); off, they run the eager pass.
    /// Off with `DF11_STEP_KERNELS=0`.
    pub step_kernels: bool,
    /// How prompts' attention runs where the step kernels run (CUDA, BF16); elsewhere, and for
    /// head sizes the kernel does not take, candle's matmul attention. Default
    /// [`PromptAttention::Flash`]; `DF11_PROMPT_ATTENTION=matmul|flash-decoding|flash` (or
    /// `DF11_FLASH_PREFILL=1`: flash-decoding) sets it.
    pub prompt_attention: PromptAttention,
    /// Prompts whose products take decode + cuBLAS (more rows than the fused kernels take)
    /// decode each layer's units on a second stream of its GPU while the previous layer runs
    /// (`Df11Group::decode_ahead`), instead of each weight just before its product. The same
    /// values and products, so the same logits; one layer of BF16 weights more in memory
    /// during prompts. Off by default (the extra buffer takes DF11's peak at batch 1 from 0.72x
    /// to 0.75x of BF16's); on with `DF11_DECODE_AHEAD=1`. Measured on an H100 (8B-shaped
    /// model, docs/PERFORMANCE.md): prefill +10% at 512 tokens, +6% at 2048.
    pub decode_ahead: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        let on = |var: &str| std::env::var(var).map_or(true, |v| v != "0");
        Self {
            max_context: None,
            cuda_graph: on("DF11_CUDA_GRAPH"),
            step_kernels: on("DF11_STEP_KERNELS"),
            prompt_attention: PromptAttention::from_env(),
            decode_ahead: std::env::var("DF11_DECODE_AHEAD").is_ok_and(|v| v == "1"),
        }
    }
}

/// How a prompt's attention runs on CUDA in BF16 (see [`DecodeOptions::prompt_attention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptAttention {
    /// candle's ops: scores by cuBLAS, an additive mask, softmax in f32, values by cuBLAS
    /// (what the CPU runs; the reference the others are tested against).
    Matmul,
    /// The decode step's flash-decoding kernel, one query per prompt token over the cache. It
    /// reads each query's prefix once per query, so long prompts are slow; with
    /// `DF11_MATMUL=fused` no cuBLAS product runs anywhere in the forward pass, which is how
    /// compute-sanitizer's initcheck (blind to cuBLAS's writes on Hopper) checks every kernel
    /// of a model (docs/RELIABILITY.md).
    FlashDecoding,
    /// The causal flash-attention kernel over the cache (`df11_candle::ops::prefill_attention`:
    /// tensor cores, online softmax, the query heads of a kv head sharing its tiles), with q/k
    /// norm + RoPE + cache write in one launch before it.
    Flash,
}

impl PromptAttention {
    /// `DF11_PROMPT_ATTENTION` (`matmul`, `flash-decoding`, `flash`), else `flash-decoding` when
    /// `DF11_FLASH_PREFILL=1`, else [`PromptAttention::Flash`].
    pub fn from_env() -> Self {
        match std::env::var("DF11_PROMPT_ATTENTION").as_deref() {
            Ok("matmul") => Self::Matmul,
            Ok("flash-decoding") => Self::FlashDecoding,
            Ok("flash") => Self::Flash,
            _ if std::env::var("DF11_FLASH_PREFILL").is_ok_and(|v| v == "1") => Self::FlashDecoding,
            _ => Self::Flash,
        }
    }
}
