//! What agentx-harness 1.0.12 would do otherwise with a run's corpus, checked before any request
//! is sent:
//! - its CLI lays every weka trace out in 64-token blocks, whatever the trace's `block_size` says
//!   (a defect: the weka plugin default is passed where a user override belongs;
//!   docs/agentx-v1-reference.md "Block size"); agentx follows the trace, or `--trace-block-size`;
//! - it refuses some corpora this importer reads with a warning (the import warnings whose kind
//!   [`WarningKind::harness_refuses`]);
//! - it sends only the session headers its four switches build ([`routing_headers_reason`]);
//! - it sends no request of its own: under a scenario whose wire follows a reference
//!   ([`wire_follows_reference`]) the cache preflight is off unless asked for.
//!
//! Under `--scenario agentx`, the scenario that mirrors the harness's own `--scenario agentx`, a
//! corpus the harness refuses is refused the same way, with the place, the field and the fix, and a
//! block layout other than the harness CLI's is a note. Under every other scenario a corpus the
//! harness refuses is a note, and the block layout is not noted (those scenarios do not claim the
//! harness CLI's layout). Each note is logged as a warning and kept in the manifest and the run
//! summary (`dataset.harness_notes`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::bail;

use crate::dataset::format::Format;
use crate::dataset::warnings::WarningKind;
use crate::dataset::Dataset;
use crate::export::manifest::{HarnessNote, HarnessNoteKind};

/// The block size the harness CLI lays every weka trace out in (its weka plugin's
/// `default_block_size`, agentx-harness 1.0.12 `plugin/plugins.yaml`).
pub const HARNESS_CLI_BLOCK_SIZE: u32 = 64;

/// The scenario that mirrors the harness's `--scenario agentx`, under which a corpus the harness
/// refuses is refused.
pub const REFERENCE_SCENARIO: &str = "agentx";

/// The name prefix of the scenarios that mirror InferenceX's commands (`inferencex-agentx-v1`,
/// the agentx-v1 component; `inferencex-agentx-mvp`, agentx-mvp).
pub const INFERENCEX_PREFIX: &str = "inferencex-";

/// Whether the scenario named `name` (its `describe` name) sends a reference's wire request for
/// request: the harness's (the [`REFERENCE_SCENARIO`], and every component that decides every
/// setting, which the host already holds to the harness's wire for `--routing-headers` and
/// `--server-timing`) or InferenceX's (the `inferencex-*` scenarios). The request logs of such a
/// run are compared with the reference's (tests/differential.rs, tests/inferencex.rs), so the host
/// adds no request of its own to them: the cache preflight is off unless `--cache-preflight` or
/// `--require-cache` asks for it.
pub fn wire_follows_reference(name: &str, decides_settings: bool) -> bool {
    decides_settings || name == REFERENCE_SCENARIO || name.starts_with(INFERENCEX_PREFIX)
}

/// The submission-invalid reason of a `--routing-headers` profile under a component that decides
/// every setting (the harness's wire, request for request): `None` for the profiles the harness
/// can send with its `*_HTTP_X_*_FROM_CORRELATION_ID` switches (`none`, `session-id`, `smg`), the
/// reason and why for the rest.
pub fn routing_headers_reason(
    profile: &crate::client::routing::Profile,
) -> Option<(&'static str, String)> {
    use crate::client::routing::Profile;
    let why = match profile {
        Profile::None | Profile::SessionId | Profile::Smg => return None,
        Profile::Dynamo => "agentx-harness 1.0.12 sends no X-Dynamo-Session-Final".to_string(),
        other => format!("agentx-harness 1.0.12 cannot send the {other} headers"),
    };
    Some(("routing_headers_not_harness", why))
}

/// The submission-invalid reason of `--server-timing` under a component that decides every
/// setting: the harness sends no `nvext.extra_fields`.
pub const SERVER_TIMING_REASON: &str = "server_timing_not_harness";

