//! What the transformer embeds besides the tokens: the timestep and guidance (sinusoidal
//! features then a two-layer MLP), the pooled CLIP vector, and the rotary tables of the
//! positions (diffusers' `CombinedTimestep[Guidance]TextProjEmbeddings`, `FluxPosEmbed`).

use candle_core::{DType, Device, Module, Tensor};
use df11_candle::{Linear, ModelWeights};

use crate::error::{FluxError, Result};

/// Sinusoidal features of the timestep: 256 channels, as diffusers' `Timesteps(256,
/// flip_sin_to_cos=True, downscale_freq_shift=0)`.
const TIME_CHANNELS: usize = 256;

/// `silu` computed in f32 and rounded once to the input's dtype (as PyTorch does for half types).
pub(crate) fn silu(x: &Tensor) -> Result<Tensor> {
    Ok(candle_nn::ops::silu(&x.to_dtype(DType::F32)?)?.to_dtype(x.dtype())?)
}

/// `[n, 256]` f32 features of `t` (`[n]`, any float dtype; its values are taken as f32): for
/// channel `j < 128`, `f_j = exp(-ln(10000) * j / 128)`, then `[cos(t f), sin(t f)]`, all in f32.
pub fn timestep_features(t: &Tensor) -> Result<Tensor> {
    let half = TIME_CHANNELS / 2;
    let scale = -(10000f64.ln()) as f32;
    let freqs: Vec<f32> = (0..half)
        .map(|j| (scale * j as f32 / half as f32).exp())
        .collect();
    let freqs = Tensor::from_vec(freqs, (1, half), t.device())?;
    let args = t
        .to_dtype(DType::F32)?
        .unsqueeze(1)?
        .broadcast_mul(&freqs)?;
    Ok(Tensor::cat(&[args.cos()?, args.sin()?], 1)?)
}

/// `linear_2(silu(linear_1(x)))`: diffusers' `TimestepEmbedding` and `PixArtAlphaTextProjection`
/// (act `silu`).
#[derive(Debug, Clone)]
pub struct Mlp {
    linear_1: Linear,
    linear_2: Linear,
}

impl Mlp {
    /// `{prefix}.linear_1` (`input` -> `width`) and `{prefix}.linear_2` (`width` -> `width`).
    pub fn load(weights: &ModelWeights, prefix: &str, input: usize, width: usize) -> Result<Self> {
        Ok(Self {
            linear_1: weights.linear(&format!("{prefix}.linear_1"), width, input, true)?,
            linear_2: weights.linear(&format!("{prefix}.linear_2"), width, width, true)?,
        })
    }

    /// The MLP of `x`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = silu(&self.linear_1.forward(x)?)?;
        Ok(self.linear_2.forward(&h)?)
    }
}

/// The conditioning vector of every block: the timestep's embedding (+ the guidance's, where
/// the model has one) + the pooled text's projection.
#[derive(Debug, Clone)]
pub struct TimeTextEmbed {
    timestep: Mlp,
    guidance: Option<Mlp>,
    text: Mlp,
}

impl TimeTextEmbed {
    /// `time_text_embed.{timestep_embedder, guidance_embedder, text_embedder}`.
    pub fn load(
        weights: &ModelWeights,
        width: usize,
        pooled: usize,
        guidance: bool,
    ) -> Result<Self> {
        let p = "time_text_embed";
        Ok(Self {
            timestep: Mlp::load(
                weights,
                &format!("{p}.timestep_embedder"),
                TIME_CHANNELS,
                width,
            )?,
            guidance: guidance
                .then(|| {
                    Mlp::load(
                        weights,
                        &format!("{p}.guidance_embedder"),
                        TIME_CHANNELS,
                        width,
                    )
                })
                .transpose()?,
            text: Mlp::load(weights, &format!("{p}.text_embedder"), pooled, width)?,
        })
    }

    /// `[B, width]` in `pooled`'s dtype from the timestep and guidance `[B]` (already scaled
    /// by 1000) and the pooled CLIP vector `[B, pooled]`.
    pub fn forward(
        &self,
        t: &Tensor,
        guidance: Option<&Tensor>,
        pooled: &Tensor,
    ) -> Result<Tensor> {
        let dtype = pooled.dtype();
        let mut emb = self
            .timestep
            .forward(&timestep_features(t)?.to_dtype(dtype)?)?;
        match (&self.guidance, guidance) {
            (Some(mlp), Some(g)) => {
                emb = (emb + mlp.forward(&timestep_features(g)?.to_dtype(dtype)?)?)?;
            }
            (Some(_), None) => {
                return Err(FluxError::Input(
                    "this transformer embeds a guidance value (guidance_embeds): give one".into(),
                ))
            }
            (None, _) => {}
        }
        Ok((emb + self.text.forward(pooled)?)?)
    }
}

/// The rotary tables of positions `ids` (`[S, axes]`): for each axis `i` of `dims[i]` channels,
/// `cos`/`sin` of `pos * theta^(-2j/dims[i])` computed in f64, each repeated twice
/// (interleaved pairs), the axes side by side: two `[S, sum(dims)]` f32 tensors on `device`
/// (diffusers' `FluxPosEmbed`, theta 10000).
pub fn rope_tables(ids: &Tensor, dims: &[usize], device: &Device) -> Result<(Tensor, Tensor)> {
    let ids = ids.to_dtype(DType::F32)?.to_device(&Device::Cpu)?;
    let (s, axes) = ids.dims2()?;
    if axes != dims.len() {
        return Err(FluxError::Input(format!(
            "position ids have {axes} axes, the model's rotary embedding {}",
            dims.len()
        )));
    }
    let ids = ids.to_vec2::<f32>()?;
    let width: usize = dims.iter().sum();
    let (mut cos, mut sin) = (Vec::with_capacity(s * width), Vec::with_capacity(s * width));
    for row in &ids {
        for (&pos, &dim) in row.iter().zip(dims) {
            for j in 0..dim / 2 {
                let freq = 1.0 / 10000f64.powf((2 * j) as f64 / dim as f64);
                let angle = pos as f64 * freq;
                let (c, s) = (angle.cos() as f32, angle.sin() as f32);
                cos.extend([c, c]);
                sin.extend([s, s]);
            }
        }
    }
    Ok((
        Tensor::from_vec(cos, (s, width), device)?,
        Tensor::from_vec(sin, (s, width), device)?,
    ))
}

/// `x` (`[B, H, S, D]`) rotated by the tables (`[S, D]` f32): pairs `(x0, x1)` become
/// `(x0 cos - x1 sin, x1 cos + x0 sin)`, computed in f32 and rounded once to `x`'s dtype.
pub fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (b, h, s, d) = x.dims4()?;
    let x32 = x.to_dtype(DType::F32)?;
    let pairs = x32.reshape((b, h, s, d / 2, 2))?;
    let (x0, x1) = (pairs.narrow(4, 0, 1)?, pairs.narrow(4, 1, 1)?);
    let rotated = Tensor::cat(&[x1.neg()?, x0], 4)?.reshape((b, h, s, d))?;
    let out = (x32.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?)?;
    Ok(out.to_dtype(x.dtype())?)
}
