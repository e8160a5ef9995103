//! A whole FLUX run: the prompt encoded (then the text encoders released, so the peak is the
//! transformer's), the latents denoised by the flow-matching sampler, decoded and turned into
//! 8-bit RGB, as diffusers' `FluxPipeline` does.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use df11_candle::{Df11Options, ModelWeights, WeightFormat};

use crate::config::FluxConfig;
use crate::error::{FluxError, Result};
use crate::sampling::{
    euler_step, image_ids, pack_latents, text_ids, unpack_latents, SchedulerConfig,
};
use crate::text::TextEncoders;
use crate::transformer::{FluxInputs, FluxTransformer};
use crate::vae::{to_rgb8, VaeDecoder};

/// Where the pieces of a pipeline are.
#[derive(Debug, Clone)]
pub struct PipelineFolders<'a> {
    /// The transformer: a DF11 folder (`format` [`WeightFormat::Df11`]) or the base repo's
    /// `transformer/` (dense).
    pub transformer: &'a Path,
    /// How to read it.
    pub format: WeightFormat,
    /// The base repo: `transformer/config.json`, `scheduler/`, `text_encoder*/`,
    /// `tokenizer*/`, `vae/`.
    pub base: &'a Path,
}

/// What to make.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Image width in pixels (a multiple of 16).
    pub width: usize,
    /// Image height in pixels (a multiple of 16).
    pub height: usize,
    /// Denoising steps.
    pub steps: usize,
    /// Guidance scale (models with a guidance embedding; schnell: ignored).
    pub guidance: f32,
    /// T5's prompt length (FLUX.1-dev: 512, schnell: 256).
    pub max_sequence_length: usize,
    /// The initial noise `[1, 16, height/8, width/8]`; `None`: drawn from N(0, 1) with `seed`
    /// (on the host, so the same on every device).
    pub noise: Option<Tensor>,
    /// The seed of the noise.
    pub seed: u64,
}

/// An image: `height` rows of `width` RGB pixels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// Row-major RGB bytes.
    pub rgb: Vec<u8>,
}

/// The text states of a prompt, made by [`encode_prompt`].
#[derive(Debug, Clone)]
pub struct Prompt {
    /// T5's states `[1, L, d]`.
    pub states: Tensor,
    /// CLIP's pooled vector `[1, p]`.
    pub pooled: Tensor,
}

/// Encodes `prompt` with the base repo's text encoders on `device` in `dtype`; the encoders are
/// dropped on return (their memory freed before the transformer runs).
pub fn encode_prompt(
    base: &Path,
    prompt: &str,
    device: &Device,
    dtype: DType,
    max_sequence_length: usize,
) -> Result<Prompt> {
    let mut encoders = TextEncoders::load(base, device, dtype, max_sequence_length)?;
    let (states, pooled) = encoders.encode(prompt)?;
    Ok(Prompt { states, pooled })
}

/// The transformer of `folders` on `device` in `dtype`, its weights by `options`.
pub fn load_transformer(
    folders: &PipelineFolders<'_>,
    device: &Device,
    dtype: DType,
    options: Df11Options,
) -> Result<FluxTransformer> {
    let config = FluxConfig::open(&folders.base.join("transformer/config.json"))?;
    let weights =
        ModelWeights::open_with(folders.transformer, folders.format, device, dtype, options)?;
    FluxTransformer::load(&config, &weights)
}

/// Denoises from the options' noise with `transformer` and the prompt's states, calling
/// `on_step(i)` after each step; returns the final packed latents `[1, N, 64]`.
pub fn denoise(
    transformer: &FluxTransformer,
    scheduler: &SchedulerConfig,
    prompt: &Prompt,
    options: &GenerateOptions,
    mut on_step: impl FnMut(usize),
) -> Result<Tensor> {
    let (lh, lw) = latent_size(options)?;
    let device = prompt.states.device();
    let channels = transformer.config().in_channels / 4;
    let noise = match &options.noise {
        Some(n) => {
            if n.dims() != [1, channels, lh, lw] {
                return Err(FluxError::Input(format!(
                    "noise is {:?}, expected [1, {channels}, {lh}, {lw}]",
                    n.dims()
                )));
            }
            n.to_device(device)?
        }
        None => {
            // Drawn on the host: the same noise for a seed on every device.
            use rand::SeedableRng;
            use rand_distr::Distribution;
            let mut rng = rand::rngs::StdRng::seed_from_u64(options.seed);
            let normal = rand_distr::StandardNormal;
            let n = channels * lh * lw;
            let values: Vec<f32> = (0..n).map(|_| normal.sample(&mut rng)).collect();
            Tensor::from_vec(values, (1, channels, lh, lw), device)?
        }
    };
    let dtype = prompt.states.dtype();
    let mut latents = pack_latents(&noise)?.to_dtype(dtype)?;
    let tokens = (lh / 2) * (lw / 2);
    let sigmas = scheduler.sigmas(options.steps, tokens)?;
    let img = image_ids(lh / 2, lw / 2, device)?;
    let txt = text_ids(prompt.states.dim(1)?, device)?;
    let guidance = Tensor::new(&[options.guidance], device)?;
    let guided = transformer.config().guidance_embeds;
    for i in 0..options.steps {
        // The pipeline's timestep: the scheduler's, in the latents' dtype, divided by 1000.
        let t = Tensor::new(&[scheduler.timestep(sigmas[i])], device)?.to_dtype(dtype)?;
        let t = (t / 1000.0)?;
        let noise_pred = transformer.forward(&FluxInputs {
            hidden_states: &latents,
            encoder_hidden_states: &prompt.states,
            pooled_projections: &prompt.pooled,
            timestep: &t,
            guidance: guided.then_some(&guidance),
            img_ids: &img,
            txt_ids: &txt,
        })?;
        latents = euler_step(&latents, &noise_pred, sigmas[i], sigmas[i + 1])?;
        on_step(i);
    }
    Ok(latents)
}

/// The image of packed latents (the VAE in `vae`, on the latents' device and dtype).
pub fn decode(vae: &VaeDecoder, latents: &Tensor, options: &GenerateOptions) -> Result<Image> {
    let (lh, lw) = latent_size(options)?;
    let image = vae.decode(&unpack_latents(latents, lh, lw)?)?;
    Ok(Image {
        width: options.width,
        height: options.height,
        rgb: to_rgb8(&image)?,
    })
}

/// Latent height and width of the options' image, which must be a multiple of 16 pixels.
fn latent_size(options: &GenerateOptions) -> Result<(usize, usize)> {
    let (w, h) = (options.width, options.height);
    if w == 0 || h == 0 || !w.is_multiple_of(16) || !h.is_multiple_of(16) || w > 8192 || h > 8192 {
        return Err(FluxError::Input(format!(
            "{w}x{h}: width and height must be multiples of 16 pixels, at most 8192"
        )));
    }
    if options.steps == 0 || options.steps > 1000 {
        return Err(FluxError::Input(format!(
            "{} steps: expected 1 to 1000",
            options.steps
        )));
    }
    Ok((h / 8, w / 8))
}