/// The notes of `ds` replayed by `scenario`, each logged; an error when `scenario` is the reference
/// one and the harness refuses the corpus.
pub fn notes(ds: &Dataset, scenario: &str) -> anyhow::Result<Vec<HarnessNote>> {
    let reference = scenario == REFERENCE_SCENARIO;
    let spec = ds.corpus_format();
    let mut out = Vec::new();
    if let Some(refused) = refusal(ds) {
        if reference {
            bail!(
                "agentx-harness 1.0.12 refuses this corpus, and so does --scenario {REFERENCE_SCENARIO}, \
                 which mirrors it:{}\n(`agentx-host dataset stats {}` lists every place; another \
                 scenario, e.g. --scenario agentx-v1, replays the corpus with these as warnings)",
                refused.places,
                ds.source_path().display()
            );
        }
        out.push(HarnessNote {
            kind: HarnessNoteKind::Refused,
            count: refused.count,
            message: format!(
                "agentx-harness 1.0.12 (and --scenario {REFERENCE_SCENARIO}) would refuse this corpus; \
                 agentx replays it under --scenario {scenario}:{}",
                refused.places
            ),
        });
    }
    if spec.format == Format::Weka && reference {
        out.extend(block_size_note(ds, spec.trace_block_size));
    }
    for n in &out {
        tracing::warn!("{}", n.message);
    }
    Ok(out)
}

/// What the harness refuses in a corpus: the first place of each refused kind, one per line, and
/// how many places there are.
struct Refused {
    places: String,
    count: u64,
}

fn refusal(ds: &Dataset) -> Option<Refused> {
    let report = ds.warnings();
    let refused: Vec<(&String, &crate::dataset::warnings::KindReport)> = report
        .by_kind
        .iter()
        .filter(|(k, _)| {
            WarningKind::ALL
                .iter()
                .any(|w| w.as_str() == k.as_str() && w.harness_refuses())
        })
        .collect();
    if refused.is_empty() {
        return None;
    }
    let mut places = String::new();
    for (kind, refusal) in &refused {
        let first = refusal.first.first().map_or("?", String::as_str);
        let more = match refusal.count {
            0 | 1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        let _ = write!(places, "\n  {first} [{kind}]{more}{}", fix_of(kind));
    }
    Some(Refused {
        places,
        count: refused.iter().map(|(_, r)| r.count).sum(),
    })
}

/// How to fix a refused kind whose places do not say it themselves.
fn fix_of(kind: &str) -> &'static str {
    if kind == WarningKind::ShortFirstRequest.as_str() {
        "\n    fix: record the hash ids of the tools+system prefix in that request, or declare fewer \
         tool_tokens/system_tokens"
    } else {
        ""
    }
}

/// The note of a weka corpus laid out in other blocks than the harness CLI's: the traces that
/// declare another size (and are laid out as declared), or `--trace-block-size` other than 64.
fn block_size_note(ds: &Dataset, trace_block_size: Option<u32>) -> Option<HarnessNote> {
    let cli = HARNESS_CLI_BLOCK_SIZE;
    if let Some(n) = trace_block_size {
        return (n != cli).then(|| HarnessNote {
            kind: HarnessNoteKind::BlockSize,
            count: ds.len() as u64,
            message: format!(
                "--trace-block-size {n}: every trace is laid out in {n}-token blocks; the agentx-harness \
                 1.0.12 CLI lays every weka trace out in {cli}-token blocks (--trace-block-size {cli} \
                 reproduces it)"
            ),
        });
    }
    let mut by_size: BTreeMap<u32, u64> = BTreeMap::new();
    for t in ds.trajectories() {
        if t.block_size() != cli {
            *by_size.entry(t.block_size()).or_default() += 1;
        }
    }
    if by_size.is_empty() {
        return None;
    }
    let traces: u64 = by_size.values().sum();
    let sizes = by_size
        .iter()
        .map(|(size, n)| format!("{n} in {size}-token blocks"))
        .collect::<Vec<_>>()
        .join(", ");
    Some(HarnessNote {
        kind: HarnessNoteKind::BlockSize,
        count: traces,
        message: format!(
            "{traces} of {} traces declare a block size other than {cli} ({sizes}): agentx lays each \
             out as it declares; the agentx-harness 1.0.12 CLI would lay them out in {cli}-token blocks \
             (a defect: its weka plugin default overrides the trace; docs/agentx-v1-reference.md); \
             --trace-block-size {cli} reproduces the harness CLI",
            ds.len()
        ),
    })
}
