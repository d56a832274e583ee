//! `--extra-inputs`: the words of the flag as request-body fields, read as aiperf reads them.

use anyhow::{anyhow, bail};

use crate::client::RequestBody;

/// `--extra-inputs` as body fields, read as aiperf reads them (`parse_str_or_dict_as_tuple_list`):
/// a word that starts with `{` is a JSON object of fields; otherwise comma-separated `key:value`
/// pairs whose values are typed by [`coerce`]. One extension: a value that starts with `{` or `[`
/// and parses as JSON is that JSON (aiperf would send it as a string), and its commas do not split.
pub(crate) fn extra_inputs(
    words: &[String],
    endpoint_type: &str,
) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    let mut extra: Vec<(String, serde_json::Value)> = Vec::new();
    let mut add = |key: &str, value: serde_json::Value, given: &str| -> anyhow::Result<()> {
        let key = key.trim();
        if key.is_empty() {
            bail!("--extra-inputs {given:?} has an empty key");
        }
        if RequestBody::RESERVED.contains(&key) {
            bail!(
                "--extra-inputs {key}:... would replace a field agentx sets itself ({}); remove it",
                RequestBody::RESERVED.join(", ")
            );
        }
        let own = crate::client::EndpointType::parse(endpoint_type)
            .map_or(&[][..], crate::client::EndpointType::own_fields);
        if own.contains(&key) {
            bail!(
                "--extra-inputs {key}:... would replace a field agentx writes itself under \
                 --endpoint-type {endpoint_type} ({}: the trace's prompt and output limit, and \
                 nothing kept on the server); remove it",
                own.join(", ")
            );
        }
        extra.retain(|(old, _)| old != key);
        extra.push((key.to_string(), value));
        Ok(())
    };
    for word in words {
        let trimmed = word.trim();
        if trimmed.starts_with('{') {
            let obj: serde_json::Map<String, serde_json::Value> = serde_json::from_str(trimmed)
                .map_err(|e| anyhow!("--extra-inputs {trimmed:?} starts with '{{' but is not a JSON object ({e}); pass a JSON object of fields or key:value pairs"))?;
            for (key, value) in obj {
                add(&key, value, trimmed)?;
            }
            continue;
        }
        let mut rest = trimmed;
        while !rest.is_empty() {
            let Some((key, after)) = rest.split_once(':') else {
                bail!(
                    "--extra-inputs {word:?}: {rest:?} is not KEY:VALUE; pass e.g. --extra-inputs ignore_eos:true temperature:0.6"
                );
            };
            let after = after.trim_start();
            if after.starts_with(['{', '[']) {
                let mut values =
                    serde_json::Deserializer::from_str(after).into_iter::<serde_json::Value>();
                if let Some(Ok(value)) = values.next() {
                    let used = values.byte_offset();
                    add(key, value, word)?;
                    rest = after[used..].trim_start().trim_start_matches(',');
                    continue;
                }
            }
            let (value, next) = after.split_once(',').unwrap_or((after, ""));
            add(key, coerce(value.trim()), word)?;
            rest = next;
        }
    }
    Ok(extra)
}

/// A `key:value` value typed as aiperf's `coerce_value` types it: `true`/`false` (any case),
/// `none`/`null`, integers without a leading zero, decimals with one `.`; else the text.
fn coerce(text: &str) -> serde_json::Value {
    use serde_json::Value;
    let lower = text.to_ascii_lowercase();
    match lower.as_str() {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        "none" | "null" => return Value::Null,
        _ => {}
    }
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    if digits(unsigned) && (!unsigned.starts_with('0') || unsigned == "0") {
        if let Ok(integer) = text.parse::<i64>() {
            return Value::from(integer);
        }
    }
    if text.matches('.').count() == 1 && digits(&unsigned.replace('.', "")) {
        if let Some(number) = text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            return Value::Number(number);
        }
    }
    Value::String(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::run_args::RunArgs;

    fn parsed(words: &[&str]) -> anyhow::Result<serde_json::Value> {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let mut argv = vec!["run", "--extra-inputs"];
        argv.extend(words);
        let a = Cli::try_parse_from(argv)?.run;
        Ok(serde_json::Value::Object(
            extra_inputs(&a.extra_inputs, &a.endpoint_type)?
                .into_iter()
                .collect(),
        ))
    }

    #[test]
    fn extra_inputs_are_read_as_aiperf_reads_them() {
        // InferenceX's Qwen3.5 blob: one JSON object of fields.
        let blob = r#"{"chat_template_kwargs":{"enable_thinking":true},"presence_penalty":0,"temperature":0.6,"top_k":20,"top_p":0.95}"#;
        assert_eq!(
            parsed(&[blob]).unwrap(),
            serde_json::json!({"chat_template_kwargs": {"enable_thinking": true}, "presence_penalty": 0, "temperature": 0.6, "top_k": 20, "top_p": 0.95})
        );
        // Several words after one flag, commas, aiperf's typing, a JSON value, a later key winning.
        assert_eq!(
            parsed(&[
                "thinking:true",
                "a:1,b:0.5,c:007",
                "d:None",
                r#"e:{"x":[1,2]},f:x"#,
                "a:2"
            ])
            .unwrap(),
            serde_json::json!({"thinking": true, "b": 0.5, "c": "007", "d": null, "e": {"x": [1, 2]}, "f": "x", "a": 2})
        );
        for bad in ["nocolon", ":1", "{not json", "model:x"] {
            let e = parsed(&[bad]).unwrap_err().to_string();
            assert!(e.contains("--extra-inputs"), "{bad}: {e}");
        }
    }
}
