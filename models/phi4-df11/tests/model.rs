//! The shared model tests (`df11_llm::testing`) on the Phi-4 fixture (fused `qkv_proj` and
//! `gate_up_proj`, `o_proj` first in the layer unit).

df11_llm::model_tests!(
    phi4_df11::Phi4Arch,
    "phi4-df11",
    ["phi4-tiny"],
    // The options of the tests: this binary's DF11_* variables (the GPU suite's variants).
    |name| std::env::var(name).ok()
);
