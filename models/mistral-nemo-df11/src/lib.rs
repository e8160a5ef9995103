//! Mistral and Mistral-Nemo on candle with DFloat11 weights that stay compressed on the device.
//!
//! Mistral is a Llama-style decoder without biases, with an optional sliding window (Mistral-7B
//! v0.1) and, in Mistral-Nemo, a head size that is not `hidden / heads`. [`MistralArch`] maps
//! its `config.json` to df11-llm's one decoder, which runs a DF11 folder and, for comparison,
//! the plain BF16 original.

#![warn(missing_docs)]

use df11_candle::ModelWeights;
use df11_llm::{Architecture, ModelConfig, ModelSpec, Result, TextConfig};

/// The Mistral architecture (`MistralForCausalLM`, `model_type: mistral`).
#[derive(Debug, Clone, Copy)]
pub struct MistralArch;

impl Architecture for MistralArch {
    const NAME: &'static str = "Mistral";
    const MODEL_TYPES: &'static [&'static str] = &["mistral"];
    const DEFAULT_REPO: &'static str = "DFloat11/Mistral-Nemo-Instruct-2407-DF11";

    fn spec(config: &ModelConfig, _: &ModelWeights) -> Result<ModelSpec> {
        // Mistral-Nemo: 1,024,000 positions; the rotary tables and KV cache are sized by
        // --max-context, not by this.
        let (text, mut spec) = TextConfig::spec_of(config, 4096 * 32, 1e-6)?;
        let d = &mut spec.decoder;
        (d.qkv_bias, d.o_bias, d.mlp_bias) = (false, false, false);
        Ok(spec.with_window(text.options.sliding_window))
    }
}
