//! A unit's device forms, one folder each, every one a lossless re-arrangement of what the DF11
//! files hold, and what they share:
//!
//! - [`huffman`]: the exponent stream as in the file, decoded by the block kernel, plus the
//!   segment index its fused and range kernels start from;
//! - [`packed`]: fixed 3-bit exponent codes plus an escape list (the default where it fits),
//!   with the tensor-core products and the tile order;
//! - `dense`: the BF16 twins, the same products over a dense BF16 matrix with the same
//!   summation order (a BF16 model's path, and a DF11 matrix's after a decode where no fused
//!   kernel of its form takes it).
//!
//! [`DeviceForm`] is what a DF11 form does on the GPU (decode a range, multiply rows through a
//! fused kernel); `unit::CudaUnit` holds a unit's form and dispatches to it. Shared by the
//! forms: `exponent_walk` (the checked CPU decode they are built from) and, with `cuda`,
//! `upload` and `staged_copy` (host arrays to the device at load), `locked_host` (page-locked
//! host memory for offloaded units).

#[cfg(feature = "cuda")]
pub(crate) mod dense;
pub(crate) mod exponent_walk;
pub mod huffman;
#[cfg(feature = "cuda")]
pub(crate) mod locked_host;
pub mod packed;
#[cfg(feature = "cuda")]
pub(crate) mod staged_copy;
#[cfg(feature = "cuda")]
pub(crate) mod unit;
#[cfg(feature = "cuda")]
pub(crate) mod upload;

#[cfg(feature = "cuda")]
mod form;
#[cfg(feature = "cuda")]
pub(crate) use form::{DeviceForm, Matrix};
