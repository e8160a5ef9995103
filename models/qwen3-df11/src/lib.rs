//! Qwen3 on candle with DFloat11 weights that stay compressed on the device.
//!
//! Qwen3 (dense) is a Llama-style decoder with per-head RMSNorm of queries and keys before RoPE.
//! [`Qwen3Arch`] maps its `config.json` to df11-llm's one decoder, which runs a DF11 folder
//! (untied: Qwen3-8B/14B/32B, or tied: Qwen3-4B) and, for comparison, the plain BF16 original.

#![warn(missing_docs)]

use df11_candle::ModelWeights;
use df11_llm::{Architecture, ModelConfig, ModelSpec, Result, TextConfig};

/// The Qwen3 architecture (dense models, `model_type: qwen3`).
#[derive(Debug, Clone, Copy)]
pub struct Qwen3Arch;

impl Architecture for Qwen3Arch {
    const NAME: &'static str = "Qwen3";
    const MODEL_TYPES: &'static [&'static str] = &["qwen3"];
    const DEFAULT_REPO: &'static str = "DFloat11/Qwen3-8B-DF11";

    fn spec(config: &ModelConfig, _: &ModelWeights) -> Result<ModelSpec> {
        let (_, mut spec) = TextConfig::spec_of(config, 40_960, 1e-6)?;
        spec.decoder.qk_norm = true;
        Ok(spec)
    }
}
