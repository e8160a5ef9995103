//! The transformer's `config.json` (diffusers' `FluxTransformer2DModel`), checked before any
//! weight is read.

use std::path::Path;

use serde::Deserialize;

use crate::error::{read_json, FluxError, Result};

/// The shape of a FLUX transformer, as diffusers writes it in `transformer/config.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FluxConfig {
    /// Channels of a packed latent token (16 latent channels x 2 x 2 = 64).
    pub in_channels: usize,
    /// Channels of the output token (`None`: `in_channels`).
    #[serde(default)]
    pub out_channels: Option<usize>,
    /// Patch size of the latent tokens (FLUX: 1, the 2x2 packing is the pipeline's).
    #[serde(default = "one")]
    pub patch_size: usize,
    /// Double-stream blocks (`transformer_blocks`; FLUX.1: 19).
    pub num_layers: usize,
    /// Single-stream blocks (`single_transformer_blocks`; FLUX.1: 38).
    pub num_single_layers: usize,
    /// Size of an attention head (FLUX.1: 128).
    pub attention_head_dim: usize,
    /// Attention heads (FLUX.1: 24); the model width is heads x head size.
    pub num_attention_heads: usize,
    /// Width of the T5 text states (FLUX.1: 4096).
    pub joint_attention_dim: usize,
    /// Width of the pooled CLIP vector (FLUX.1: 768).
    pub pooled_projection_dim: usize,
    /// The guidance embedding (FLUX.1-dev and Krea: true; schnell: false).
    #[serde(default)]
    pub guidance_embeds: bool,
    /// RoPE dimensions per position axis (FLUX.1: 16, 56, 56), summing to the head size.
    pub axes_dims_rope: Vec<usize>,
}

fn one() -> usize {
    1
}

/// The largest value a size field may take (FLUX.1's largest is 4096).
const MAX_SIZE: usize = 1 << 16;
/// The most blocks of either kind.
const MAX_BLOCKS: usize = 1024;

impl FluxConfig {
    /// Reads and checks `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let refuse = |reason: String| FluxError::config(path, reason);
        let config: Self = read_json(path)?;
        config.problem().map_or(Ok(config), |p| Err(refuse(p)))
    }

    /// The first value the model cannot take, naming its field.
    pub fn problem(&self) -> Option<String> {
        let sizes = [
            ("in_channels", self.in_channels),
            ("patch_size", self.patch_size),
            ("attention_head_dim", self.attention_head_dim),
            ("num_attention_heads", self.num_attention_heads),
            ("joint_attention_dim", self.joint_attention_dim),
            ("pooled_projection_dim", self.pooled_projection_dim),
        ];
        for (field, v) in sizes {
            if v == 0 || v > MAX_SIZE {
                return Some(format!("{field} = {v}: expected 1 to {MAX_SIZE}"));
            }
        }
        if let Some(v) = self.out_channels.filter(|&v| v == 0 || v > MAX_SIZE) {
            return Some(format!("out_channels = {v}: expected 1 to {MAX_SIZE}"));
        }
        if self.patch_size != 1 {
            return Some(format!(
                "patch_size = {}: FLUX transformers take patch_size 1 (the pipeline packs 2x2)",
                self.patch_size
            ));
        }
        for (field, v) in [
            ("num_layers", self.num_layers),
            ("num_single_layers", self.num_single_layers),
        ] {
            if v > MAX_BLOCKS {
                return Some(format!("{field} = {v}: expected at most {MAX_BLOCKS}"));
            }
        }
        if self.inner_dim() > MAX_SIZE {
            return Some(format!(
                "num_attention_heads x attention_head_dim = {}: expected at most {MAX_SIZE}",
                self.inner_dim()
            ));
        }
        let axes = &self.axes_dims_rope;
        if axes.is_empty()
            || axes.iter().any(|&d| d == 0 || !d.is_multiple_of(2))
            || axes.iter().sum::<usize>() != self.attention_head_dim
        {
            return Some(format!(
                "axes_dims_rope = {axes:?}: expected even sizes summing to attention_head_dim ({})",
                self.attention_head_dim
            ));
        }
        None
    }

    /// The model width: heads x head size.
    pub fn inner_dim(&self) -> usize {
        self.num_attention_heads * self.attention_head_dim
    }

    /// Channels of an output token.
    pub fn out_channels(&self) -> usize {
        self.out_channels.unwrap_or(self.in_channels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> FluxConfig {
        FluxConfig {
            in_channels: 64,
            out_channels: None,
            patch_size: 1,
            num_layers: 2,
            num_single_layers: 2,
            attention_head_dim: 16,
            num_attention_heads: 2,
            joint_attention_dim: 32,
            pooled_projection_dim: 32,
            guidance_embeds: true,
            axes_dims_rope: vec![4, 6, 6],
        }
    }

    #[test]
    fn a_sound_config_passes_and_bad_values_are_named() {
        assert_eq!(tiny().problem(), None);
        let bad = [
            (
                FluxConfig {
                    attention_head_dim: 0,
                    ..tiny()
                },
                "attention_head_dim",
            ),
            (
                FluxConfig {
                    axes_dims_rope: vec![4, 6, 8],
                    ..tiny()
                },
                "axes_dims_rope",
            ),
            (
                FluxConfig {
                    axes_dims_rope: vec![5, 5, 6],
                    ..tiny()
                },
                "axes_dims_rope",
            ),
            (
                FluxConfig {
                    patch_size: 2,
                    ..tiny()
                },
                "patch_size",
            ),
            (
                FluxConfig {
                    num_layers: 1 << 20,
                    ..tiny()
                },
                "num_layers",
            ),
            (
                FluxConfig {
                    num_attention_heads: 1 << 20,
                    ..tiny()
                },
                "num_attention_heads",
            ),
            (
                FluxConfig {
                    out_channels: Some(0),
                    ..tiny()
                },
                "out_channels",
            ),
        ];
        for (config, field) in bad {
            let p = config.problem().expect("refused");
            assert!(p.contains(field), "{p}");
        }
    }
}
