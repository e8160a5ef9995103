//! The CPU codec: Huffman tables, decoding and encoding of units, compressing and verifying
//! whole folders.
//!
//! - [`huffman`]: the exponent code and its LUTs, byte for byte as the official compressor
//!   builds them.
//! - [`decode`]: the sequential reference decoder and the block-parallel decoder (which also
//!   checks `gaps` and `output_positions`, as the GPU kernel relies on them).
//! - [`encode`]: BF16 weights to a unit's six tensors.
//! - [`compress`]: a BF16 folder to a DF11 folder in the official layout.
//! - [`verify`]: a DF11 folder against its BF16 original, byte for byte.

pub mod compress;
pub mod decode;
pub mod encode;
pub mod huffman;
pub mod verify;
