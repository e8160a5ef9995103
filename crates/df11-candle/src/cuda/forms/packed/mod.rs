//! The packed device form: each member's exponents as fixed 3-bit codes plus a lane-major
//! escape list ([`pack`]: the layout and the host packing), built on the GPU at load where it
//! can be (`gpu_pack`), with its device buffers, decode and matrix-vector kernels
//! (`kernels`), the tensor-core products over it (`tc`; `tc_panel`, `tc_wg` and `ws` with the
//! `experimental-kernels` feature), and the tile order a member matrix may be stored in for them
//! ([`tile_order`]).

#[cfg(feature = "cuda")]
pub(crate) mod gpu_pack;
#[cfg(feature = "cuda")]
pub(crate) mod kernels;
pub mod pack;
#[cfg(feature = "cuda")]
pub(crate) mod tc;
#[cfg(feature = "experimental-kernels")]
pub(crate) mod tc_panel;
#[cfg(feature = "experimental-kernels")]
pub(crate) mod tc_wg;
pub mod tile_order;
#[cfg(feature = "experimental-kernels")]
pub(crate) mod ws;

pub use pack::*;
