//! The FLUX transformer (diffusers' `FluxTransformer2DModel`), its weights from a DF11 folder
//! (kept compressed on the device) or a plain BF16 one through [`ModelWeights`]: a DF11 model
//! and its BF16 original loaded with the same options give the same bits.

use candle_core::{DType, Module, Tensor};
use df11_candle::{Linear, ModelWeights};

use crate::blocks::{layer_norm, DoubleBlock, SingleBlock};
use crate::config::FluxConfig;
use crate::embed::{rope_tables, silu, TimeTextEmbed};
use crate::error::{FluxError, Result};

/// The transformer: token embeddings, the conditioning vector, the blocks and the output.
#[derive(Debug, Clone)]
pub struct FluxTransformer {
    config: FluxConfig,
    x_embedder: Linear,
    context_embedder: Linear,
    time_text: TimeTextEmbed,
    double: Vec<DoubleBlock>,
    single: Vec<SingleBlock>,
    /// `norm_out.linear`: the output's scale and shift from the conditioning vector.
    norm_out: Linear,
    proj_out: Linear,
    dtype: DType,
}

/// What one call of the transformer takes (diffusers' argument names).
#[derive(Debug, Clone, Copy)]
pub struct FluxInputs<'a> {
    /// Packed latent tokens `[B, N, in_channels]`.
    pub hidden_states: &'a Tensor,
    /// T5's text states `[B, T, joint_attention_dim]`.
    pub encoder_hidden_states: &'a Tensor,
    /// CLIP's pooled vector `[B, pooled_projection_dim]`.
    pub pooled_projections: &'a Tensor,
    /// The step's time in [0, 1] `[B]` (multiplied by 1000 here, in the compute dtype).
    pub timestep: &'a Tensor,
    /// Guidance scale `[B]` for models with a guidance embedding (multiplied by 1000 here).
    pub guidance: Option<&'a Tensor>,
    /// Positions of the image tokens `[N, axes]`.
    pub img_ids: &'a Tensor,
    /// Positions of the text tokens `[T, axes]`.
    pub txt_ids: &'a Tensor,
}

