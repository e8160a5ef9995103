//! The fused products: which path a product takes (the plan), what the kernels take, the
//! CUDA-core, tensor-core and streaming kernels' launch code (the panel and warpgroup kernels'
//! with the `experimental-kernels` feature), their BF16 twins, and the decode kernels over packed
//! exponents.

#[cfg(feature = "cuda")]
pub(crate) mod fused;
pub(crate) mod limits;
pub mod matmul;
#[cfg(feature = "cuda")]
pub(crate) mod packed_kernels;
#[cfg(feature = "cuda")]
pub(crate) mod tc;
#[cfg(feature = "experimental-kernels")]
pub(crate) mod tc_panel;
#[cfg(feature = "experimental-kernels")]
pub(crate) mod tc_wg;
#[cfg(feature = "cuda")]
pub(crate) mod twin;
