//! The decoder of FLUX's autoencoder (diffusers' `AutoencoderKL` with 16 latent channels, the
//! base repo's `vae/`): latents to an image, and the pipeline's post-processing to 8-bit RGB.

use std::path::Path;

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{conv2d, group_norm, linear, Conv2d, Conv2dConfig, GroupNorm, Linear, VarBuilder};
use serde::Deserialize;

use crate::error::{read_json, FluxError, Result};

/// `vae/config.json` (the fields the decoder reads).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VaeConfig {
    /// Channels of the image (3).
    pub out_channels: usize,
    /// Channels of the latents (FLUX: 16).
    pub latent_channels: usize,
    /// Channels of each level, the first the image's side.
    pub block_out_channels: Vec<usize>,
    /// Resnets a level (the decoder's levels have one more).
    pub layers_per_block: usize,
    /// Groups of every group norm.
    pub norm_num_groups: usize,
    /// Latents are divided by this before decoding...
    pub scaling_factor: f64,
    /// ...and then shifted by this.
    #[serde(default)]
    pub shift_factor: Option<f64>,
    /// A 1x1 convolution before the decoder (FLUX: none).
    #[serde(default)]
    pub use_post_quant_conv: Option<bool>,
    /// Attention in the middle block (FLUX: yes).
    #[serde(default = "yes")]
    pub mid_block_add_attention: bool,
}

fn yes() -> bool {
    true
}

const EPS: f64 = 1e-6;

impl VaeConfig {
    /// Reads and checks `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let refuse = |reason: String| FluxError::config(path, reason);
        let c: Self = read_json(path)?;
        let ok = |v: usize| (1..=1 << 16).contains(&v);
        if c.block_out_channels.is_empty() || !c.block_out_channels.iter().all(|&v| ok(v)) {
            return Err(refuse(format!(
                "block_out_channels = {:?}: expected 1 to 65536 channels a level",
                c.block_out_channels
            )));
        }
        if !ok(c.norm_num_groups)
            || c.block_out_channels
                .iter()
                .any(|v| !v.is_multiple_of(c.norm_num_groups))
        {
            return Err(refuse(format!(
                "norm_num_groups = {} does not divide every level's channels",
                c.norm_num_groups
            )));
        }
        for (field, v) in [
            ("out_channels", c.out_channels),
            ("latent_channels", c.latent_channels),
            ("layers_per_block", c.layers_per_block),
        ] {
            if !ok(v) || (field == "layers_per_block" && v > 64) {
                return Err(refuse(format!("{field} = {v} is out of range")));
            }
        }
        if c.use_post_quant_conv == Some(true) {
            return Err(refuse(
                "use_post_quant_conv = true: FLUX's autoencoder has no post-quant convolution"
                    .into(),
            ));
        }
        if !(c.scaling_factor.is_finite() && c.scaling_factor != 0.0) {
            return Err(refuse(format!("scaling_factor = {}", c.scaling_factor)));
        }
        Ok(c)
    }
}

fn conv3(vb: VarBuilder, cin: usize, cout: usize) -> Result<Conv2d> {
    let cfg = Conv2dConfig {
        padding: 1,
        ..Default::default()
    };
    Ok(conv2d(cin, cout, 3, cfg, vb)?)
}

/// `ResnetBlock2D` without a time embedding.
#[derive(Debug, Clone)]
struct Resnet {
    norm1: GroupNorm,
    conv1: Conv2d,
    norm2: GroupNorm,
    conv2: Conv2d,
    shortcut: Option<Conv2d>,
}

