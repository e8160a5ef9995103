//! The shared model tests (`df11_llm::testing`) on the Qwen2 fixture (q/k/v biases kept as plain
//! BF16 beside the compressed layers; a DeepSeek-R1-Distill tokenizer and template).

df11_llm::model_tests!(
    qwen2_df11::Qwen2Arch,
    "qwen2-df11",
    ["qwen2-tiny"],
    // The options of the tests: this binary's DF11_* variables (the GPU suite's variants).
    |name| std::env::var(name).ok()
);
