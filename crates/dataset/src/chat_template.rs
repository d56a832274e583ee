//! A model's chat template (`--apply-chat-template`), read offline from its Hugging Face files and
//! rendered over a request's messages, so the client counts a prompt as the server tokenizes it:
//! role headers, end-of-turn markers and the generation prompt included.
//!
//! The template is found beside the resolved `tokenizer.json` (a directory given to `--tokenizer`,
//! or the model's snapshot in the Hugging Face cache): `chat_template.jinja` if present (newer
//! `transformers` save it there and prefer it), else the `chat_template` of
//! `tokenizer_config.json` (a string, or a list of named templates of which `default` is taken).
//! Rendering follows `transformers`' `apply_chat_template(messages, add_generation_prompt=True)`:
//! Jinja with `trim_blocks` and `lstrip_blocks`, Python's string methods (`minijinja-contrib`'s
//! pycompat), `bos_token`/`eos_token` from the config, `raise_exception` and `strftime_now`. The
//! rendered text is then counted with special tokens not added, as `transformers` tokenizes it.
//!
//! A missing template is an error naming the files looked at: the flag exists so that the client's
//! ISL matches the server's `prompt_tokens`, and counting bare message text instead would give
//! numbers that look right and are not.

use std::path::{Path, PathBuf};

use minijinja::{Environment, Error, ErrorKind, Value};
use serde_json::Value as Json;

/// The name the template is kept under in its environment.
const NAME: &str = "chat_template";

/// A template that could not be found, read or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    #[error(
        "--apply-chat-template: no chat template beside {tokenizer} (looked for {looked}); fetch \
         the model's tokenizer_config.json (`hf download ORG/NAME tokenizer_config.json`) into that \
         directory, or drop --apply-chat-template to count the messages' text"
    )]
    /// No template beside the tokenizer.
    NotFound {
        /// The `tokenizer.json` the template was looked for beside.
        tokenizer: PathBuf,
        /// The files looked for, comma-separated.
        looked: String,
    },
    #[error("--apply-chat-template: cannot read {path}: {reason}")]
    /// The template file could not be read or parsed.
    Read {
        /// The template file.
        path: PathBuf,
        /// The read or JSON error.
        reason: String,
    },
    #[error("--apply-chat-template: the chat template of {path} does not compile: {reason}")]
    /// The template does not compile.
    Compile {
        /// The template file.
        path: PathBuf,
        /// The template engine's error.
        reason: String,
    },
    #[error("the chat template of {path} cannot render this request: {reason}")]
    /// The template fails on a request's messages.
    Render {
        /// The template file.
        path: PathBuf,
        /// The template engine's error.
        reason: String,
    },
}

/// A compiled chat template with its special tokens.
pub struct ChatTemplate {
    env: Environment<'static>,
    path: PathBuf,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("path", &self.path)
            .finish()
    }
}

