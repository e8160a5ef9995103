//! The models' step kernels on CUDA (`kernels/llm_ops.cu`, `decode_step.cu`,
//! `prefill_attention.cu`, compiled by this crate's build script), launched through
//! df11-candle's kernel runtime (`df11_candle::cuda::{launch, module, pdl}`):
//! - [`llm_ops`]: RMSNorm, scaled softmax, the gated MLP's activation, the greedy argmax;
//! - [`decode_step`]: q/k norm + RoPE + KV-cache write, flash-decoding attention over the cache,
//!   the residual add fused with the next RMSNorm;
//! - [`prefill_attention`]: a prompt's causal flash attention over the cache.
//!
//! Every op takes `pdl`: whether it may be a programmatic dependent launch
//! ([`df11_candle::Df11Options::pdl`]); the result is the same bits either way.

pub mod decode_step;
pub mod llm_ops;
pub mod prefill_attention;

pub use decode_step::*;
pub use llm_ops::*;
pub use prefill_attention::*;
