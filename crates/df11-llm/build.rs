//! With the `cuda` feature, compiles the models' step kernels (`kernels/llm_ops.cu`,
//! `decode_step.cu`, `prefill_attention.cu`) to fatbins embedded by `src/ops/*.rs`
//! (`kernels/build/nvcc.rs` says how).

#[path = "../../kernels/build/nvcc.rs"]
mod nvcc;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../../kernels/build/nvcc.rs");
    let Some(build) = nvcc::Build::from_env() else {
        return;
    };
    build.compile_all(
        &["llm_ops", "decode_step", "prefill_attention"],
        &["llm_common.cuh"],
    );
}
