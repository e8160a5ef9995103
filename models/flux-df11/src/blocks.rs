//! The transformer's blocks: double-stream (`transformer_blocks`: text and image each with its
//! own modulation, projections and MLP, one attention over both) and single-stream
//! (`single_transformer_blocks`: the joined sequence, attention and MLP side by side), as
//! diffusers' `FluxTransformerBlock` and `FluxSingleTransformerBlock`.

use candle_core::{DType, Module, Tensor, D};
use df11_candle::{Linear, ModelWeights};

use crate::attention::Attention;
use crate::embed::silu;
use crate::error::Result;

const EPS: f64 = 1e-6;

/// LayerNorm without affine parameters (eps 1e-6), computed in f32 and rounded once.
pub(crate) fn layer_norm(x: &Tensor) -> Result<Tensor> {
    let x32 = x.to_dtype(DType::F32)?;
    let centred = x32.broadcast_sub(&x32.mean_keepdim(D::Minus1)?)?;
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
    let normed = centred.broadcast_mul(&(var + EPS)?.sqrt()?.recip()?)?;
    Ok(normed.to_dtype(x.dtype())?)
}

/// `norm(x) * (1 + scale) + shift`, `scale` and `shift` `[B, dim]` broadcast over the tokens.
pub(crate) fn modulate(x: &Tensor, shift: &Tensor, scale: &Tensor) -> Result<Tensor> {
    let scale = (scale.unsqueeze(1)? + 1.0)?;
    Ok(layer_norm(x)?
        .broadcast_mul(&scale)?
        .broadcast_add(&shift.unsqueeze(1)?)?)
}

/// `gelu_tanh` computed in f32 and rounded once.
fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    Ok(x.to_dtype(DType::F32)?.gelu()?.to_dtype(x.dtype())?)
}

/// The `n` modulation vectors of a block: `linear(silu(temb))` cut in `n` along the channels.
#[derive(Debug, Clone)]
struct Modulation {
    linear: Linear,
    n: usize,
}

impl Modulation {
    fn load(weights: &ModelWeights, name: &str, dim: usize, n: usize) -> Result<Self> {
        Ok(Self {
            linear: weights.linear(name, n * dim, dim, true)?,
            n,
        })
    }

    fn forward(&self, temb: &Tensor) -> Result<Vec<Tensor>> {
        let emb = self.linear.forward(&silu(temb)?)?;
        Ok(emb.chunk(self.n, 1)?)
    }
}

/// `net.2(gelu_tanh(net.0.proj(x)))`.
#[derive(Debug, Clone)]
struct FeedForward {
    up: Linear,
    down: Linear,
}

impl FeedForward {
    fn load(weights: &ModelWeights, prefix: &str, dim: usize) -> Result<Self> {
        Ok(Self {
            up: weights.linear(&format!("{prefix}.net.0.proj"), 4 * dim, dim, true)?,
            down: weights.linear(&format!("{prefix}.net.2"), dim, 4 * dim, true)?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.down.forward(&gelu_tanh(&self.up.forward(x)?)?)?)
    }
}

/// One stream of a double-stream block: its modulation and MLP.
#[derive(Debug, Clone)]
struct Stream {
    modulation: Modulation,
    ff: FeedForward,
}

impl Stream {
    /// The stream after attention: `x + gate_msa * attn`, then `+ gate_mlp * ff(modulated)`.
    fn finish(&self, x: &Tensor, attn: &Tensor, m: &[Tensor]) -> Result<Tensor> {
        let (gate_msa, shift_mlp, scale_mlp, gate_mlp) = (&m[2], &m[3], &m[4], &m[5]);
        let x = (x + attn.broadcast_mul(&gate_msa.unsqueeze(1)?)?)?;
        let h = self.ff.forward(&modulate(&x, shift_mlp, scale_mlp)?)?;
        Ok((&x + h.broadcast_mul(&gate_mlp.unsqueeze(1)?)?)?)
    }
}

/// A double-stream block (`transformer_blocks.N`).
#[derive(Debug, Clone)]
pub struct DoubleBlock {
    image: Stream,
    text: Stream,
    attn: Attention,
}

impl DoubleBlock {
    /// Loads `prefix` (`transformer_blocks.N`): `norm1.linear`, `norm1_context.linear`, `attn.*`,
    /// `ff.*`, `ff_context.*`.
    pub fn load(
        weights: &ModelWeights,
        prefix: &str,
        heads: usize,
        head_dim: usize,
    ) -> Result<Self> {
        let dim = heads * head_dim;
        let stream = |norm: &str, ff: &str| -> Result<Stream> {
            Ok(Stream {
                modulation: Modulation::load(weights, &format!("{prefix}.{norm}.linear"), dim, 6)?,
                ff: FeedForward::load(weights, &format!("{prefix}.{ff}"), dim)?,
            })
        };
        Ok(Self {
            image: stream("norm1", "ff")?,
            text: stream("norm1_context", "ff_context")?,
            attn: Attention::load(weights, &format!("{prefix}.attn"), heads, head_dim, true)?,
        })
    }

    /// The block on `image` `[B, N, dim]` and `text` `[B, T, dim]`: `(image, text)`.
    pub fn forward(
        &self,
        image: &Tensor,
        text: &Tensor,
        temb: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let mi = self.image.modulation.forward(temb)?;
        let mt = self.text.modulation.forward(temb)?;
        let image_in = modulate(image, &mi[0], &mi[1])?;
        let text_in = modulate(text, &mt[0], &mt[1])?;
        let (image_attn, text_attn) = self.attn.forward(&image_in, Some(&text_in), cos, sin)?;
        let text_attn = text_attn.expect("a double-stream block's attention returns the text");
        Ok((
            self.image.finish(image, &image_attn, &mi)?,
            self.text.finish(text, &text_attn, &mt)?,
        ))
    }
}

/// A single-stream block (`single_transformer_blocks.N`).
#[derive(Debug, Clone)]
pub struct SingleBlock {
    modulation: Modulation,
    proj_mlp: Linear,
    proj_out: Linear,
    attn: Attention,
}

impl SingleBlock {
    /// Loads `prefix` (`single_transformer_blocks.N`): `norm.linear`, `proj_mlp`, `proj_out`,
    /// `attn.*` (MLP ratio 4).
    pub fn load(
        weights: &ModelWeights,
        prefix: &str,
        heads: usize,
        head_dim: usize,
    ) -> Result<Self> {
        let dim = heads * head_dim;
        Ok(Self {
            modulation: Modulation::load(weights, &format!("{prefix}.norm.linear"), dim, 3)?,
            proj_mlp: weights.linear(&format!("{prefix}.proj_mlp"), 4 * dim, dim, true)?,
            proj_out: weights.linear(&format!("{prefix}.proj_out"), dim, 5 * dim, true)?,
            attn: Attention::load(weights, &format!("{prefix}.attn"), heads, head_dim, false)?,
        })
    }

    /// The block on the joined sequence `x` `[B, T + N, dim]`.
    pub fn forward(&self, x: &Tensor, temb: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let m = self.modulation.forward(temb)?;
        let (shift, scale, gate) = (&m[0], &m[1], &m[2]);
        let normed = modulate(x, shift, scale)?;
        let mlp = gelu_tanh(&self.proj_mlp.forward(&normed)?)?;
        let (attn, _) = self.attn.forward(&normed, None, cos, sin)?;
        let h = self.proj_out.forward(&Tensor::cat(&[attn, mlp], 2)?)?;
        Ok((x + h.broadcast_mul(&gate.unsqueeze(1)?)?)?)
    }
}
