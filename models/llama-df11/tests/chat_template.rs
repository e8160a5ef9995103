//! The Jinja constructs of Llama 3.1's template (`strftime_now`, `messages[1:]`, `|trim`,
//! header tokens) render as Jinja2 does (the fixture's own template is checked against
//! transformers by the shared tests).

use df11_llm::{ChatTemplate, Message};

/// The structure of Llama 3.1's template (tools left out): a date from `strftime_now`, a system
/// block always present, `|trim`, `messages[1:]`, header tokens.
const LLAMA31_STYLE: &str = "{{- bos_token }}\n\
{%- if not date_string is defined %}\n\
    {%- if strftime_now is defined %}\n\
        {%- set date_string = strftime_now(\"%d %b %Y\") %}\n\
    {%- else %}\n\
        {%- set date_string = \"26 Jul 2024\" %}\n\
    {%- endif %}\n\
{%- endif %}\n\
{%- if messages[0]['role'] == 'system' %}\n\
    {%- set system_message = messages[0]['content']|trim %}\n\
    {%- set messages = messages[1:] %}\n\
{%- else %}\n\
    {%- set system_message = \"\" %}\n\
{%- endif %}\n\
{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n\
{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n\
{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n\
{{- system_message }}\n\
{{- \"<|eot_id|>\" }}\n\
{%- for message in messages %}\n\
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n\
{%- endfor %}\n\
{%- if add_generation_prompt %}\n\
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n\
{%- endif %}\n";

#[test]
fn llama31_template_constructs_render_like_jinja2() {
    let t = ChatTemplate::new(
        LLAMA31_STYLE.into(),
        "<|begin_of_text|>".into(),
        String::new(),
    )
    .unwrap();
    let date = ChatTemplate::new(
        "{{ strftime_now('%d %b %Y') }}".into(),
        String::new(),
        String::new(),
    )
    .unwrap()
    .render(&[], false, None)
    .unwrap();
    // e.g. "05 Mar 2026"
    let parts: Vec<&str> = date.split(' ').collect();
    assert!(
        parts.len() == 3 && parts[0].len() == 2 && parts[1].len() == 3 && parts[2].len() == 4,
        "{date}"
    );
    let header = |role: &str| format!("<|start_header_id|>{role}<|end_header_id|>\n\n");
    let chat = [Message::system("  Be brief. "), Message::user("Hi there\n")];
    let want = format!(
        "<|begin_of_text|>{}Cutting Knowledge Date: December 2023\nToday Date: {date}\n\nBe brief.<|eot_id|>{}Hi there<|eot_id|>{}",
        header("system"),
        header("user"),
        header("assistant")
    );
    assert_eq!(t.render(&chat, true, None).unwrap(), want);
    // Without a system message the block is still there, empty.
    let got = t.render(&chat[1..], false, None).unwrap();
    assert!(
        got.contains(&format!(
            "{date}\n\n<|eot_id|>{}Hi there<|eot_id|>",
            header("user")
        )),
        "{got}"
    );
    assert!(!got.ends_with(&header("assistant")));
}