fn read(path: &Path) -> Result<String, ChatTemplateError> {
    std::fs::read_to_string(path).map_err(|e| ChatTemplateError::Read {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// A special token of `tokenizer_config.json`: a string, or an added token's `{"content": ..}`.
fn special(config: &Json, key: &str) -> String {
    match config.get(key) {
        Some(Json::String(s)) => s.clone(),
        Some(Json::Object(o)) => o
            .get("content")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

/// The template text of a `chat_template` entry: a string, or the `default` of a list of
/// `{"name", "template"}` (the only one when the list has one).
fn template_of(entry: &Json) -> Option<String> {
    match entry {
        Json::String(s) => Some(s.clone()),
        Json::Array(list) => {
            let named = |n: &str| {
                list.iter()
                    .find(|t| t.get("name").and_then(Json::as_str) == Some(n))
            };
            let t = named("default").or(if list.len() == 1 { list.first() } else { None })?;
            t.get("template").and_then(Json::as_str).map(str::to_owned)
        }
        _ => None,
    }
}

impl ChatTemplate {
    /// The template of the model whose `tokenizer.json` is `tokenizer`.
    pub fn beside(tokenizer: &Path) -> Result<ChatTemplate, ChatTemplateError> {
        let dir = tokenizer.parent().unwrap_or(Path::new("."));
        let jinja = dir.join("chat_template.jinja");
        let config_path = dir.join("tokenizer_config.json");
        let config: Json = if config_path.is_file() {
            serde_json::from_str(&read(&config_path)?).map_err(|e| ChatTemplateError::Read {
                path: config_path.clone(),
                reason: format!("not JSON: {e}"),
            })?
        } else {
            Json::Null
        };
        let (source, path) = if jinja.is_file() {
            (read(&jinja)?, jinja)
        } else {
            match config.get("chat_template").and_then(template_of) {
                Some(t) => (t, config_path),
                None => {
                    return Err(ChatTemplateError::NotFound {
                        tokenizer: tokenizer.to_owned(),
                        looked: format!(
                            "{} and the chat_template of {}",
                            jinja.display(),
                            config_path.display()
                        ),
                    })
                }
            }
        };
        ChatTemplate::compile(
            source,
            path,
            special(&config, "bos_token"),
            special(&config, "eos_token"),
        )
    }

    /// Compiles `source` (read from `path`, named in errors) with its special tokens.
    pub fn compile(
        source: String,
        path: PathBuf,
        bos_token: String,
        eos_token: String,
    ) -> Result<ChatTemplate, ChatTemplateError> {
        let mut env = Environment::new();
        let mut syntax = minijinja::syntax::SyntaxConfig::builder();
        syntax.trim_blocks(true).lstrip_blocks(true);
        let compile_err = |e: Error| ChatTemplateError::Compile {
            path: path.clone(),
            reason: e.to_string(),
        };
        env.set_syntax(syntax.build().map_err(compile_err)?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |fmt: String| -> String {
            chrono::Local::now().format(&fmt).to_string()
        });
        env.add_template_owned(NAME, source).map_err(compile_err)?;
        Ok(ChatTemplate {
            env,
            path,
            bos_token,
            eos_token,
        })
    }

    /// Where the template was read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The prompt the server makes of `messages` (a JSON array of chat messages), with the
    /// generation prompt.
    pub fn render(&self, messages: &Json) -> Result<String, ChatTemplateError> {
        let ctx = minijinja::context! {
            messages => Value::from(minijinja::value::Serde(messages)),
            add_generation_prompt => true,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        let render_err = |e: Error| ChatTemplateError::Render {
            path: self.path.clone(),
            reason: e.to_string(),
        };
        self.env
            .get_template(NAME)
            .map_err(render_err)?
            .render(ctx)
            .map_err(render_err)
    }

    /// [`ChatTemplate::render`] of a messages array given as its JSON text in pieces (a request
    /// body's messages, as the prompt synthesis writes them: the array without its closing `]`).
    pub(crate) fn render_parts(&self, parts: &[bytes::Bytes]) -> Result<String, ChatTemplateError> {
        let mut json = Vec::with_capacity(parts.iter().map(bytes::Bytes::len).sum::<usize>() + 1);
        for p in parts {
            json.extend_from_slice(p);
        }
        json.push(b']');
        let messages: Json =
            serde_json::from_slice(&json).map_err(|e| ChatTemplateError::Render {
                path: self.path.clone(),
                reason: format!("the messages are not a JSON array: {e}"),
            })?;
        self.render(&messages)
    }
}

/// A chat template with the tokenizer that counts what it renders: the ISL of a request under
/// `--apply-chat-template`.
#[derive(Debug, Clone)]
pub struct TemplateCounter {
    /// The compiled template, shared by the runs of one process.
    pub template: std::sync::Arc<ChatTemplate>,
    /// The tokenizer that counts the rendered prompt.
    pub counter: super::TokenCounter,
}

impl TemplateCounter {
    /// The model's template and tokenizer, from its `tokenizer.json` at `tokenizer`; `counter` is
    /// that file already loaded, if it is.
    pub fn load(
        tokenizer: &Path,
        counter: Option<super::TokenCounter>,
    ) -> Result<TemplateCounter, ChatTemplateError> {
        let template = ChatTemplate::beside(tokenizer)?;
        let counter = match counter {
            Some(c @ super::TokenCounter::Hf(_)) => c,
            _ => super::TokenCounter::Hf(std::sync::Arc::new(
                tokenizers::Tokenizer::from_file(tokenizer).map_err(|e| {
                    ChatTemplateError::Read {
                        path: tokenizer.to_owned(),
                        reason: e.to_string(),
                    }
                })?,
            )),
        };
        Ok(TemplateCounter {
            template: std::sync::Arc::new(template),
            counter,
        })
    }

    /// The tokens of the rendered prompt of a messages array in pieces (as
    /// `ChatTemplate::render_parts` takes it).
    pub fn count_parts(&self, parts: &[bytes::Bytes]) -> Result<u64, ChatTemplateError> {
        Ok(self.counter.count(&self.template.render_parts(parts)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(src: &str) -> ChatTemplate {
        ChatTemplate::compile(src.into(), "t.jinja".into(), "<s>".into(), "</s>".into()).unwrap()
    }

    fn qwen() -> TemplateCounter {
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("fixtures/chat-template/qwen2.5");
        TemplateCounter::load(&dir.join("tokenizer.json"), None).unwrap()
    }

    /// The Qwen2.5 (ChatML) template of the fixture, as `transformers`' `apply_chat_template`
    /// renders it, and its count. The fixture's tokenizer makes each whitespace-separated word one
    /// token and each of `<|im_start|>`, `<|im_end|>` one special token, so counts check by hand:
    /// `<|im_start|>` 1, `system You are a helpful assistant.` 6, `<|im_end|>` 1, `<|im_start|>`
    /// 1, `user Hello there` 3, `<|im_end|>` 1, `<|im_start|>` 1, `assistant` 1: 15 (the same as
    /// `transformers` 5.24 counts with this tokenizer).
    #[test]
    fn a_chatml_prompt_renders_and_counts_as_transformers_does() {
        let q = qwen();
        let msgs = json!([
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Hello there"}
        ]);
        assert_eq!(
            q.template.render(&msgs).unwrap(),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"
        );
        let parts = |v: &Json| {
            let mut s = v.to_string();
            s.pop();
            let (a, b) = s.split_at(s.len() / 2);
            vec![
                bytes::Bytes::from(a.to_owned()),
                bytes::Bytes::from(b.to_owned()),
            ]
        };
        assert_eq!(q.count_parts(&parts(&msgs)).unwrap(), 15);
        // No system message: the template's own (12 words), then 6 + 4 + 5 + 2 for the turns and
        // the generation prompt.
        let msgs = json!([
            {"role": "user", "content": "Fix the code"},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "and this"}
        ]);
        assert_eq!(q.count_parts(&parts(&msgs)).unwrap(), 32);
        // The bare text of the same messages is 6 tokens: the template adds 26.
        assert_eq!(q.counter.count("Fix the code Done. and this"), 6);
    }

    #[test]
    fn python_string_methods_and_the_special_tokens_render() {
        let t = template(
            "{{ bos_token }}{% for m in messages %}{% if m.content.startswith('x') %}{{ m.content.split('-')[1].strip() }}{% endif %}\n{% endfor %}{{ eos_token }}",
        );
        let out = t
            .render(&json!([{"role": "user", "content": "x- kept "}]))
            .unwrap();
        // trim_blocks, as transformers sets it: the newline after `{% endif %}` goes.
        assert_eq!(out, "<s>kept</s>");
    }

    #[test]
    fn raise_exception_is_a_render_error_naming_the_template() {
        let t = template("{{ raise_exception('only user and assistant roles') }}");
        let e = t.render(&json!([])).unwrap_err().to_string();
        assert!(
            e.contains("only user and assistant roles") && e.contains("t.jinja"),
            "{e}"
        );
    }

    #[test]
    fn a_template_list_gives_its_default() {
        let list =
            json!([{"name": "tool_use", "template": "a"}, {"name": "default", "template": "b"}]);
        assert_eq!(template_of(&list).as_deref(), Some("b"));
        assert_eq!(template_of(&json!(null)), None);
    }

    #[test]
    fn no_template_is_an_error_naming_where_it_looked() {
        let dir = tempfile::tempdir().unwrap();
        let tok = dir.path().join("tokenizer.json");
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            "{\"bos_token\": null}",
        )
        .unwrap();
        let e = ChatTemplate::beside(&tok).unwrap_err().to_string();
        assert!(
            e.contains("chat_template.jinja")
                && e.contains("tokenizer_config.json")
                && e.contains("hf download"),
            "{e}"
        );
    }
}
