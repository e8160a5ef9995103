//! The path choice above the device forms: which kernel a product takes for its rows, columns,
//! device and options ([`matmul`]: the fused kernels of the weight's form, or a decode into a
//! BF16 buffer and cuBLAS), and what the kernels take (`limits`: rows a launch, shapes).

pub(crate) mod limits;
pub mod matmul;
