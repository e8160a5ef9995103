//! Qwen2 and DeepSeek-R1-Distill-Qwen on candle with DFloat11 weights that stay compressed on
//! the device.
//!
//! Qwen2 is a Llama-style decoder whose q/k/v projections have biases (kept as plain BF16
//! tensors beside the compressed layers). [`Qwen2Arch`] maps its `config.json` to df11-llm's one
//! decoder, which runs a DF11 folder and, for comparison, the plain BF16 original.

#![warn(missing_docs)]

use df11_candle::ModelWeights;
use df11_llm::{Architecture, LlmError, ModelConfig, ModelSpec, Result, TextConfig, TextDefaults};

/// The Qwen2 architecture (`model_type: qwen2`).
#[derive(Debug, Clone, Copy)]
pub struct Qwen2Arch;

impl Architecture for Qwen2Arch {
    const NAME: &'static str = "Qwen2";
    const MODEL_TYPES: &'static [&'static str] = &["qwen2"];
    const DEFAULT_REPO: &'static str = "DFloat11/DeepSeek-R1-Distill-Qwen-14B-DF11";

    fn spec(config: &ModelConfig, _: &ModelWeights) -> Result<ModelSpec> {
        let text = TextConfig::read(config)?;
        if text.use_sliding_window {
            let reason = "sliding-window attention is not supported".to_string();
            return Err(LlmError::config(config.path(), reason));
        }
        let defaults = TextDefaults {
            max_positions: 32_768,
            rms_norm_eps: 1e-6,
        };
        let mut spec = text.llama_spec(config, defaults)?;
        // q/k/v with biases, o_proj and the MLP without (Qwen2 has no bias switches).
        spec.decoder.qkv_bias = true;
        spec.decoder.o_bias = false;
        spec.decoder.mlp_bias = false;
        Ok(spec)
    }
}
