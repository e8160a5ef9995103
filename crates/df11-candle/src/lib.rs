//! DFloat11 (DF11) for candle.
//!
//! DF11 stores BF16 weights in about 68% of their size without losing a bit: each weight's 8-bit
//! exponent is Huffman-coded, its sign and mantissa byte kept raw. This crate reads DF11 model
//! folders (the layout of the `DFloat11/*-DF11` repos on the Hugging Face Hub, written by the
//! official `dfloat11` >= 0.2.0 compressor), validates them, decodes units on the CPU (and, with
//! the `cuda` feature, on the GPU), and compresses BF16 models into the official layout.
//!
//! A DF11 folder holds one *unit* per pattern of `dfloat11_config.pattern_dict` (typically one
//! per decoder layer, plus `lm_head` and `model.embed_tokens` when they are compressed): six
//! tensors that decode to the unit's weights concatenated (`q, k, v, o, gate, up, down`). Norms,
//! biases and anything not compressed are plain tensors under their usual names.
//!
//! # Quick start: weights that stay compressed
//!
//! [`ModelWeights`] opens a DF11 folder (or, with [`WeightFormat::Dense`], a plain BF16 folder)
//! on a device and hands out [`Df11Linear`] / [`Df11Embedding`] modules whose weights stay
//! compressed in memory and are decoded just before each use. The result is bit-identical to the
//! BF16 model:
//!
//! ```
//! use candle_core::{DType, Device, Module, Tensor};
//! use df11_candle::{ModelWeights, WeightFormat};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/models");
//! // A DF11 folder (here a bundled tiny Qwen3) and its BF16 original.
//! let df11_dir = format!("{fixtures}/qwen3-tiny/df11");
//! let bf16_dir = format!("{fixtures}/qwen3-tiny/bf16");
//! let device = Device::Cpu;
//! let df11 = ModelWeights::open(df11_dir.as_ref(), WeightFormat::Df11, &device, DType::F32)?;
//! let bf16 = ModelWeights::open(bf16_dir.as_ref(), WeightFormat::Dense, &device, DType::F32)?;
//!
//! // model.layers.0.self_attn.q_proj.weight is [128, 128], a member of unit `model.layers.0`.
//! let q_df11 = df11.linear("model.layers.0.self_attn.q_proj", 128, 128, false)?;
//! let q_bf16 = bf16.linear("model.layers.0.self_attn.q_proj", 128, 128, false)?;
//!
//! let x = Tensor::randn(0f32, 1.0, (2, 128), &device)?;
//! let (a, b) = (q_df11.forward(&x)?, q_bf16.forward(&x)?);
//! assert_eq!(a.to_vec2::<f32>()?, b.to_vec2::<f32>()?); // bit for bit
//! # Ok(()) }
//! ```
//!
//! Write your model on [`ModelWeights::linear`] and [`ModelWeights::embedding`] (the workspace's
//! `models/qwen3-df11` crate does), or build modules from a [`Df11Group`] directly (one unit on
//! the device; [`Df11Linear::new`] takes a member of it). See the workspace's
//! `examples/custom_mlp.rs`.
//!
//! # Any candle-transformers model: `Df11Backend`
//!
//! [`Df11Backend`] is a [`candle_nn::var_builder::SimpleBackend`] over a DF11 folder, so every
//! model written against `VarBuilder` loads from a DF11 repo unchanged. It decodes each unit once
//! at load time on the device (the CPU decoder or the CUDA kernel) and hands out its weights;
//! the model then holds them **decoded** (BF16-sized memory). See the [`backend`] module and
//! `examples/candle_transformers_qwen3.rs` (the workspace's).
//!
//! ```
//! use candle_core::{DType, Device, Tensor};
//! use candle_transformers::models::qwen3;
//! use df11_candle::Df11Backend;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/models/qwen3-tiny/df11");
//! let config: qwen3::Config =
//!     serde_json::from_slice(&std::fs::read(format!("{dir}/config.json"))?)?;
//! let vb = Df11Backend::open(dir)?.into_var_builder(DType::F32, &Device::Cpu);
//! let mut model = qwen3::ModelForCausalLM::new(&config, vb)?;
//! let logits = model.forward(&Tensor::new(&[[32u32, 273, 261]], &Device::Cpu)?, 0)?;
//! assert_eq!(logits.dims(), &[1, 1, config.vocab_size]);
//! # Ok(()) }
//! ```
//!
//! # Lower level
//!
//! - [`Df11Model::open`] validates a folder (every invariant of the format, before any decode)
//!   and lists its [`Df11Unit`]s and plain tensors; [`Df11Model::decode_unit`],
//!   [`decode_parallel`] and [`decode_sequential`] decode a unit on the CPU.
//! - [`compress_model`] and [`encode_unit`] compress BF16 weights into the official layout,
//!   byte-identical to the `dfloat11` 0.5.0 compressor; [`builtin_pattern_dict`] knows the
//!   common architectures.
//! - [`verify_model`] compares a DF11 folder with its BF16 original, tensor by tensor.
//!
//! # Errors
//!
//! Every fallible function returns [`Result`], whose [`Df11Error`] names the file and, where
//! there is one, the tensor or unit at fault; a defect of a compressed unit is a [`UnitDefect`].
//!
//! # Features
//!
//! - `cuda`: decoding on NVIDIA GPUs ([`Df11Group`] on a `Device::Cuda` runs the kernel of
//!   `kernels/df11_decode.cu`, compiled to PTX by the build script; needs nvcc).
//! - `tuning`: `tuning::install`, kernel launch parameters overridden for measurements.
//!
//! # Options
//!
//! How weights are laid out and multiplied on a GPU is one [`Df11Options`] value, given at load
//! ([`ModelWeights::open_with`], [`UnitPlacement`]) and carried by every weight; the library reads
//! no environment variable.

