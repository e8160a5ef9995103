//! The shared model tests (`df11_llm::testing`) on the Gemma 3 fixture (the transformers 4.50
//! multimodal layout, `(1 + w)` norms, sliding-window layers, GELU-tanh, tied embeddings).

df11_llm::model_tests!(
    gemma3_df11::Gemma3Arch,
    "gemma3-df11",
    ["gemma3-tiny"],
    // The options of the tests: this binary's DF11_* variables (the GPU suite's variants).
    |name| std::env::var(name).ok()
);
