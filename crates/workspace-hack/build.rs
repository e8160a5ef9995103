//! Empty: a build script makes Cargo build this crate's `[build-dependencies]` (the features
//! they turn on are the point, see `Cargo.toml`).
fn main() {}
