//! The language models' step kernels: RMSNorm, softmax and the gated MLP, the decode step (q/k norm + RoPE + KV write, flash-decoding, add + RMSNorm), a prompt's flash attention.

#[cfg(feature = "cuda")]
pub mod decode_step;
#[cfg(feature = "cuda")]
pub mod llm_ops;
#[cfg(feature = "cuda")]
pub mod prefill_attention;
