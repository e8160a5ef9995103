//! Llama on candle with DFloat11 weights that stay compressed on the device: Llama 3 / 3.1 / 3.2
//! / 3.3 (llama3 RoPE scaling, tied or untied embeddings) and older Llama-architecture models.
//!
//! [`LlamaArch`] maps `config.json` (`attention_bias`, `mlp_bias`, `rope_scaling`,
//! `tie_word_embeddings`) to df11-llm's one decoder, which runs a DF11 folder and, for
//! comparison, the plain BF16 original.

#![warn(missing_docs)]

use df11_candle::ModelWeights;
use df11_llm::{Architecture, ModelConfig, ModelSpec, Result, TextConfig};

/// The Llama architecture (`model_type: llama`).
#[derive(Debug, Clone, Copy)]
pub struct LlamaArch;

impl Architecture for LlamaArch {
    const NAME: &'static str = "Llama";
    const MODEL_TYPES: &'static [&'static str] = &["llama"];
    const DEFAULT_REPO: &'static str = "DFloat11/Llama-3.1-8B-Instruct-DF11";

    fn spec(config: &ModelConfig, _: &ModelWeights) -> Result<ModelSpec> {
        Ok(TextConfig::spec_of(config, 2048, 1e-6)?.1)
    }
}
