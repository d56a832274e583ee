//! The I/O around `compute`: finding a run directory, loading its files, opening its dataset.

use super::*;
use std::fmt::Write as _;

/// The parsed files of an artifact directory.
#[derive(Debug, Clone)]
pub(crate) struct Artifacts {
    /// The directory the files were read from (a per-run subdirectory when the given one had none).
    pub(crate) dir: PathBuf,
    pub(crate) records: Vec<ProfileRecord>,
    pub(crate) server: Option<ServerMetrics>,
    pub(crate) run: Option<RunSummary>,
    pub(crate) aiperf: Option<AiperfSummary>,
}

/// The directory holding `profile_export.jsonl` (see [`locate_file`]).
pub fn locate(dir: &Path) -> Result<PathBuf, ReportError> {
    locate_file(dir, PROFILE_EXPORT)
}

/// The run directory `dir` means, by the run file `file` it must hold: `dir` itself, else its
/// `latest` link (agentx's per-run default directories), else the one directory directly below it
/// that has one (aiperf's per-run layout). Several candidates and no `latest` are refused with the
/// candidates listed.
pub fn locate_file(dir: &Path, file: &'static str) -> Result<PathBuf, ReportError> {
    if dir.join(file).is_file() {
        return Ok(dir.to_owned());
    }
    let latest = dir.join(agentx_record::fsio::LATEST_LINK);
    if latest.join(file).is_file() {
        return Ok(latest);
    }
    let mut subs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| ReportError::Read {
            path: dir.to_owned(),
            source,
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join(file).is_file())
        .collect();
    subs.sort();
    match subs.len() {
        0 => Err(ReportError::NoRecords {
            dir: dir.to_owned(),
            file,
        }),
        1 => Ok(subs.remove(0)),
        _ => Err(ReportError::Ambiguous {
            dir: dir.to_owned(),
            candidates: subs.iter().fold(String::new(), |mut list, candidate| {
                let _ = write!(list, "\n  {}", candidate.display());
                list
            }),
        }),
    }
}

pub(super) fn read(path: &Path) -> Result<Option<String>, ReportError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ReportError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Reads the records (required), the server metrics and the run summary (both optional).
pub(crate) fn load_artifacts(dir: &Path) -> Result<Artifacts, ReportError> {
    let dir = locate(dir)?;
    let profile_path = dir.join(PROFILE_EXPORT);
    let file = match std::fs::File::open(&profile_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReportError::NoRecords {
                dir: dir.clone(),
                file: PROFILE_EXPORT,
            })
        }
        r => r.map_err(|source| ReportError::Read {
            path: profile_path.clone(),
            source,
        })?,
    };
    let records = read_profile_export(
        std::io::BufReader::with_capacity(1 << 20, file),
        &profile_path,
    )?;
    let server_path = dir.join(SERVER_METRICS);
    let server = read(&server_path)?
        .map(|t| ServerMetrics::parse(&t, &server_path))
        .transpose()?;
    let run_path = dir.join(RUN_SUMMARY);
    let run = read(&run_path)?
        .map(|t| RunSummary::parse(&t, &run_path))
        .transpose()?;
    let aiperf_path = dir.join(PROFILE_AIPERF);
    let aiperf = read(&aiperf_path)?
        .map(|t| AiperfSummary::parse(&t, &aiperf_path))
        .transpose()?;
    Ok(Artifacts {
        dir,
        records,
        server,
        run,
        aiperf,
    })
}

/// Opens the dataset the run replayed: `spec` when given (a path or a name of the alias table), else
/// the run summary's alias, else its source path. Failure is not an error: the report says why.
pub(crate) fn open_traces(
    run: Option<&RunSummary>,
    spec: Option<&str>,
    opts: &OpenOptions,
) -> Traces {
    let unavailable = |reason: String| Traces::Unavailable { reason };
    let spec = match spec {
        Some(s) => s.to_owned(),
        None => {
            let Some(run) = run else {
                return unavailable(format!(
                    "no {RUN_SUMMARY} names the dataset; pass --dataset PATH|NAME"
                ));
            };
            match (run.dataset_alias(), run.dataset_source()) {
                (Some(a), _) if dataset::alias::lookup(a).is_some() => a.to_owned(),
                (_, Some(src)) if Path::new(src).exists() => src.to_owned(),
                (Some(a), _) => {
                    return unavailable(format!(
                    "dataset {a:?} is not in the alias table (known: {}); pass --dataset PATH|NAME",
                    dataset::alias::known_names()
                ))
                }
                (None, Some(src)) => {
                    return unavailable(format!(
                        "the run's dataset {src} no longer exists; pass --dataset PATH|NAME"
                    ))
                }
                (None, None) => {
                    return unavailable(format!(
                        "{RUN_SUMMARY} names no dataset; pass --dataset PATH|NAME"
                    ))
                }
            }
        }
    };
    match Dataset::open(&spec, opts) {
        Ok(ds) => {
            let name = ds
                .alias()
                .map(|a| a.name.to_owned())
                .unwrap_or_else(|| ds.source_path().display().to_string());
            Traces::Available { dataset: ds, name }
        }
        Err(e) => unavailable(format!("cannot open dataset {spec}: {e}")),
    }
}

