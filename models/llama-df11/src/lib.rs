//! Llama on candle with DFloat11 weights that stay compressed on the device: Llama 3 / 3.1 / 3.2
//! / 3.3 (llama3 RoPE scaling, tied or untied embeddings) and older Llama-architecture models.
//!
//! [`LlamaArch`] plugs the model into df11-llm's loader, generation loop and CLI; the same model
//! runs a DF11 folder and, for comparison, the plain BF16 original.

#![warn(missing_docs)]

pub mod config;
pub mod model;

pub use config::LlamaConfig;
pub use model::Llama;

use df11_candle::ModelWeights;
use df11_llm::{Architecture, LoadBar, ModelConfig, Result};

/// The Llama architecture (`model_type: llama`).
#[derive(Debug, Clone, Copy)]
pub struct LlamaArch;

impl Architecture for LlamaArch {
    type Model = Llama;
    const NAME: &'static str = "Llama";
    const MODEL_TYPES: &'static [&'static str] = &["llama"];
    const DEFAULT_REPO: &'static str = "DFloat11/Llama-3.1-8B-Instruct-DF11";

    fn load(config: &ModelConfig, weights: &ModelWeights, progress: &LoadBar) -> Result<Llama> {
        let cfg = LlamaConfig::from_model_config(config)?;
        Llama::load(&cfg, weights, progress)
    }
}
