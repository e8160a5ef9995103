//! The shared model tests (`df11_llm::testing`) on the Mistral-Nemo fixture (head_dim 48 ≠
//! hidden / heads = 40; untied; escaped-dot `pattern_dict` keys).

df11_llm::model_tests!(
    mistral_nemo_df11::MistralArch,
    "mistral-nemo-df11",
    ["mistral-nemo-tiny"],
    // The options of the tests: this binary's DF11_* variables (the GPU suite's variants).
    |name| std::env::var(name).ok()
);