/// The dataset behind an artifact directory's records: `spec` (`--dataset`) when given; else, when
/// aiperf's aggregate names a hub dataset (`metadata.dataset.hf_dataset_name`), that dataset's
/// snapshot in the hub cache, only when exactly one is there (none or several leave the trace
/// figures empty rather than guess, as InferenceX's aggregator does); else the run summary's
/// corpus (a local corpus keeps its theoretical hit rate and expected lengths).
pub(crate) fn open_artifact_traces(
    artifacts: &Artifacts,
    spec: Option<&str>,
    opts: &OpenOptions,
) -> Traces {
    let hf_path = artifacts
        .aiperf
        .as_ref()
        .and_then(|x| x.dataset.as_ref())
        .and_then(|d| d.get("hf_dataset_name"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty());
    match (spec, hf_path) {
        (None, Some(repo)) => hub_snapshot_traces(repo, opts),
        _ => open_traces(artifacts.run.as_ref(), spec, opts),
    }
}

/// The traces of the one snapshot of hub dataset `repo`.
fn hub_snapshot_traces(repo: &str, opts: &OpenOptions) -> Traces {
    use dataset::hub::{self, RepoKind};
    let unavailable = |reason: String| Traces::Unavailable { reason };
    let dirs = hub::hub_dirs();
    let fix =
        format!("pass --dataset PATH|NAME to name the corpus ({PROFILE_AIPERF} names {repo})");
    let Some((dir, snaps)) = hub::snapshots(&dirs, RepoKind::Dataset, repo) else {
        return unavailable(format!(
            "no snapshot of hub dataset {repo} in {}: fetch it with `{}`, or {fix}",
            hub::describe_dirs(&dirs),
            dataset::alias::download_command(repo)
        ));
    };
    let [snap] = snaps.as_slice() else {
        return unavailable(format!(
            "{} snapshots of hub dataset {repo} in {} (exactly one is read, none is guessed): {fix}",
            snaps.len(),
            dir.display()
        ));
    };
    let file = dataset::alias::lookup(repo).map_or(dataset::alias::TRACES_FILE, |a| a.file);
    let path = snap.join(file);
    match Dataset::open_path(&path, opts) {
        Ok(ds) => Traces::Available {
            dataset: ds,
            name: format!(
                "{repo} (snapshot {})",
                snap.file_name().unwrap_or_default().to_string_lossy()
            ),
        },
        Err(e) => unavailable(format!("cannot open {}: {e}", path.display())),
    }
}

impl Artifacts {
    /// The inputs of [`compute`] and [`compute_nested`].
    pub(crate) fn input<'a>(
        &'a self,
        identity: &'a Identity,
        traces: &'a Traces,
    ) -> ReportInput<'a> {
        ReportInput {
            records: &self.records,
            server: self.server.as_ref(),
            run: self.run.as_ref(),
            aiperf: self.aiperf.as_ref(),
            identity,
            traces,
        }
    }
}

/// Reads an artifact directory and writes its report in `layout` as pretty JSON.
pub fn render_dir(
    dir: &Path,
    identity: &Identity,
    dataset_spec: Option<&str>,
    opts: &OpenOptions,
    layout: Layout,
) -> Result<String, ReportError> {
    let artifacts = load_artifacts(dir)?;
    let traces = open_artifact_traces(&artifacts, dataset_spec, opts);
    let input = artifacts.input(identity, &traces);
    Ok(match layout {
        Layout::Flat => compute(&input).to_json_pretty(),
        Layout::Nested => compute_nested(&input)?.to_json_pretty(),
    })
}
