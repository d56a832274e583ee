//! `agentx-host compare A B` and `sweep --compare A B`: the comparison's `compare.json` and
//! `compare.html`, and the line per figure the command prints. The ratios, their intervals and
//! the verdicts are [`agentx_metrics::precision::compare`]'s; this module only lays them out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentx_metrics::precision::compare::{Comparison, FigureComparison};
use agentx_record::fsio::Root;
use serde::Serialize;

use super::html::{self, Page, Table};

/// The comparison's JSON file.
pub const COMPARE_JSON: &str = "compare.json";
/// The comparison's page.
pub const COMPARE_HTML: &str = "compare.html";

/// What the two directories hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// One run each (`run_summary.json`).
    Run,
    /// Trials of one point each (`trials.json`, a run per `trial_<i>/`), pooled.
    Trials,
    /// A sweep each (`sweep.json`), compared per common concurrency.
    Sweep,
}

impl Kind {
    /// The kind's name, as in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Run => "run",
            Kind::Trials => "trials",
            Kind::Sweep => "sweep",
        }
    }
}

/// The figures of one pair of runs, their intervals holding together at the family level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Family {
    /// Each interval's own level, `1 − (1 − level)/k` over the `k` figures compared.
    pub family_level: f64,
    /// Bootstrap replicates of each run.
    pub resamples: u64,
    /// The seed of the replicates.
    pub seed: u64,
    /// Each figure both runs have, by name.
    pub figures: BTreeMap<String, FigureComparison>,
}

impl From<Comparison> for Family {
    fn from(comparison: Comparison) -> Family {
        Family {
            family_level: comparison.family_level,
            resamples: comparison.resamples,
            seed: comparison.seed,
            figures: comparison.figures,
        }
    }
}

/// One concurrency both sweeps ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointFamily {
    /// The concurrency (lanes).
    pub concurrency: u32,
    /// Its runs compared.
    #[serde(flatten)]
    pub family: Family,
}

/// Two directories compared: a family of figures for runs and trials, one per common concurrency
/// for sweeps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareReport {
    /// Directory A, as given.
    pub a: String,
    /// Directory B, as given.
    pub b: String,
    /// What both hold.
    pub kind: Kind,
    /// The level the intervals of each family hold at together.
    pub level: f64,
    /// Runs and trials: the figures compared.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub whole: Option<Family>,
    /// Sweeps: one family per concurrency both ran, in concurrency order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub points: Vec<PointFamily>,
    /// What the comparison left out, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl CompareReport {
    /// Each family with its label: `""` for runs and trials, `"concurrency N"` for a sweep point.
    fn families(&self) -> Vec<(String, &Family)> {
        let whole = self.whole.iter().map(|family| (String::new(), family));
        let points = self
            .points
            .iter()
            .map(|point| (format!("concurrency {}", point.concurrency), &point.family));
        whole.chain(points).collect()
    }

    /// One line per figure: `ttft_p90: B faster by 12 % (9 %-15 %)`, prefixed by the
    /// concurrency for a sweep.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (label, family) in self.families() {
            let prefix = if label.is_empty() {
                String::new()
            } else {
                format!("{label}: ")
            };
            for (name, figure) in &family.figures {
                lines.push(format!("{prefix}{name}: {}", figure.verdict));
            }
        }
        lines
    }

    /// The JSON of `compare.json`.
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// Writes `compare.json` and `compare.html` into `out` (created when missing); the files
    /// written.
    pub fn write(&self, out: &Path) -> std::io::Result<Vec<PathBuf>> {
        let root = Root::create(out)?;
        let page = html::render_page(&self.page());
        let mut written = Vec::new();
        for (name, text) in [(COMPARE_JSON, self.to_json_pretty()), (COMPARE_HTML, page)] {
            root.write_atomic(name, text.as_bytes())?;
            written.push(root.join(name));
        }
        Ok(written)
    }

    /// The page: what was compared, then a table per family.
    fn page(&self) -> Page {
        let mut tables = vec![Table::kv(
            "Compared",
            vec![
                ("A", self.a.clone()),
                ("B", self.b.clone()),
                ("kind", self.kind.name().to_owned()),
                ("level", format!("{}", self.level)),
            ],
        )];
        for (label, family) in self.families() {
            tables.push(family_table(&label, family));
        }
        if !self.notes.is_empty() {
            tables.push(Table {
                title: "Notes".into(),
                header: vec!["note".into()],
                rows: self.notes.iter().map(|note| vec![note.clone()]).collect(),
                links: Vec::new(),
            });
        }
        Page {
            title: format!("agentx comparison: B / A ({})", self.kind.name()),
            subtitle: format!(
                "A = {} · B = {} · each interval of B / A at the family level 1 − (1 − {})/k, \
                 k the figures compared (Bonferroni), so the verdicts hold together at {}",
                self.a, self.b, self.level, self.level
            ),
            tables,
            ..Page::default()
        }
    }
}

