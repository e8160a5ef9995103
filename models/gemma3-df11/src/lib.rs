//! Gemma 3 (text) on candle with DFloat11 weights that stay compressed on the device.
//!
//! [`Gemma3Arch`] maps `config.json` to df11-llm's one decoder ([`config::spec`]) and finds
//! where the checkpoint keeps the language model ([`WeightLayout`]). It runs the DFloat11 `-it`
//! repos (`Gemma3ForConditionalGeneration` checkpoints: only the language model's layers
//! compressed, the vision tower left aside and never read), text-only `Gemma3ForCausalLM`
//! checkpoints and, for comparison, the plain BF16 originals.

#![warn(missing_docs)]

pub mod config;

use df11_candle::{Df11Error, ModelWeights};
use df11_llm::{Architecture, ModelConfig, ModelSpec, Result, WeightNames};

/// Where the language model's weights live in a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeightLayout {
    /// Prefix of `embed_tokens`, `layers.N` and `norm`.
    pub model: &'static str,
    /// The untied output projection's module.
    pub lm_head: &'static str,
}

/// The layouts, in the order they are tried: transformers 4.50–4.51 multimodal
/// (`language_model.model.…`, the DFloat11 `-it` repos), ≥ 4.52 multimodal
/// (`model.language_model.…`), and text-only `Gemma3ForCausalLM` (`model.…`).
pub const LAYOUTS: [WeightLayout; 3] = [
    WeightLayout {
        model: "language_model.model",
        lm_head: "language_model.lm_head",
    },
    WeightLayout {
        model: "model.language_model",
        lm_head: "lm_head",
    },
    WeightLayout {
        model: "model",
        lm_head: "lm_head",
    },
];

impl WeightLayout {
    /// The layout of the checkpoint `weights` reads, found by the embedding table's name.
    pub fn detect(weights: &ModelWeights) -> Result<Self> {
        LAYOUTS
            .into_iter()
            .find(|l| weights.contains(&format!("{}.embed_tokens.weight", l.model)))
            .ok_or_else(|| {
                Df11Error::MissingTensor {
                    path: weights.dir().to_path_buf(),
                    tensor: format!("{}.embed_tokens.weight", LAYOUTS[0].model),
                }
                .into()
            })
    }

    /// The names df11-llm's decoder reads.
    pub fn names(self) -> WeightNames {
        WeightNames {
            model: self.model.into(),
            lm_head: self.lm_head.into(),
        }
    }
}

/// The Gemma 3 architecture (`model_type: gemma3` multimodal, or `gemma3_text`).
#[derive(Debug, Clone, Copy)]
pub struct Gemma3Arch;

impl Architecture for Gemma3Arch {
    const NAME: &'static str = "Gemma 3";
    const MODEL_TYPES: &'static [&'static str] = &["gemma3", "gemma3_text"];
    const DEFAULT_REPO: &'static str = "DFloat11/gemma-3-12b-it-DF11";
    const STOP_TOKENS: &'static [&'static str] = &["<end_of_turn>"];

    fn spec(config: &ModelConfig, weights: &ModelWeights) -> Result<ModelSpec> {
        let layout = WeightLayout::detect(weights)?;
        config::spec(config, layout.names())
    }
}
