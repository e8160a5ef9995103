//! The shared model tests (`df11_llm::testing`) on the Llama fixture (llama3 RoPE scaling,
//! untied, escaped-dot `pattern_dict` keys).

df11_llm::model_tests!(
    llama_df11::LlamaArch,
    "llama-df11",
    ["llama-tiny"],
    // The options of the tests: this binary's DF11_* variables (the GPU suite's variants).
    |name| std::env::var(name).ok()
);
