//! The candle side: modules whose weights stay DF11-compressed on a device.
//!
//! - [`group`]: [`group::Df11Group`], one unit on a device (CPU or CUDA) and the op that
//!   decodes it.
//! - `device_form`, `decode_ops`: a unit's bytes on its device and the ops that decode them.
//! - `offload`: offloaded units, kept in host memory and staged onto the device around use.
//! - [`linear`]: [`linear::Df11Linear`] and [`linear::Df11Embedding`], one member of a unit as a
//!   candle module.
//! - [`weights`]: [`weights::ModelWeights`], a model's weights from a DF11 folder (compressed)
//!   or a plain BF16 folder (dense) behind one interface, so a model is written once; its
//!   `layers` child: the [`weights::Linear`] and [`weights::Embedding`] it hands out.
//! - [`backend`]: [`backend::Df11Backend`], a `VarBuilder` backend for unmodified
//!   candle-transformers models (weights decoded at load).

pub mod backend;
pub(crate) mod decode_ops;
pub(crate) mod device_form;
pub mod group;
pub mod linear;
pub(crate) mod offload;
pub mod weights;
