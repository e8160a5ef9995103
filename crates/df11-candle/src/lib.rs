//! DFloat11 (DF11) for candle.
//!
//! DF11 stores BF16 weights in about 68% of their size without losing a bit: each weight's 8-bit
//! exponent is Huffman-coded, its sign and mantissa byte kept raw. This crate reads DF11 model
//! folders, validates them, decodes units on the CPU (and, with the `cuda` feature, on the GPU),
//! and compresses BF16 models into the official layout.

pub mod backend;
pub mod compress;
pub mod config;
#[cfg(feature = "cuda")]
mod cuda;
pub mod decode;
pub mod encode;
pub mod error;
pub mod group;
pub mod huffman;
pub mod linear;
pub mod model;
pub mod patterns;
pub mod safetensors_index;
pub mod synth;
pub mod unit;
pub mod verify;
pub mod weights;

pub use backend::Df11Backend;
pub use compress::{compress_model, CompressOptions, CompressProgress, CompressReport};
pub use config::{Df11Config, Pattern, PatternDict};
pub use decode::{decode_parallel, decode_sequential, DecodeTable};
pub use encode::{encode_unit, EncodedUnit};
pub use error::{Df11Error, Result, UnitDefect};
pub use group::Df11Group;
pub use linear::{Df11Embedding, Df11Linear};
pub use model::{Df11Model, Df11Unit};
pub use patterns::builtin_pattern_dict;
pub use safetensors_index::{RawTensor, SafetensorsIndex};
pub use unit::{UnitLayout, UnitTensors};
pub use verify::{verify_model, Difference, VerifyReport};
pub use weights::{Embedding, Linear, ModelWeights, WeightFormat};
