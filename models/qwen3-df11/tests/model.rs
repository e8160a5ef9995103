//! The shared model tests (`df11_llm::testing`) on both Qwen3 fixtures: untied (`lm_head`,
//! `embed_tokens` and the layers compressed) and tied (layers only).

df11_llm::model_tests!(
    qwen3_df11::Qwen3Arch,
    "qwen3-df11",
    ["qwen3-tiny", "qwen3-tied-tiny"],
    // The options of the tests: this binary's DF11_* variables (the GPU suite's variants).
    |name| std::env::var(name).ok()
);
