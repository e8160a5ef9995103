//! Mistral and Mistral-Nemo on candle with DFloat11 weights that stay compressed on the device.
//!
//! Mistral is a Llama-style decoder without biases, with an optional sliding window (Mistral-7B
//! v0.1) and, in Mistral-Nemo, a head size that is not `hidden / heads`. [`MistralArch`] maps
//! its `config.json` to df11-llm's one decoder, which runs a DF11 folder and, for comparison,
//! the plain BF16 original.

#![warn(missing_docs)]

use df11_candle::ModelWeights;
use df11_llm::{Architecture, ModelConfig, ModelSpec, Result, TextConfig, TextDefaults};

/// The Mistral architecture (`MistralForCausalLM`, `model_type: mistral`).
#[derive(Debug, Clone, Copy)]
pub struct MistralArch;

impl Architecture for MistralArch {
    const NAME: &'static str = "Mistral";
    const MODEL_TYPES: &'static [&'static str] = &["mistral"];
    const DEFAULT_REPO: &'static str = "DFloat11/Mistral-Nemo-Instruct-2407-DF11";

    fn spec(config: &ModelConfig, _: &ModelWeights) -> Result<ModelSpec> {
        let text = TextConfig::read(config)?;
        // Mistral-Nemo: 1,024,000 positions; the rotary tables and KV cache grow only as far as
        // a sequence reaches.
        let defaults = TextDefaults {
            max_positions: 4096 * 32,
            rms_norm_eps: 1e-6,
        };
        let mut spec = text.llama_spec(config, defaults)?;
        spec.decoder.qkv_bias = false;
        spec.decoder.o_bias = false;
        spec.decoder.mlp_bias = false;
        Ok(spec.with_window(text.sliding_window))
    }
}
