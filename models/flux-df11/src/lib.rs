//! FLUX.1 image generation with the DFloat11-compressed transformer on candle.
//!
//! The DFloat11 FLUX repos (`DFloat11/FLUX.1-dev-DF11`, `FLUX.1-schnell-DF11`,
//! `FLUX.1-Krea-dev-DF11`) hold the transformer of diffusers' FLUX pipeline compressed per
//! block (`transformer_blocks.N`, `single_transformer_blocks.N`); the text encoders, the VAE
//! and the scheduler come from the BF16 base repo. [`FluxTransformer`] runs that transformer
//! with its weights kept compressed on the device (or from a plain BF16 folder, the bit-for-bit
//! reference). Both repos are local folders or Hub repos resolved through the Hugging Face
//! cache ([`source`]).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use candle_core::{DType, Device};
//! use df11_candle::{ModelWeights, WeightFormat};
//! use flux_df11::{FluxConfig, FluxTransformer};
//!
//! let config = FluxConfig::open("FLUX.1-dev/transformer/config.json".as_ref())?;
//! let weights = ModelWeights::open(
//!     "FLUX.1-dev-DF11".as_ref(),
//!     WeightFormat::Df11,
//!     &Device::new_cuda(0)?,
//!     DType::BF16,
//! )?;
//! let transformer = FluxTransformer::load(&config, &weights)?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod attention;
pub mod blocks;
pub mod config;
pub mod embed;
pub mod error;
pub mod pipeline;
pub mod report;
pub mod sampling;
pub mod source;
pub mod text;
pub mod tokenizer;
pub mod transformer;
pub mod vae;

pub use config::FluxConfig;
pub use error::{FluxError, Result};
pub use report::RunReport;
pub use sampling::SchedulerConfig;
pub use source::{FluxSources, ResolvedFolders, SourceOptions};
pub use text::TextEncoders;
pub use transformer::{FluxInputs, FluxTransformer};
pub use vae::{VaeConfig, VaeDecoder};