impl Resnet {
    fn load(vb: VarBuilder, cin: usize, cout: usize, groups: usize) -> Result<Self> {
        let shortcut = if cin != cout {
            Some(conv2d(
                cin,
                cout,
                1,
                Default::default(),
                vb.pp("conv_shortcut"),
            )?)
        } else {
            None
        };
        Ok(Self {
            norm1: group_norm(groups, cin, EPS, vb.pp("norm1"))?,
            conv1: conv3(vb.pp("conv1"), cin, cout)?,
            norm2: group_norm(groups, cout, EPS, vb.pp("norm2"))?,
            conv2: conv3(vb.pp("conv2"), cout, cout)?,
            shortcut,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self
            .conv1
            .forward(&candle_nn::ops::silu(&self.norm1.forward(x)?)?)?;
        let h = self
            .conv2
            .forward(&candle_nn::ops::silu(&self.norm2.forward(&h)?)?)?;
        let x = match &self.shortcut {
            Some(c) => c.forward(x)?,
            None => x.clone(),
        };
        Ok((x + h)?)
    }
}

/// The middle block's single-head attention over the pixels, with a residual.
#[derive(Debug, Clone)]
struct PixelAttention {
    norm: GroupNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
}

impl PixelAttention {
    fn load(vb: VarBuilder, c: usize, groups: usize) -> Result<Self> {
        Ok(Self {
            norm: group_norm(groups, c, EPS, vb.pp("group_norm"))?,
            q: linear(c, c, vb.pp("to_q"))?,
            k: linear(c, c, vb.pp("to_k"))?,
            v: linear(c, c, vb.pp("to_v"))?,
            out: linear(c, c, vb.pp("to_out.0"))?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        let seq = self
            .norm
            .forward(x)?
            .reshape((b, c, h * w))?
            .transpose(1, 2)?
            .contiguous()?;
        let (q, k, v) = (
            self.q.forward(&seq)?,
            self.k.forward(&seq)?,
            self.v.forward(&seq)?,
        );
        let dtype = q.dtype();
        let (q, k, v) = (
            q.to_dtype(DType::F32)?,
            k.to_dtype(DType::F32)?,
            v.to_dtype(DType::F32)?,
        );
        let scores = (q.matmul(&k.t()?.contiguous()?)? / (c as f64).sqrt())?;
        let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
        let attn = probs.matmul(&v)?.to_dtype(dtype)?;
        let out = self
            .out
            .forward(&attn)?
            .transpose(1, 2)?
            .reshape((b, c, h, w))?;
        Ok((out + x)?)
    }
}

/// One level of the decoder: its resnets and, but for the last, a 2x nearest upsampling and
/// convolution.
#[derive(Debug, Clone)]
struct UpLevel {
    resnets: Vec<Resnet>,
    upsample: Option<Conv2d>,
}

/// The decoder.
#[derive(Debug, Clone)]
pub struct VaeDecoder {
    config: VaeConfig,
    dtype: DType,
    conv_in: Conv2d,
    mid: (Resnet, Option<PixelAttention>, Resnet),
    up: Vec<UpLevel>,
    norm_out: GroupNorm,
    conv_out: Conv2d,
}

impl VaeDecoder {
    /// The decoder of the autoencoder folder `vae` (its config and safetensors) on `device` in
    /// `dtype` (F32 on the CPU, whose half-precision convolutions candle lacks; the pipeline
    /// decodes in f32 everywhere: the image is the same for a DF11 and a BF16 transformer).
    pub fn load(vae: &Path, device: &Device, dtype: DType) -> Result<Self> {
        let config = VaeConfig::open(&vae.join("config.json"))?;
        let vb = crate::text::var_builder(vae, dtype, device)?.pp("decoder");
        let g = config.norm_num_groups;
        let levels = &config.block_out_channels;
        let top = *levels.last().expect("checked non-empty");
        let mid_vb = vb.pp("mid_block");
        let mid = (
            Resnet::load(mid_vb.pp("resnets.0"), top, top, g)?,
            config
                .mid_block_add_attention
                .then(|| PixelAttention::load(mid_vb.pp("attentions.0"), top, g))
                .transpose()?,
            Resnet::load(mid_vb.pp("resnets.1"), top, top, g)?,
        );
        let mut up = Vec::new();
        let mut cin = top;
        for (i, &cout) in levels.iter().rev().enumerate() {
            let lvb = vb.pp(format!("up_blocks.{i}"));
            let resnets = (0..=config.layers_per_block)
                .map(|j| {
                    let from = if j == 0 { cin } else { cout };
                    Resnet::load(lvb.pp(format!("resnets.{j}")), from, cout, g)
                })
                .collect::<Result<Vec<_>>>()?;
            let last = i + 1 == levels.len();
            let upsample = (!last)
                .then(|| conv3(lvb.pp("upsamplers.0.conv"), cout, cout))
                .transpose()?;
            up.push(UpLevel { resnets, upsample });
            cin = cout;
        }
        Ok(Self {
            conv_in: conv3(vb.pp("conv_in"), config.latent_channels, top)?,
            mid,
            up,
            norm_out: group_norm(g, levels[0], EPS, vb.pp("conv_norm_out"))?,
            conv_out: conv3(vb.pp("conv_out"), levels[0], config.out_channels)?,
            config,
            dtype,
        })
    }

    /// The image `[B, 3, 8H, 8W]` (values around [-1, 1]) of latents `[B, C, H, W]` as the
    /// sampler leaves them (converted to the decoder's dtype, divided by the scaling factor and
    /// shifted here first).
    pub fn decode(&self, latents: &Tensor) -> Result<Tensor> {
        self.decode_scaled(&self.scale(&latents.to_dtype(self.dtype)?)?)
    }

    /// Latents as the decoder takes them: `latents / scaling_factor + shift_factor`.
    pub fn scale(&self, latents: &Tensor) -> Result<Tensor> {
        let c = &self.config;
        Ok(((latents / c.scaling_factor)? + c.shift_factor.unwrap_or(0.0))?)
    }

    /// The image of latents already scaled ([`Self::scale`]).
    pub fn decode_scaled(&self, z: &Tensor) -> Result<Tensor> {
        let mut x = self.conv_in.forward(z)?;
        x = self.mid.0.forward(&x)?;
        if let Some(a) = &self.mid.1 {
            x = a.forward(&x)?;
        }
        x = self.mid.2.forward(&x)?;
        for level in &self.up {
            for r in &level.resnets {
                x = r.forward(&x)?;
            }
            if let Some(conv) = &level.upsample {
                let (_, _, h, w) = x.dims4()?;
                x = conv.forward(&x.upsample_nearest2d(2 * h, 2 * w)?)?;
            }
        }
        let x = candle_nn::ops::silu(&self.norm_out.forward(&x)?)?;
        Ok(self.conv_out.forward(&x)?)
    }
}

/// The pipeline's post-processing: `round(255 * clamp(x / 2 + 0.5, 0, 1))` as `[B, H, W, 3]`
/// bytes (the values in f32).
pub fn to_rgb8(image: &Tensor) -> Result<Vec<u8>> {
    let x = ((image.to_dtype(DType::F32)? / 2.0)? + 0.5)?.clamp(0f32, 1f32)?;
    let x = x.permute((0, 2, 3, 1))?.flatten_all()?.to_vec1::<f32>()?;
    Ok(x.iter().map(|v| (v * 255.0).round() as u8).collect())
}
