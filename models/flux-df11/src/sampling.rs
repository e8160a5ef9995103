//! The flow-matching sampler of FLUX (diffusers' `FlowMatchEulerDiscreteScheduler` as
//! `FluxPipeline` sets it up): the sigmas of a run, the Euler step, and the latents' 2x2
//! packing and position ids.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use crate::error::{read_json, FluxError, Result};

/// `scheduler/scheduler_config.json` (the fields the sampler reads).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SchedulerConfig {
    /// Timesteps of training: the transformer's time is `sigma * num_train_timesteps / 1000`.
    #[serde(default = "default_train_timesteps")]
    pub num_train_timesteps: usize,
    /// The fixed shift of the sigmas (schnell: 1, no shift), where `use_dynamic_shifting` is off.
    #[serde(default = "one")]
    pub shift: f64,
    /// Shift by the image's size (dev, Krea): `mu` from `base_shift`..`max_shift` over
    /// `base_image_seq_len`..`max_image_seq_len` tokens.
    #[serde(default)]
    pub use_dynamic_shifting: bool,
    /// `mu` at `base_image_seq_len` tokens.
    #[serde(default = "base_shift")]
    pub base_shift: f64,
    /// `mu` at `max_image_seq_len` tokens.
    #[serde(default = "max_shift")]
    pub max_shift: f64,
    /// See `base_shift`.
    #[serde(default = "base_seq")]
    pub base_image_seq_len: usize,
    /// See `max_shift`.
    #[serde(default = "max_seq")]
    pub max_image_seq_len: usize,
}

fn default_train_timesteps() -> usize {
    1000
}
fn one() -> f64 {
    1.0
}
fn base_shift() -> f64 {
    0.5
}
fn max_shift() -> f64 {
    1.15
}
fn base_seq() -> usize {
    256
}
fn max_seq() -> usize {
    4096
}

impl SchedulerConfig {
    /// Reads and checks `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let refuse = |reason: String| FluxError::config(path, reason);
        let config: Self = read_json(path)?;
        if config.num_train_timesteps == 0 {
            return Err(refuse(
                "num_train_timesteps = 0: expected at least 1".into(),
            ));
        }
        if !(config.shift.is_finite() && config.shift > 0.0) {
            return Err(refuse(format!(
                "shift = {}: expected a positive number",
                config.shift
            )));
        }
        if config.use_dynamic_shifting && config.max_image_seq_len <= config.base_image_seq_len {
            return Err(refuse(format!(
                "max_image_seq_len = {} is not above base_image_seq_len = {}",
                config.max_image_seq_len, config.base_image_seq_len
            )));
        }
        Ok(config)
    }

    /// `mu` for an image of `image_seq_len` tokens (diffusers' `calculate_shift`, in f64).
    pub fn mu(&self, image_seq_len: usize) -> f64 {
        let m = (self.max_shift - self.base_shift)
            / (self.max_image_seq_len as f64 - self.base_image_seq_len as f64);
        let b = self.base_shift - m * self.base_image_seq_len as f64;
        image_seq_len as f64 * m + b
    }

    /// The sigmas of a run of `steps` steps over `image_seq_len` tokens, then a final 0:
    /// `linspace(1, 1/steps, steps)` shifted (by `mu`: `e^mu / (e^mu + 1/s - 1)`; else
    /// `shift * s / (1 + (shift - 1) s)`), in f32 as the scheduler computes them.
    pub fn sigmas(&self, steps: usize, image_seq_len: usize) -> Result<Vec<f32>> {
        if steps == 0 {
            return Err(FluxError::Input("a run needs at least one step".into()));
        }
        let mut sigmas: Vec<f32> = (0..steps)
            .map(|i| {
                let end = 1.0 / steps as f64;
                let s = if steps == 1 {
                    1.0
                } else {
                    1.0 + (end - 1.0) * i as f64 / (steps - 1) as f64
                };
                s as f32
            })
            .collect();
        if self.use_dynamic_shifting {
            let e = self.mu(image_seq_len).exp() as f32;
            for s in &mut sigmas {
                *s = e / (e + (1.0 / *s - 1.0));
            }
        } else {
            let shift = self.shift as f32;
            for s in &mut sigmas {
                *s = shift * *s / (1.0 + (shift - 1.0) * *s);
            }
        }
        sigmas.push(0.0);
        Ok(sigmas)
    }

    /// The transformer's timestep for `sigma` (`sigma * num_train_timesteps` in f32, the
    /// scheduler's timestep).
    pub fn timestep(&self, sigma: f32) -> f32 {
        sigma * self.num_train_timesteps as f32
    }
}

/// One Euler step: `latents + (sigma_next - sigma) * noise_pred`, the product in the
/// prediction's dtype and the sum in f32, rounded to the prediction's dtype (the scheduler's
/// arithmetic).
pub fn euler_step(
    latents: &Tensor,
    noise_pred: &Tensor,
    sigma: f32,
    sigma_next: f32,
) -> Result<Tensor> {
    let dt = sigma_next - sigma;
    let update = (noise_pred * f64::from(dt))?;
    let next = (latents.to_dtype(DType::F32)? + update.to_dtype(DType::F32)?)?;
    Ok(next.to_dtype(noise_pred.dtype())?)
}

/// Latents `[B, C, H, W]` packed into tokens of 2x2 patches: `[B, (H/2)(W/2), 4C]`.
pub fn pack_latents(latents: &Tensor) -> Result<Tensor> {
    let (b, c, h, w) = latents.dims4()?;
    if !h.is_multiple_of(2) || !w.is_multiple_of(2) {
        return Err(FluxError::Input(format!(
            "latents of {h}x{w}: the 2x2 packing needs even sizes"
        )));
    }
    Ok(latents
        .reshape((b, c, h / 2, 2, w / 2, 2))?
        .permute((0, 2, 4, 1, 3, 5))?
        .reshape((b, (h / 2) * (w / 2), c * 4))?)
}

/// The inverse of [`pack_latents`] for latents of `h` x `w`.
pub fn unpack_latents(tokens: &Tensor, h: usize, w: usize) -> Result<Tensor> {
    let (b, n, c4) = tokens.dims3()?;
    let even = h.is_multiple_of(2) && w.is_multiple_of(2);
    if !even || n != (h / 2) * (w / 2) || !c4.is_multiple_of(4) {
        return Err(FluxError::Input(format!(
            "{n} tokens of {c4} channels are not latents of {h}x{w}"
        )));
    }
    let c = c4 / 4;
    Ok(tokens
        .reshape((b, h / 2, w / 2, c, 2, 2))?
        .permute((0, 3, 1, 4, 2, 5))?
        .reshape((b, c, h, w))?)
}

/// Position ids of packed latent tokens on a `rows` x `cols` grid: `(0, row, col)` row by row,
/// `[rows * cols, 3]` f32.
pub fn image_ids(rows: usize, cols: usize, device: &Device) -> Result<Tensor> {
    let ids: Vec<f32> = (0..rows * cols)
        .flat_map(|i| [0.0, (i / cols) as f32, (i % cols) as f32])
        .collect();
    Ok(Tensor::from_vec(ids, (rows * cols, 3), device)?)
}

/// Position ids of `len` text tokens: all zero, `[len, 3]` f32.
pub fn text_ids(len: usize, device: &Device) -> Result<Tensor> {
    Ok(Tensor::zeros((len, 3), DType::F32, device)?)
}