/// Refuses a config whose block counts are not the weights': `num_layers` double blocks
/// (`transformer_blocks.N`) and `num_single_layers` single ones (`single_transformer_blocks.N`),
/// numbered from 0 without gaps.
fn check_block_counts(config: &FluxConfig, weights: &ModelWeights) -> Result<()> {
    let names = weights.names();
    for (prefix, field, count) in [
        ("transformer_blocks", "num_layers", config.num_layers),
        (
            "single_transformer_blocks",
            "num_single_layers",
            config.num_single_layers,
        ),
    ] {
        let mut present: Vec<usize> = names
            .iter()
            .filter_map(|n| {
                n.strip_prefix(prefix)?
                    .strip_prefix('.')?
                    .split('.')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        present.sort_unstable();
        present.dedup();
        let mismatch = |what: String| {
            Err(FluxError::Mismatch {
                dir: weights.dir().to_path_buf(),
                reason: format!("config {field} = {count}, but the weights {what}"),
            })
        };
        if let Some(&extra) = present.iter().find(|&&i| i >= count) {
            return mismatch(format!("hold `{prefix}.{extra}`"));
        }
        if let Some(gap) = (0..count).find(|i| present.binary_search(i).is_err()) {
            return mismatch(format!("have no `{prefix}.{gap}`"));
        }
    }
    Ok(())
}

impl FluxTransformer {
    /// Loads the transformer of `config` from `weights` (diffusers' names).
    pub fn load(config: &FluxConfig, weights: &ModelWeights) -> Result<Self> {
        check_block_counts(config, weights)?;
        let (heads, head_dim) = (config.num_attention_heads, config.attention_head_dim);
        let dim = config.inner_dim();
        let double = (0..config.num_layers)
            .map(|i| {
                DoubleBlock::load(weights, &format!("transformer_blocks.{i}"), heads, head_dim)
            })
            .collect::<Result<Vec<_>>>()?;
        let single = (0..config.num_single_layers)
            .map(|i| {
                let prefix = format!("single_transformer_blocks.{i}");
                SingleBlock::load(weights, &prefix, heads, head_dim)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            config: config.clone(),
            x_embedder: weights.linear("x_embedder", dim, config.in_channels, true)?,
            context_embedder: weights.linear(
                "context_embedder",
                dim,
                config.joint_attention_dim,
                true,
            )?,
            time_text: TimeTextEmbed::load(
                weights,
                dim,
                config.pooled_projection_dim,
                config.guidance_embeds,
            )?,
            double,
            single,
            norm_out: weights.linear("norm_out.linear", 2 * dim, dim, true)?,
            proj_out: weights.linear("proj_out", config.out_channels(), dim, true)?,
            dtype: weights.dtype(),
        })
    }

    /// The config it was loaded with.
    pub fn config(&self) -> &FluxConfig {
        &self.config
    }

    /// The transformer's prediction for the latent tokens: `[B, N, out_channels]` in the
    /// compute dtype.
    pub fn forward(&self, inputs: &FluxInputs<'_>) -> Result<Tensor> {
        self.check(inputs)?;
        let dtype = self.dtype;
        let device = inputs.hidden_states.device();
        let image = self
            .x_embedder
            .forward(&inputs.hidden_states.to_dtype(dtype)?)?;
        let thousand = |t: &Tensor| -> Result<Tensor> { Ok((t.to_dtype(dtype)? * 1000.0)?) };
        let timestep = thousand(inputs.timestep)?;
        let guidance = inputs.guidance.map(thousand).transpose()?;
        let pooled = inputs.pooled_projections.to_dtype(dtype)?;
        let temb = self
            .time_text
            .forward(&timestep, guidance.as_ref(), &pooled)?;
        let mut text = self
            .context_embedder
            .forward(&inputs.encoder_hidden_states.to_dtype(dtype)?)?;
        let ids = Tensor::cat(
            &[
                inputs.txt_ids.to_dtype(DType::F32)?,
                inputs.img_ids.to_dtype(DType::F32)?,
            ],
            0,
        )?;
        let (cos, sin) = rope_tables(&ids, &self.config.axes_dims_rope, device)?;
        let mut image = image;
        for block in &self.double {
            (image, text) = block.forward(&image, &text, &temb, &cos, &sin)?;
        }
        let text_len = text.dim(1)?;
        let mut joined = Tensor::cat(&[text, image], 1)?;
        for block in &self.single {
            joined = block.forward(&joined, &temb, &cos, &sin)?;
        }
        let image = joined.narrow(1, text_len, joined.dim(1)? - text_len)?;
        // AdaLayerNormContinuous: scale first, then shift.
        let emb = self.norm_out.forward(&silu(&temb)?)?;
        let chunks = emb.chunk(2, 1)?;
        let (scale, shift) = (&chunks[0], &chunks[1]);
        let scale = (scale.unsqueeze(1)? + 1.0)?;
        let out = layer_norm(&image)?
            .broadcast_mul(&scale)?
            .broadcast_add(&shift.unsqueeze(1)?)?;
        Ok(self.proj_out.forward(&out)?)
    }

    /// Refuses inputs of the wrong shapes, naming them.
    fn check(&self, x: &FluxInputs<'_>) -> Result<()> {
        let c = &self.config;
        let bad = |what: &str, dims: &[usize], want: String| {
            Err(FluxError::Input(format!(
                "{what} is {dims:?}, expected {want}"
            )))
        };
        let (b, n, ch) = x.hidden_states.dims3()?;
        if ch != c.in_channels {
            return bad(
                "hidden_states",
                x.hidden_states.dims(),
                format!("[B, N, {}]", c.in_channels),
            );
        }
        let t_dims = x.encoder_hidden_states.dims();
        if t_dims.len() != 3 || t_dims[0] != b || t_dims[2] != c.joint_attention_dim {
            return bad(
                "encoder_hidden_states",
                t_dims,
                format!("[{b}, T, {}]", c.joint_attention_dim),
            );
        }
        if x.pooled_projections.dims() != [b, c.pooled_projection_dim] {
            return bad(
                "pooled_projections",
                x.pooled_projections.dims(),
                format!("[{b}, {}]", c.pooled_projection_dim),
            );
        }
        if x.timestep.dims() != [b] {
            return bad("timestep", x.timestep.dims(), format!("[{b}]"));
        }
        match (c.guidance_embeds, x.guidance) {
            (true, Some(g)) if g.dims() != [b] => {
                return bad("guidance", g.dims(), format!("[{b}]"))
            }
            (true, None) => {
                return Err(FluxError::Input(
                    "this transformer embeds a guidance value (guidance_embeds): give one".into(),
                ))
            }
            _ => {}
        }
        let axes = c.axes_dims_rope.len();
        if x.img_ids.dims() != [n, axes] {
            return bad("img_ids", x.img_ids.dims(), format!("[{n}, {axes}]"));
        }
        if x.txt_ids.dims() != [t_dims[1], axes] {
            return bad(
                "txt_ids",
                x.txt_ids.dims(),
                format!("[{}, {axes}]", t_dims[1]),
            );
        }
        Ok(())
    }
}
