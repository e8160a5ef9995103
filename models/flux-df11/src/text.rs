//! The text side of a FLUX pipeline: CLIP-L's pooled vector and T5's states for a prompt, with
//! candle-transformers' models over the base repo's `text_encoder/` and `text_encoder_2/`
//! (BF16, as FLUX.1 ships them) and their tokenizers ([`crate::tokenizer`]), as diffusers'
//! `FluxPipeline` encodes a prompt: both padded to their length (CLIP 77, T5 `max_sequence_length`), no
//! attention mask (the padding is attended).

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{clip, t5};
use tokenizers::Tokenizer;

use crate::error::{read_json, FluxError, Result};
use crate::tokenizer::{clip_tokenizer, padded, special_token, t5_tokenizer};

/// CLIP's token length in FLUX pipelines.
pub const CLIP_LENGTH: usize = 77;

/// Both encoders and their tokenizers.
pub struct TextEncoders {
    clip: clip::text_model::ClipTextTransformer,
    clip_tokenizer: Tokenizer,
    t5: t5::T5EncoderModel,
    t5_tokenizer: Tokenizer,
    device: Device,
}

/// The parsed `config.json` of `dir`, errors naming the file.
fn read_config(dir: &Path) -> Result<(PathBuf, serde_json::Value)> {
    let path = dir.join("config.json");
    let value = read_json(&path)?;
    Ok((path, value))
}

/// A `VarBuilder` over every safetensors file of `dir` (sharded or not).
pub(crate) fn var_builder(
    dir: &Path,
    dtype: DType,
    device: &Device,
) -> Result<VarBuilder<'static>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| FluxError::Config {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(FluxError::Config {
            path: dir.to_path_buf(),
            reason: "no *.safetensors file".into(),
        });
    }
    // SAFETY: the files are mapped read-only; they must not change while the model lives (as
    // for every candle model loaded from safetensors).
    Ok(unsafe { VarBuilder::from_mmaped_safetensors(&files, dtype, device)? })
}

/// candle's CLIP text config from `text_encoder/config.json`.
fn clip_config(dir: &Path) -> Result<clip::text_model::ClipTextConfig> {
    let (path, v) = read_config(dir)?;
    let size = |field: &str| -> Result<usize> {
        v.get(field)
            .and_then(serde_json::Value::as_u64)
            .map(|n| n as usize)
            .filter(|&n| n > 0 && n <= 1 << 20)
            .ok_or_else(|| FluxError::Config {
                path: path.clone(),
                reason: format!("`{field}` is missing or out of range"),
            })
    };
    let activation = match v.get("hidden_act").and_then(serde_json::Value::as_str) {
        Some("quick_gelu") | None => clip::text_model::Activation::QuickGelu,
        Some(other) => {
            return Err(FluxError::Config {
                path,
                reason: format!("hidden_act `{other}`: CLIP text encoders use quick_gelu"),
            })
        }
    };
    Ok(clip::text_model::ClipTextConfig {
        vocab_size: size("vocab_size")?,
        embed_dim: size("hidden_size")?,
        activation,
        intermediate_size: size("intermediate_size")?,
        max_position_embeddings: size("max_position_embeddings")?,
        pad_with: None,
        num_hidden_layers: size("num_hidden_layers")?,
        num_attention_heads: size("num_attention_heads")?,
        projection_dim: size("projection_dim")?,
    })
}

impl TextEncoders {
    /// Both encoders of the pipeline folder `base` on `device` in `dtype`, T5's prompts padded
    /// to `max_sequence_length` tokens (FLUX.1-dev: 512, schnell: 256).
    pub fn load(
        base: &Path,
        device: &Device,
        dtype: DType,
        max_sequence_length: usize,
    ) -> Result<Self> {
        let clip_dir = base.join("text_encoder");
        let clip = clip::text_model::ClipTextTransformer::new(
            var_builder(&clip_dir, dtype, device)?.pp("text_model"),
            &clip_config(&clip_dir)?,
        )?;
        let t5_dir = base.join("text_encoder_2");
        let (path, v) = read_config(&t5_dir)?;
        let t5_config: t5::Config = serde_json::from_value(v).map_err(|e| FluxError::Config {
            path,
            reason: e.to_string(),
        })?;
        let t5 = t5::T5EncoderModel::load(var_builder(&t5_dir, dtype, device)?, &t5_config)?;
        let clip_tok = base.join("tokenizer");
        let t5_tok = base.join("tokenizer_2");
        Ok(Self {
            clip,
            clip_tokenizer: padded(
                clip_tokenizer(&clip_tok)?,
                &clip_tok,
                CLIP_LENGTH,
                &special_token(&clip_tok, "pad_token", "<|endoftext|>"),
            )?,
            t5,
            t5_tokenizer: padded(
                t5_tokenizer(&t5_tok)?,
                &t5_tok,
                max_sequence_length,
                &special_token(&t5_tok, "pad_token", "<pad>"),
            )?,
            device: device.clone(),
        })
    }

    /// The token ids of `prompt` for CLIP and for T5, padded as the pipeline pads them.
    pub fn token_ids(&self, prompt: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        let ids = |t: &Tokenizer| -> Result<Vec<u32>> {
            Ok(t.encode(prompt, true)
                .map_err(|e| FluxError::Input(format!("tokenizing the prompt: {e}")))?
                .get_ids()
                .to_vec())
        };
        Ok((ids(&self.clip_tokenizer)?, ids(&self.t5_tokenizer)?))
    }

    /// T5's states `[1, max_sequence_length, d_model]` and CLIP's pooled vector
    /// `[1, projection]` for `prompt`.
    pub fn encode(&mut self, prompt: &str) -> Result<(Tensor, Tensor)> {
        let (clip_ids, t5_ids) = self.token_ids(prompt)?;
        let clip_ids = Tensor::new(clip_ids.as_slice(), &self.device)?.unsqueeze(0)?;
        let t5_ids = Tensor::new(t5_ids.as_slice(), &self.device)?.unsqueeze(0)?;
        let pooled = self.clip.forward(&clip_ids)?;
        let states = self.t5.forward(&t5_ids)?;
        Ok((states, pooled))
    }
}
