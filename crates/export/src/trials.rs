//! `trials.json`: a point repeated (`run --trials N`): each trial's seed, directory and how it
//! ended, every headline figure's spread between the trials (mean, deviation, range and the
//! Student-t interval of the mean), and the intervals of the trials' sessions pooled.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use agentx_metrics::precision::{BetweenTrials, Intervals};
use agentx_record::fsio::Root;

/// The file's name in the trials' directory.
pub const TRIALS_JSON: &str = "trials.json";

/// The format's name and version.
pub const SCHEMA: &str = "agentx-trials/1";

/// One trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// 0-based.
    pub index: u32,
    /// The seed it ran with: the base seed plus its index, or the base seed with `--same-seed`.
    pub seed: u64,
    /// Its run directory, relative to the trials' (`trial_<i>`).
    pub dir: String,
    /// How it ended (`completed`, `interrupted`, ...); `None` when it did not start.
    pub stop: Option<String>,
    /// Its exit code (0: completed and valid as asked).
    pub code: u8,
    /// Why it did not run, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the trials made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialsSummary {
    /// [`SCHEMA`].
    pub schema: String,
    /// Whether every trial used the base seed (`--same-seed`: the trials differ by the server
    /// only).
    pub same_seed: bool,
    /// The confidence level of every interval.
    pub level: f64,
    /// The trials, in order.
    pub trials: Vec<Trial>,
    /// Each headline figure over the trials that completed: their spread and the interval of
    /// their mean.
    pub between: BTreeMap<String, BetweenTrials>,
    /// The session bootstrap over every completed trial's sessions together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooled: Option<Intervals>,
}

impl TrialsSummary {
    /// Writes `trials.json` into `dir`.
    pub fn write(&self, dir: &Root) -> std::io::Result<PathBuf> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        dir.write_atomic(TRIALS_JSON, format!("{text}\n").as_bytes())
    }

    /// Reads `dir/trials.json`.
    pub fn read(dir: &Path) -> Result<TrialsSummary, String> {
        let path = dir.join(TRIALS_JSON);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}
