//! With the `cuda` feature, compiles the format's kernels (`kernels/*.cu`: decode, pack, the
//! fused products) to fatbins embedded by `src/cuda/*.rs` (`kernels/build/nvcc.rs` says how).

#[path = "../../kernels/build/nvcc.rs"]
mod nvcc;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../../kernels/build/nvcc.rs");
    let Some(build) = nvcc::Build::from_env() else {
        return;
    };
    // The PTX target, for the host (`cuda/runtime/pdl.rs`: `griddepcontrol` exists only from
    // compute 9.0; the step kernels of df11-llm are built for the same target).
    println!("cargo:rustc-env=DF11_PTX_COMPUTE_CAP={}", build.cap);
    let mut names = vec![
        "df11_decode",
        "df11_fused",
        "df11_packed",
        "df11_pack",
        "df11_tc",
        "df11_tc_stream",
    ];
    // The panel, warpgroup and warp-specialized kernels: only with the `experimental-kernels`
    // feature.
    if std::env::var_os("CARGO_FEATURE_EXPERIMENTAL_KERNELS").is_some() {
        names.extend(["df11_tc_panel", "df11_tc_wg", "df11_ws_gemm"]);
    }
    let headers = [
        "df11_escape_table.cuh",
        "df11_packed.cuh",
        "df11_tc.cuh",
        "df11_tc_stream.cuh",
        "df11_tc_wg.cuh",
    ];
    build.compile_all(&names, &headers);
}
