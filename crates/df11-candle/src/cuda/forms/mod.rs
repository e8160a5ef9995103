//! A unit's device forms: the packed exponents and the segment index (host-built), the tile order, the device buffers and the block decode, the packed form built on the GPU, and the uploads at load.

pub(crate) mod exponent_walk;
#[cfg(feature = "cuda")]
pub(crate) mod gpu_pack;
pub mod packed;
pub mod segments;
#[cfg(feature = "cuda")]
pub(crate) mod staged_copy;
pub mod tile_order;
#[cfg(feature = "cuda")]
pub(crate) mod unit;
#[cfg(feature = "cuda")]
pub(crate) mod upload;
