//! The Jinja constructs of the full DeepSeek-R1-Distill template (namespaces, `split`, `is none`,
//! a system prompt, reasoning stripped from earlier answers) render as Jinja2 does (the fixture's
//! own template is checked against transformers by the shared tests).

use df11_llm::testing::model_dir;
use df11_llm::{encode, load_tokenizer, ChatTemplate, Message};

/// The structure of DeepSeek-R1-Distill's template (tool calls left out).
const DEEPSEEK_STYLE: &str = "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}\
{% set ns = namespace(is_tool=false, system_prompt='') %}\
{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}\
{{ bos_token }}{{ ns.system_prompt }}\
{%- for message in messages %}\
{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{ '<｜User｜>' + message['content'] }}{%- endif %}\
{%- if message['role'] == 'assistant' and message['content'] is not none %}\
{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}\
{{ '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}\
{%- endif %}\
{%- endfor -%}\
{% if add_generation_prompt and not ns.is_tool %}{{ '<｜Assistant｜><think>\\n' }}{% endif %}";

#[test]
fn deepseek_template_constructs_render_like_jinja2() {
    let dir = model_dir("qwen2-tiny", "df11");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap())
            .unwrap();
    let bos = config["bos_token"].as_str().unwrap().to_string();
    let eos = config["eos_token"].as_str().unwrap().to_string();
    let t = ChatTemplate::new(DEEPSEEK_STYLE.into(), bos, eos).unwrap();
    let chat = [
        Message::system("Be brief."),
        Message::user("2+2?"),
        Message {
            role: "assistant".into(),
            content: "<think>\nsmall sum\n</think>\n\n4".into(),
        },
        Message::user("And 3+3?"),
    ];
    let want =
        "<｜begin▁of▁sentence｜>Be brief.<｜User｜>2+2?<｜Assistant｜>\n\n4<｜end▁of▁sentence｜>\
                <｜User｜>And 3+3?<｜Assistant｜><think>\n";
    assert_eq!(t.render(&chat, true, None).unwrap(), want);
    let no_prompt = t.render(&chat, false, None).unwrap();
    assert_eq!(
        no_prompt,
        want.strip_suffix("<｜Assistant｜><think>\n").unwrap()
    );
    // Special tokens encode to single ids: BOS, User, Assistant, EOS.
    let tokenizer = load_tokenizer(&dir).unwrap();
    let got = encode(&tokenizer, want, false).unwrap();
    for id in [507, 508, 509, 506] {
        assert!(got.contains(&id), "{id} missing from {got:?}");
    }
    assert_eq!(got[0], 507);
    assert_eq!(got.iter().filter(|&&i| i == 507).count(), 1);
}
