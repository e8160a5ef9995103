//! Qwen3 on candle with DFloat11 weights that stay compressed on the device.
//!
//! Qwen3 (dense) is a Llama-style decoder with per-head RMSNorm of queries and keys before RoPE.
//! [`Qwen3Arch`] maps its `config.json` to df11-llm's one decoder, which runs a DF11 folder
//! (untied: Qwen3-8B/14B/32B, or tied: Qwen3-4B) and, for comparison, the plain BF16 original.

#![warn(missing_docs)]

use df11_candle::ModelWeights;
use df11_llm::{Architecture, LlmError, ModelConfig, ModelSpec, Result, TextConfig, TextDefaults};

/// The Qwen3 architecture (dense models, `model_type: qwen3`).
#[derive(Debug, Clone, Copy)]
pub struct Qwen3Arch;

impl Architecture for Qwen3Arch {
    const NAME: &'static str = "Qwen3";
    const MODEL_TYPES: &'static [&'static str] = &["qwen3"];
    const DEFAULT_REPO: &'static str = "DFloat11/Qwen3-8B-DF11";

    fn spec(config: &ModelConfig, _: &ModelWeights) -> Result<ModelSpec> {
        let text = TextConfig::read(config)?;
        if text.use_sliding_window {
            let reason = "sliding-window attention is not supported".to_string();
            return Err(LlmError::config(config.path(), reason));
        }
        let defaults = TextDefaults {
            max_positions: 40_960,
            rms_norm_eps: 1e-6,
        };
        let mut spec = text.llama_spec(config, defaults)?;
        spec.decoder.qk_norm = true;
        Ok(spec)
    }
}
