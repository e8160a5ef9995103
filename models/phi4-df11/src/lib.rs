//! Phi-4 on candle with DFloat11 weights that stay compressed on the device.
//!
//! Phi-4 (e.g. `DFloat11/Phi-4-reasoning-plus-DF11`) is transformers' `Phi3ForCausalLM`
//! (`model_type: phi3`) with fused `qkv_proj` and `gate_up_proj` matrices and an untied
//! `lm_head`. [`Phi4Arch`] plugs the model into df11-llm's loader, generation loop and CLI; the
//! same model runs a DF11 folder and, for comparison, the plain BF16 original.

#![warn(missing_docs)]

pub mod config;
pub mod model;

pub use config::Phi4Config;
pub use model::Phi4;

use df11_candle::ModelWeights;
use df11_llm::{Architecture, LoadBar, ModelConfig, Result};

/// The Phi-4 architecture (`Phi3ForCausalLM`, `model_type: phi3`, no RoPE scaling).
#[derive(Debug, Clone, Copy)]
pub struct Phi4Arch;

impl Architecture for Phi4Arch {
    type Model = Phi4;
    const NAME: &'static str = "Phi-4";
    const MODEL_TYPES: &'static [&'static str] = &["phi3"];
    const DEFAULT_REPO: &'static str = "DFloat11/Phi-4-reasoning-plus-DF11";

    fn load(config: &ModelConfig, weights: &ModelWeights, progress: &LoadBar) -> Result<Phi4> {
        let cfg = Phi4Config::from_model_config(config)?;
        Phi4::load(&cfg, weights, progress)
    }
}
