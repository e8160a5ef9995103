//! Gemma 3 (text) on candle with DFloat11 weights that stay compressed on the device.
//!
//! [`Gemma3Arch`] plugs the model into df11-llm's loader, generation loop and CLI. It runs the
//! DFloat11 `-it` repos (`Gemma3ForConditionalGeneration` checkpoints: only the language model's
//! layers compressed, the vision tower left aside and never read), text-only
//! `Gemma3ForCausalLM` checkpoints and, for comparison, the plain BF16 originals.

#![warn(missing_docs)]

pub mod config;
pub mod layers;
pub mod model;

pub use config::{Gemma3Config, LayerRope};
pub use model::{Gemma3, WeightLayout, LAYOUTS};

use df11_candle::ModelWeights;
use df11_llm::{Architecture, LoadBar, ModelConfig, Result};

/// The Gemma 3 architecture (`model_type: gemma3` multimodal, or `gemma3_text`).
#[derive(Debug, Clone, Copy)]
pub struct Gemma3Arch;

impl Architecture for Gemma3Arch {
    type Model = Gemma3;
    const NAME: &'static str = "Gemma 3";
    const MODEL_TYPES: &'static [&'static str] = &["gemma3", "gemma3_text"];
    const DEFAULT_REPO: &'static str = "DFloat11/gemma-3-12b-it-DF11";
    const STOP_TOKENS: &'static [&'static str] = &["<end_of_turn>"];

    fn load(config: &ModelConfig, weights: &ModelWeights, progress: &LoadBar) -> Result<Gemma3> {
        let cfg = Gemma3Config::from_model_config(config)?;
        Gemma3::load(&cfg, weights, progress)
    }
}