#![warn(missing_docs)]

pub mod codec;
pub mod cuda;
pub mod error;
#[doc(hidden)]
pub mod fixtures;
pub mod format;
pub mod load_profile;
pub mod nn;
pub mod options;
pub mod synth;
pub mod tuning;

// The modules by their former flat paths (`df11_candle::decode`, `df11_candle::unit`, ...), so
// code written against them keeps compiling.
pub use codec::{compress, decode, encode, huffman, verify};
pub use cuda::huffman::segments;
pub use cuda::{matmul, packed};
pub use format::{config, model, patterns, safetensors_index, unit};
pub use nn::{backend, group, linear, weights};

pub use codec::compress::{compress_model, CompressOptions, CompressProgress, CompressReport};
pub use codec::decode::{decode_parallel, decode_sequential, DecodeTable};
pub use codec::encode::{encode_unit, EncodedUnit};
pub use codec::verify::{verify_model, Difference, VerifyReport};
pub use cuda::huffman::segments::SegmentIndex;
pub use cuda::matmul::{fused_plan, FusedKernel, MatmulPath};
pub use cuda::packed::tile_order::{TileMembers, TileOrder};
pub use cuda::packed::{ExponentForm, PackedExponents};
pub use error::{Df11Error, Result, UnitDefect};
pub use format::config::{Df11Config, Pattern, PatternDict};
pub use format::model::{Df11Model, Df11Unit};
pub use format::patterns::builtin_pattern_dict;
pub use format::safetensors_index::{RawTensor, SafetensorsIndex};
pub use format::unit::{UnitLayout, UnitTensors};
pub use nn::backend::Df11Backend;
pub use nn::group::{Df11Group, UnitPlacement};
pub use nn::linear::{Df11Embedding, Df11Linear};
pub use nn::weights::{stacks_projections, Embedding, Linear, ModelWeights, WeightFormat};
pub use options::{DebugSync, Df11Options, WgUse, WsUse};
