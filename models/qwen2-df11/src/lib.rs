//! Qwen2 and DeepSeek-R1-Distill-Qwen on candle with DFloat11 weights that stay compressed on
//! the device.
//!
//! Qwen2 is a Llama-style decoder whose q/k/v projections have biases (kept as plain BF16
//! tensors beside the compressed layers). [`Qwen2Arch`] maps its `config.json` to df11-llm's one
//! decoder, which runs a DF11 folder and, for comparison, the plain BF16 original.

#![warn(missing_docs)]

use df11_candle::ModelWeights;
use df11_llm::{Architecture, ModelConfig, ModelSpec, Result, TextConfig};

/// The Qwen2 architecture (`model_type: qwen2`).
#[derive(Debug, Clone, Copy)]
pub struct Qwen2Arch;

impl Architecture for Qwen2Arch {
    const NAME: &'static str = "Qwen2";
    const MODEL_TYPES: &'static [&'static str] = &["qwen2"];
    const DEFAULT_REPO: &'static str = "DFloat11/DeepSeek-R1-Distill-Qwen-14B-DF11";

    fn spec(config: &ModelConfig, _: &ModelWeights) -> Result<ModelSpec> {
        let (_, mut spec) = TextConfig::spec_of(config, 32_768, 1e-6)?;
        // q/k/v with biases, o_proj and the MLP without (Qwen2 has no bias switches).
        let d = &mut spec.decoder;
        (d.qkv_bias, d.o_bias, d.mlp_bias) = (true, false, false);
        Ok(spec)
    }
}
