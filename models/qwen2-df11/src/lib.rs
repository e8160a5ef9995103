//! Qwen2 on candle with DFloat11 weights that stay compressed on the device: the architecture of
//! DeepSeek-R1-Distill-Qwen (1.5B/7B/14B/32B) and Qwen2/Qwen2.5.
//!
//! [`Qwen2Arch`] plugs the model into df11-llm's loader, generation loop and CLI; the same model
//! runs a DF11 folder and, for comparison, the plain BF16 original.

#![warn(missing_docs)]

pub mod config;
pub mod model;

pub use config::Qwen2Config;
pub use model::Qwen2;

use df11_candle::ModelWeights;
use df11_llm::{Architecture, LoadBar, ModelConfig, Result};

/// The Qwen2 architecture (`model_type: qwen2`).
#[derive(Debug, Clone, Copy)]
pub struct Qwen2Arch;

impl Architecture for Qwen2Arch {
    type Model = Qwen2;
    const NAME: &'static str = "Qwen2";
    const MODEL_TYPES: &'static [&'static str] = &["qwen2"];
    const DEFAULT_REPO: &'static str = "DFloat11/DeepSeek-R1-Distill-Qwen-14B-DF11";

    fn load(config: &ModelConfig, weights: &ModelWeights, progress: &LoadBar) -> Result<Qwen2> {
        let cfg = Qwen2Config::from_model_config(config)?;
        Qwen2::load(&cfg, weights, progress)
    }
}
