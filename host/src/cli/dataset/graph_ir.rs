//! `dataset validate|stats --format graph-ir`: an aiperf Agent Graph IR workload read, validated
//! and summarised through `dataset::graph_ir`, and the refusal of every command that would replay
//! or import one (its replay is not in this build yet).

use std::process::ExitCode;

use super::SourceArgs;
use crate::dataset::graph_ir::{self, GraphCorpus, GraphStats};
use crate::dataset::{DatasetError, TokenCounter};

/// The refusal of `what` (a command) on a graph-ir workload.
pub(crate) fn not_replayable(what: &str) -> DatasetError {
    DatasetError::Argument(format!(
        "--format graph-ir: {what} needs a session-trace corpus, and a graph-ir workload is none: \
         `agentx-host run --format graph-ir FILE` replays it, `agentx-host dataset validate \
         --format graph-ir FILE` checks it and `agentx-host dataset stats --format graph-ir FILE` \
         summarises it"
    ))
}

/// The workload of `source`: a local file, with no session-trace selection flags.
fn load(source: &SourceArgs) -> Result<GraphCorpus, DatasetError> {
    for (flag, given) in [
        (
            "--num-dataset-entries",
            source.num_dataset_entries.is_some(),
        ),
        ("--max-context-length", source.max_context_length.is_some()),
    ] {
        if given {
            return Err(DatasetError::Argument(format!(
                "{flag} selects session traces; a graph-ir workload is read whole: drop the flag"
            )));
        }
    }
    graph_ir::load(std::path::Path::new(&source.source), source.strict)
}

/// `dataset validate --format graph-ir`: exit 0 with the warnings, or 2 with every finding.
pub(super) fn validate(source: &SourceArgs, json: bool) -> anyhow::Result<ExitCode> {
    let corpus = match load(source) {
        Ok(corpus) => corpus,
        Err(DatasetError::GraphRefused { path, findings }) if json => {
            let doc = serde_json::json!({
                "source": path.display().to_string(),
                "format": "graph-ir",
                "valid": false,
                "findings": findings,
            });
            outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            return Ok(ExitCode::from(2));
        }
        Err(error) => return Err(error.into()),
    };
    let nodes: usize = corpus.graphs().iter().map(|g| g.nodes.len()).sum();
    if json {
        let doc = serde_json::json!({
            "source": corpus.source().display().to_string(),
            "format": "graph-ir",
            "valid": true,
            "traces": corpus.traces().len(),
            "nodes": nodes,
            "findings": corpus.warnings(),
        });
        outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "valid graph-ir workload: {} traces, {} graph(s), {nodes} nodes, {} warning(s)",
        corpus.traces().len(),
        corpus.graphs().len(),
        corpus.warnings().len()
    );
    for warning in corpus.warnings() {
        outln!("  {warning}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `dataset stats --format graph-ir`, in `--block-size` blocks (64 by default) under the word
/// model.
pub(super) fn stats(source: &SourceArgs, json: bool) -> Result<(), DatasetError> {
    if source.block_size == Some(0) {
        return Err(DatasetError::Argument(
            "--block-size must be at least 1 (tokens per hash block)".into(),
        ));
    }
    let corpus = load(source)?;
    let block_size = source.block_size.unwrap_or(graph_ir::DEFAULT_BLOCK_SIZE);
    let figures = graph_ir::stats(&corpus, &TokenCounter::Words, block_size);
    if json {
        let mut doc = serde_json::to_value(&figures).unwrap_or_default();
        doc["format"] = "graph-ir".into();
        doc["findings"] = serde_json::to_value(corpus.warnings()).unwrap_or_default();
        outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    print(&figures);
    for warning in corpus.warnings() {
        outln!("  {warning}");
    }
    Ok(())
}

/// The human lines of [`GraphStats`].
fn print(figures: &GraphStats) {
    let anchors = &figures.in_edges;
    outln!(
        "format                      graph-ir (block size {}, word model)",
        figures.block_size
    );
    outln!("traces                      {}", figures.traces);
    outln!("graphs                      {}", figures.graphs);
    outln!("nodes                       {}", figures.nodes);
    outln!("edges                       {}", figures.edges);
    outln!(
        "in-edges by anchor          start {}, completion {}, dispatch {}, first-token {}",
        anchors.start,
        anchors.completion,
        anchors.dispatch,
        anchors.first_token
    );
    outln!("fan-in nodes                {}", figures.fan_in_nodes);
    outln!(
        "channels                    overwrite {}, add_messages {}",
        figures.channels.overwrite,
        figures.channels.add_messages
    );
    outln!(
        "recorded starts             {}",
        if figures.timestamped {
            "every node"
        } else {
            "none"
        }
    );
    outln!(
        "prompt tokens               {} ({} dynamic, by the producers' max_tokens)",
        figures.prompt_tokens,
        figures.dynamic_tokens
    );
    outln!(
        "theoretical hit rate        {:.2}% ({} of {} blocks seen earlier in their trace)",
        100.0 * figures.theoretical_hit_rate,
        figures.hit_blocks,
        figures.blocks
    );
    outln!("warnings                    {}", figures.warnings);
}
