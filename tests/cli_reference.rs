//! The committed command-line reference is the one the clap definitions render: `docs/cli.md`
//! (clap-markdown) and one man page per command and subcommand in `docs/man/` (clap_mangen).
//! A help text changed in `host/src/cli` (or any `Args` struct) fails here until the reference is
//! regenerated with `AGENTX_BLESS=1 cargo test --test tests cli_reference`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentx::cli::Cli;
use clap::CommandFactory;

const REGENERATE: &str = "AGENTX_BLESS=1 cargo test --test tests cli_reference";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The command tree as the binary parses it, less the `help` subcommand that clap adds.
fn command() -> clap::Command {
    Cli::command().disable_help_subcommand(true)
}

fn markdown() -> String {
    let header = format!(
        "<!-- Generated from the clap definitions (agentx::cli::Cli) by tests/cli_reference.rs; \
         do not edit. Regenerate with: {REGENERATE} -->\n\n"
    );
    let options = clap_markdown::MarkdownOptions::new()
        .title("agentx-host command-line reference".to_string())
        .show_footer(false);
    header + &clap_markdown::help_markdown_command_custom(&command(), &options)
}

/// File name -> roff text of the man page of `cmd` and of each of its (visible) subcommands.
fn man_pages(cmd: &clap::Command, pages: &mut BTreeMap<String, Vec<u8>>) {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_pages(sub, pages);
    }
    let man = clap_mangen::Man::new(cmd.clone())
        .source(concat!("agentx-host ", env!("CARGO_PKG_VERSION")))
        .manual("agentx manual");
    let mut text = Vec::new();
    man.render(&mut text).expect("render man page");
    pages.insert(man.get_filename(), text);
}

/// Compare `expected` with the committed file at `rel`; under AGENTX_BLESS rewrite it instead.
/// Returns a line for the failure report when the file is stale.
fn check(rel: &str, expected: &[u8]) -> Option<String> {
    let path = root().join(rel);
    if std::env::var_os("AGENTX_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, expected).unwrap();
        return None;
    }
    match std::fs::read(&path) {
        Ok(actual) if actual == expected => None,
        Ok(_) => Some(format!(
            "{rel} is stale: it differs from what the clap definitions render"
        )),
        Err(_) => Some(format!("{rel} is missing")),
    }
}

fn report(stale: &[String]) {
    assert!(
        stale.is_empty(),
        "the command-line reference is out of date:\n  {}\nregenerate with:\n  {REGENERATE}",
        stale.join("\n  ")
    );
}

#[test]
fn markdown_reference_is_up_to_date() {
    let stale = check("docs/cli.md", markdown().as_bytes());
    report(&stale.into_iter().collect::<Vec<String>>());
}

#[test]
fn man_pages_are_up_to_date() {
    // Built as `clap_mangen::generate_to` builds it: every subcommand then has its display name
    // (`agentx-host-run`, `agentx-host-scenario-inspect`), the page's name and title.
    let mut cmd = command();
    cmd.build();
    let mut pages = BTreeMap::new();
    man_pages(&cmd, &mut pages);
    assert!(pages.contains_key("agentx-host.1"));
    assert!(pages.contains_key("agentx-host-run.1"));
    let dir = Path::new("docs/man");
    let mut stale: Vec<String> = pages
        .iter()
        .filter_map(|(name, text)| check(dir.join(name).to_str().unwrap(), text))
        .collect();
    // A page of a command that no longer exists is stale too.
    for entry in std::fs::read_dir(root().join(dir)).into_iter().flatten() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".1") && !pages.contains_key(&name) {
            let rel = dir.join(&name);
            if std::env::var_os("AGENTX_BLESS").is_some() {
                std::fs::remove_file(root().join(&rel)).unwrap();
            } else {
                stale.push(format!(
                    "{} is stale: no such command any more",
                    rel.display()
                ));
            }
        }
    }
    report(&stale);
}