/// A family's figures: A, B, the ratio with its interval, the verdict.
fn family_table(label: &str, family: &Family) -> Table {
    let title = if label.is_empty() {
        format!(
            "B / A, each interval at {:.4} ({} figures)",
            family.family_level,
            family.figures.len()
        )
    } else {
        format!(
            "{label}: B / A, each interval at {:.4} ({} figures)",
            family.family_level,
            family.figures.len()
        )
    };
    let cell = |value: f64| html::num(Some(value), 4);
    let rows = family
        .figures
        .iter()
        .map(|(name, figure)| {
            vec![
                name.clone(),
                cell(figure.a),
                cell(figure.b),
                cell(figure.ratio),
                format!("{}–{}", cell(figure.lo), cell(figure.hi)),
                figure.verdict.clone(),
            ]
        })
        .collect();
    Table {
        title,
        header: ["figure", "A", "B", "B / A", "interval", "verdict"]
            .map(str::to_owned)
            .to_vec(),
        rows,
        links: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_metrics::precision::compare::Change;

    fn figure(ratio: f64, lo: f64, hi: f64, verdict: &str) -> FigureComparison {
        FigureComparison {
            a: 10.0,
            b: 10.0 * ratio,
            ratio,
            lo,
            hi,
            change: Change::NoDifferenceShown,
            better: None,
            verdict: verdict.into(),
        }
    }

    fn family() -> Family {
        Family {
            family_level: 0.99,
            resamples: 200,
            seed: 7,
            figures: BTreeMap::from([
                (
                    "itl_p50".to_owned(),
                    figure(0.8, 0.78, 0.82, "B faster by 20 % (18 %-22 %)"),
                ),
                (
                    "ttft_p90".to_owned(),
                    figure(1.01, 0.97, 1.05, "no difference shown"),
                ),
            ]),
        }
    }

    #[test]
    fn a_run_comparison_prints_a_line_per_figure_and_its_json_has_the_figures_at_the_top() {
        let report = CompareReport {
            a: "runs/a".into(),
            b: "runs/b".into(),
            kind: Kind::Run,
            level: 0.95,
            whole: Some(family()),
            points: Vec::new(),
            notes: Vec::new(),
        };
        assert_eq!(
            report.lines(),
            [
                "itl_p50: B faster by 20 % (18 %-22 %)",
                "ttft_p90: no difference shown"
            ]
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json_pretty()).unwrap();
        assert_eq!(json["kind"], "run");
        assert_eq!(json["family_level"], 0.99);
        assert_eq!(json["figures"]["itl_p50"]["lo"], 0.78);
        assert!(json.get("points").is_none());
        let dir = tempfile::tempdir().unwrap();
        let written = report.write(dir.path()).unwrap();
        assert_eq!(written.len(), 2);
        let page = std::fs::read_to_string(dir.path().join(COMPARE_HTML)).unwrap();
        assert!(page.contains("B faster by 20 %"), "{page}");
    }

    #[test]
    fn a_sweep_comparison_has_a_family_per_concurrency() {
        let report = CompareReport {
            a: "a".into(),
            b: "b".into(),
            kind: Kind::Sweep,
            level: 0.9,
            whole: None,
            points: vec![PointFamily {
                concurrency: 4,
                family: family(),
            }],
            notes: vec!["concurrency 8: only in A".into()],
        };
        assert_eq!(
            report.lines()[1],
            "concurrency 4: ttft_p90: no difference shown"
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json_pretty()).unwrap();
        assert_eq!(json["points"][0]["concurrency"], 4);
        assert_eq!(json["points"][0]["figures"]["itl_p50"]["hi"], 0.82);
        assert!(json.get("figures").is_none());
    }
}
