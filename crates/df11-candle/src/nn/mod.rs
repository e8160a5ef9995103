//! The candle side: modules whose weights stay DF11-compressed on a device.
//!
//! - [`group`]: [`group::Df11Group`], one unit on a device (CPU or CUDA) and the op that
//!   decodes it.
//! - [`linear`]: [`linear::Df11Linear`] and [`linear::Df11Embedding`], one member of a unit as a
//!   candle module.
//! - [`weights`]: [`weights::ModelWeights`], a model's weights from a DF11 folder (compressed)
//!   or a plain BF16 folder (dense) behind one interface, so a model is written once.
//! - [`backend`]: [`backend::Df11Backend`], a `VarBuilder` backend for unmodified
//!   candle-transformers models (weights decoded at load).

pub mod backend;
pub mod group;
pub mod linear;
pub mod weights;
