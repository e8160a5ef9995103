//! Gemma 3 `config.json` files (multimodal with most fields omitted, per-layer-type
//! `rope_parameters`, unsupported settings) mapped to df11-llm's spec.

use df11_llm::{ModelConfig, ModelSpec, RopeScaling, WeightNames};
use serde_json::Value;

fn parse(json: Value) -> Result<ModelSpec, String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), json.to_string()).unwrap();
    let config = ModelConfig::open(dir.path()).unwrap();
    gemma3_df11::config::spec(&config, WeightNames::default()).map_err(|e| e.to_string())
}

fn rope_of(s: &ModelSpec, i: usize) -> (f64, RopeScaling) {
    (s.ropes[i].theta, s.ropes[i].scaling.clone())
}

#[test]
fn omitted_fields_get_transformers_defaults() {
    // The shape of gemma-3-12b-it's config.json: most text fields omitted.
    let s = parse(serde_json::json!({
        "model_type": "gemma3",
        "text_config": {
            "hidden_size": 3840, "intermediate_size": 15360, "model_type": "gemma3_text",
            "num_attention_heads": 16, "num_hidden_layers": 48, "num_key_value_heads": 8,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024
        }
    }))
    .unwrap();
    assert_eq!((s.vocab_size, s.decoder.head_dim), (262_208, 256));
    assert_eq!(s.decoder.attention_scale, 1.0 / 16.0);
    assert_eq!(rope_of(&s, 0), (1e6, RopeScaling::Linear { factor: 8.0 }));
    assert_eq!(rope_of(&s, 1), (1e4, RopeScaling::Linear { factor: 1.0 }));
    let global: Vec<usize> = (0..48).filter(|i| s.layers[*i].window.is_none()).collect();
    assert_eq!(global, [5, 11, 17, 23, 29, 35, 41, 47]);
    assert_eq!(s.layers[6].window, Some(1024));
    assert_eq!((s.layers[5].rope, s.layers[6].rope), (0, 1));
    assert!(s.tie_word_embeddings && s.scale_embedding);
    assert_eq!(s.final_softcap, None);
}

#[test]
fn layer_types_and_rope_parameters() {
    let s = parse(serde_json::json!({
        "num_hidden_layers": 3, "query_pre_attn_scalar": 168,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 5e5},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e3}
        }
    }))
    .unwrap();
    let windows: Vec<bool> = s.layers.iter().map(|l| l.window.is_some()).collect();
    assert_eq!(windows, [true, false, true]);
    assert_eq!(rope_of(&s, 0), (5e5, RopeScaling::Linear { factor: 4.0 }));
    assert_eq!(s.ropes[1].theta, 1e3);
    assert_eq!(s.decoder.attention_scale, 168f64.powf(-0.5));
}

#[test]
fn unsupported_settings_are_rejected() {
    for json in [
        serde_json::json!({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}),
        serde_json::json!({"hidden_activation": "silu"}),
        serde_json::json!({"num_key_value_heads": 3}),
        serde_json::json!({"num_hidden_layers": 2, "layer_types": ["full_attention"]}),
        serde_json::json!({"sliding_window_pattern": 0}),
    ] {
        assert!(parse(json.clone()).is_err(), "{json}");
    }
}
