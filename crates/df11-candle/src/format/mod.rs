//! The DF11 format: what a model folder holds and the checks that make it safe to decode.
//!
//! - [`config`]: `config.json` and its `dfloat11_config` block (`pattern_dict`, versions).
//! - [`safetensors_index`]: every `*.safetensors` of a folder, memory-mapped and indexed by name.
//! - `unit`: one compressed unit's six tensors and their validation ([`unit::UnitLayout`]).
//! - [`model`]: a folder opened as units matched to `pattern_dict`, every unit validated before
//!   anything is decoded ([`model::Df11Model`]).
//! - [`patterns`]: the built-in `pattern_dict`s of the architectures the Hub releases cover.
//!
//! Nothing here decodes: that is [`crate::codec`] (CPU) and [`crate::cuda`] (GPU).

pub mod config;
pub mod model;
pub mod patterns;
pub mod safetensors_index;
pub mod unit;
