//! The Huffman device form: the unit's exponent stream as the DF11 file holds it (the block
//! kernel `kernels/df11_decode.cu` decodes whole blocks from it), plus, where the stream allows,
//! the segment index ([`segments`]) the kernels of `kernels` start decoding from at any 64th
//! weight (a fused matrix-vector product, a decode of any element range).
//!
//! The block kernel trusts only metadata the host validated (`UnitLayout`); whatever the
//! bitstream and gaps hold, it stays in bounds and reports inconsistencies in a status word,
//! which `HuffmanBuffers::check_status` reads.

#[cfg(feature = "cuda")]
pub(crate) mod kernels;
pub mod segments;

#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
pub(crate) use device::{HuffmanArrays, HuffmanBuffers};
