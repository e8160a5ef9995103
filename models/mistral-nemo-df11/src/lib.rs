//! Mistral-Nemo on candle with DFloat11 weights that stay compressed on the device.
//!
//! Mistral-Nemo (e.g. `DFloat11/Mistral-Nemo-Instruct-2407-DF11`) is transformers'
//! `MistralForCausalLM` with a head size of 128 that differs from hidden / heads (160) and a
//! 1,024,000-position context. [`MistralArch`] plugs the model into df11-llm's loader,
//! generation loop and CLI; the same model runs a DF11 folder and, for comparison, the plain
//! BF16 original.

#![warn(missing_docs)]

pub mod config;
pub mod model;

pub use config::MistralConfig;
pub use model::Mistral;

use df11_candle::ModelWeights;
use df11_llm::{Architecture, LoadBar, ModelConfig, Result};

/// The Mistral architecture (`MistralForCausalLM`, `model_type: mistral`).
#[derive(Debug, Clone, Copy)]
pub struct MistralArch;

impl Architecture for MistralArch {
    type Model = Mistral;
    const NAME: &'static str = "Mistral";
    const MODEL_TYPES: &'static [&'static str] = &["mistral"];
    const DEFAULT_REPO: &'static str = "DFloat11/Mistral-Nemo-Instruct-2407-DF11";

    fn load(config: &ModelConfig, weights: &ModelWeights, progress: &LoadBar) -> Result<Mistral> {
        let cfg = MistralConfig::from_model_config(config)?;
        Mistral::load(&cfg, weights, progress)
    }
}
