//! The `config.json` of a Phi-3-architecture model (`model_type: phi3`), as Phi-4 ships it.

use serde::Deserialize;

use df11_llm::{LlmError, ModelConfig, Result};

fn default_max_positions() -> usize {
    4096
}

fn default_act() -> String {
    "silu".into()
}

fn default_rotary_factor() -> f64 {
    1.0
}

/// The fields of a Phi-3/Phi-4 config this model uses.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Phi4Config {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// MLP inner size (each half of `gate_up_proj`).
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (the query heads when absent).
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Head size (hidden / heads when absent).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Whether `lm_head` reuses the embedding (not for Phi-4).
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Context length.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// MLP activation (only `silu`).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// The share of each head that is rotated (1.0 for Phi-4).
    #[serde(default = "default_rotary_factor")]
    pub partial_rotary_factor: f64,
    /// Sliding-window attention span (`null` for Phi-4).
    #[serde(default)]
    pub sliding_window: Option<usize>,
    /// RoPE base (top level or in `rope_parameters`).
    #[serde(skip)]
    pub rope_theta: f64,
}

impl Phi4Config {
    /// Parses and checks a model's config. RoPE scaling (`longrope`, Phi-3.5/Phi-4-mini) is
    /// rejected: Phi-4 has none.
    pub fn from_model_config(config: &ModelConfig) -> Result<Self> {
        let mut c: Self = config.parse()?;
        let rope = config.rope()?;
        let bad = |reason: String| LlmError::config(config.path(), reason);
        if let Some(t) = rope.rope_type {
            return Err(bad(format!("RoPE scaling `{t}` is not supported")));
        }
        c.rope_theta = rope.theta;
        if c.hidden_act != "silu" {
            return Err(bad(format!(
                "activation `{}` is not supported",
                c.hidden_act
            )));
        }
        let (heads, kv_heads) = (c.num_attention_heads, c.kv_heads());
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(bad(format!(
                "{heads} attention heads cannot share {kv_heads} key/value heads"
            )));
        }
        if !(c.partial_rotary_factor > 0.0 && c.partial_rotary_factor <= 1.0) {
            return Err(bad(format!(
                "partial_rotary_factor {} is not in (0, 1]",
                c.partial_rotary_factor
            )));
        }
        if c.head_dim() == 0 || !c.rotary_dim().is_multiple_of(2) || c.rotary_dim() == 0 {
            return Err(bad(format!(
                "head_dim {} with partial_rotary_factor {} gives {} rotary features (must be even and non-zero)",
                c.head_dim(),
                c.partial_rotary_factor,
                c.rotary_dim()
            )));
        }
        if c.sliding_window == Some(0) {
            return Err(bad("sliding_window 0".into()));
        }
        Ok(c)
    }

    /// Key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// The head size.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Features of each head that RoPE rotates: `int(head_dim * partial_rotary_factor)`, as
    /// transformers computes it.
    pub fn rotary_dim(&self) -> usize {
        (self.head_dim() as f64 * self.partial_rotary_factor) as usize
    }
}
