//! Qwen3 on candle with DFloat11 weights that stay compressed on the device.
//!
//! [`Qwen3Arch`] plugs the model into df11-llm's loader, generation loop and CLI; the same model
//! runs a DF11 folder (untied: Qwen3-8B/14B/32B, or tied: Qwen3-4B) and, for comparison, the
//! plain BF16 original.

#![warn(missing_docs)]

pub mod config;
pub mod model;

pub use config::Qwen3Config;
pub use model::Qwen3;

use df11_candle::ModelWeights;
use df11_llm::{Architecture, LoadBar, ModelConfig, Result};

/// The Qwen3 architecture (dense models, `model_type: qwen3`).
#[derive(Debug, Clone, Copy)]
pub struct Qwen3Arch;

impl Architecture for Qwen3Arch {
    type Model = Qwen3;
    const NAME: &'static str = "Qwen3";
    const MODEL_TYPES: &'static [&'static str] = &["qwen3"];
    const DEFAULT_REPO: &'static str = "DFloat11/Qwen3-8B-DF11";

    fn load(config: &ModelConfig, weights: &ModelWeights, progress: &LoadBar) -> Result<Qwen3> {
        let cfg = Qwen3Config::from_model_config(config)?;
        Qwen3::load(&cfg, weights, progress)
    }
}
