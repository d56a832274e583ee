//! `agentx-host report ARTIFACT_DIR`: the InferenceX `bmk_agentic` JSON of a finished run (nested
//! layout by default, `--layout flat` for the seed-era keys), and
//! `agentx-host plot DIR`: its `metrics_plots.png` and `report.html` (the same series, interactive, with
//! the headline numbers and the verdict; `--no-html` for the PNG alone).
//!
//! Syntax only: the identity flags read the same environment variables InferenceX's
//! `process_agentic_result.py` reads, so a CI job that exported them needs no flags; the computation
//! lives in [`crate::export::bmk`].

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::dataset::OpenOptions;
use crate::export::bmk::{self, Identity, IdentityInput, Layout};

/// Arguments of `agentx-host report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The run's artifact directory: the run itself, a directory whose `latest` link names it (the
    /// per-run default `artifacts`), or one holding exactly one run (aiperf's per-run layout).
    #[arg(value_name = "ARTIFACT_DIR")]
    pub(crate) artifact_dir: PathBuf,
    /// Write the JSON to FILE instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// The dataset the run replayed (a path or a corpus name), for the theoretical cache hit rate and
    /// the expected output lengths. Defaults to the one named in run_summary.json.
    #[arg(long, value_name = "PATH|NAME")]
    pub(crate) dataset: Option<String>,
    /// nested: InferenceX's current result (identity, request_accounting, request_metrics{...},
    /// server_metrics{...}); flat: the seed-era bmk_agentic keys (mean_ttft, p90_e2el, ...).
    #[arg(long, value_enum, default_value_t = LayoutArg(Layout::Nested), value_name = "LAYOUT")]
    pub(crate) layout: LayoutArg,
    #[command(flatten)]
    pub(crate) identity: IdentityArgs,
}

/// Who was benchmarked; each flag falls back to InferenceX's environment variable.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Identity (InferenceX environment variables)")]
pub(crate) struct IdentityArgs {
    /// Hardware / runner name (`hw`).
    #[arg(long, env = "RUNNER_TYPE", value_name = "NAME")]
    pub(crate) hw: Option<String>,
    /// Concurrency (`conc`); defaults to the run's.
    #[arg(long, env = "CONC", value_name = "N")]
    pub(crate) conc: Option<String>,
    /// The server's container image (`image`).
    #[arg(long, env = "IMAGE", value_name = "IMAGE")]
    pub(crate) image: Option<String>,
    /// Model name; defaults to the run's.
    #[arg(long, short = 'm', env = "MODEL", value_name = "MODEL")]
    pub(crate) model: Option<String>,
    /// `infmax_model_prefix`.
    #[arg(long, env = "MODEL_PREFIX", value_name = "PREFIX")]
    pub(crate) model_prefix: Option<String>,
    /// The serving engine (`framework`), e.g. vllm, sglang, trt, atom, dynamo-vllm.
    #[arg(long, env = "FRAMEWORK", value_name = "NAME")]
    pub(crate) framework: Option<String>,
    /// Weight precision (`precision`), e.g. fp8, fp4, bf16.
    #[arg(long, env = "PRECISION", value_name = "NAME")]
    pub(crate) precision: Option<String>,
    /// Speculative decoding (`spec_decoding`), e.g. mtp, eagle (default "none").
    #[arg(long, env = "SPEC_DECODING", value_name = "NAME")]
    pub(crate) spec_decoding: Option<String>,
    /// Prefill and decode on separate workers (`disagg`): true or false (default false).
    #[arg(long, env = "DISAGG", value_name = "BOOL")]
    pub(crate) disagg: Option<String>,
    /// The server spans several nodes (`is_multinode`): true or false (default false).
    #[arg(long, env = "IS_MULTINODE", value_name = "BOOL")]
    pub(crate) is_multinode: Option<String>,
    /// Tensor parallelism; the GPU count on a single node (default 1).
    #[arg(long, env = "TP", value_name = "N")]
    pub(crate) tp: Option<String>,
    /// Expert parallelism (`ep`, default 1).
    #[arg(long, env = "EP_SIZE", value_name = "N")]
    pub(crate) ep: Option<String>,
    /// Data-parallel attention (`dp_attention`): true or false (default false).
    #[arg(long, env = "DP_ATTENTION", value_name = "BOOL")]
    pub(crate) dp_attention: Option<String>,
    /// KV-cache offloading (`kv_offloading`): none, dram, disk, remote, ... (default none).
    #[arg(
        long,
        visible_alias = "offloading",
        env = "KV_OFFLOADING",
        value_name = "MODE"
    )]
    pub(crate) kv_offloading: Option<String>,
    /// Disaggregated: prefill workers (`prefill_num_workers`).
    #[arg(long, env = "PREFILL_NUM_WORKERS", value_name = "N")]
    pub(crate) prefill_num_workers: Option<String>,
    /// Disaggregated: tensor parallelism of each prefill worker (`prefill_tp`).
    #[arg(long, env = "PREFILL_TP", value_name = "N")]
    pub(crate) prefill_tp: Option<String>,
    /// Disaggregated: expert parallelism of each prefill worker (`prefill_ep`).
    #[arg(long, env = "PREFILL_EP", value_name = "N")]
    pub(crate) prefill_ep: Option<String>,
    /// Disaggregated: data-parallel attention on prefill (`prefill_dp_attention`).
    #[arg(long, env = "PREFILL_DP_ATTN", value_name = "BOOL")]
    pub(crate) prefill_dp_attention: Option<String>,
    /// Disaggregated: decode workers (`decode_num_workers`).
    #[arg(long, env = "DECODE_NUM_WORKERS", value_name = "N")]
    pub(crate) decode_num_workers: Option<String>,
    /// Disaggregated: tensor parallelism of each decode worker (`decode_tp`).
    #[arg(long, env = "DECODE_TP", value_name = "N")]
    pub(crate) decode_tp: Option<String>,
    /// Disaggregated: expert parallelism of each decode worker (`decode_ep`).
    #[arg(long, env = "DECODE_EP", value_name = "N")]
    pub(crate) decode_ep: Option<String>,
    /// Disaggregated: data-parallel attention on decode (`decode_dp_attention`).
    #[arg(long, env = "DECODE_DP_ATTN", value_name = "BOOL")]
    pub(crate) decode_dp_attention: Option<String>,
    /// Disaggregated: pipeline parallelism of each prefill worker (`prefill_pp`, default 1).
    #[arg(long, env = "PREFILL_PP_SIZE", value_name = "N")]
    pub(crate) prefill_pp: Option<String>,
    /// Disaggregated: decode context parallelism of each prefill worker (`prefill_dcp_size`, default 1).
    #[arg(long, env = "PREFILL_DCP_SIZE", value_name = "N")]
    pub(crate) prefill_dcp_size: Option<String>,
    /// Disaggregated: prefill context parallelism of each prefill worker (`prefill_pcp_size`, default 1).
    #[arg(long, env = "PREFILL_PCP_SIZE", value_name = "N")]
    pub(crate) prefill_pcp_size: Option<String>,
    /// Disaggregated: pipeline parallelism of each decode worker (`decode_pp`, default 1).
    #[arg(long, env = "DECODE_PP_SIZE", value_name = "N")]
    pub(crate) decode_pp: Option<String>,
    /// Disaggregated: decode context parallelism of each decode worker (`decode_dcp_size`, default 1).
    #[arg(long, env = "DECODE_DCP_SIZE", value_name = "N")]
    pub(crate) decode_dcp_size: Option<String>,
    /// Disaggregated: prefill context parallelism of each decode worker (`decode_pcp_size`, default 1).
    #[arg(long, env = "DECODE_PCP_SIZE", value_name = "N")]
    pub(crate) decode_pcp_size: Option<String>,
    /// Pipeline parallelism (default 1); the per-GPU divisor is TP x PP x PCP on one node.
    #[arg(long, env = "PP_SIZE", value_name = "N")]
    pub(crate) pp: Option<String>,
    /// Decode context parallelism (default 1; runs on the TP GPUs).
    #[arg(long, env = "DCP_SIZE", value_name = "N")]
    pub(crate) dcp_size: Option<String>,
    /// Prefill context parallelism (default 1).
    #[arg(long, env = "PCP_SIZE", value_name = "N")]
    pub(crate) pcp_size: Option<String>,
    /// Nested layout: `recipe_fingerprint`, 64 lower-case hex digits (default empty: the dispatched
    /// config has none).
    #[arg(long, env = "RECIPE_FINGERPRINT", value_name = "HEX")]
    pub(crate) recipe_fingerprint: Option<String>,
    /// Nested layout: the KV offload backend's name (`kv_offload_backend.name`, e.g. lmcache,
    /// native, mooncake); required when KV offloading is on, refused when it is none.
    #[arg(long, env = "KV_OFFLOAD_BACKEND", value_name = "NAME")]
    pub(crate) kv_offload_backend: Option<String>,
    /// Nested layout: the KV offload backend as `{"name": ..., "version": ...}` (version optional);
    /// its name must match --kv-offload-backend.
    #[arg(long, env = "KV_OFFLOAD_BACKEND_METADATA", value_name = "JSON")]
    pub(crate) kv_offload_backend_metadata: Option<String>,
    /// Nested layout: CPU DRAM allocated to the KV cache (`allocated_cpu_dram_gb`, whole GB, default 0).
    #[arg(long, env = "TOTAL_CPU_DRAM_GB", value_name = "GB")]
    pub(crate) allocated_cpu_dram_gb: Option<String>,
    /// Nested layout: the router in front of the engines (`router`), as
    /// `{"name": ..., "version": ...}` (both required).
    #[arg(long, env = "ROUTER_METADATA", value_name = "JSON")]
    pub(crate) router: Option<String>,
    /// Nested layout: `kv_p2p_transfer` (e.g. nixl).
    #[arg(long, env = "KV_P2P_TRANSFER", value_name = "NAME")]
    pub(crate) kv_p2p_transfer: Option<String>,
    /// Nested layout, multinode: `prefill_hw` (given together with --decode-hw).
    #[arg(long, env = "PREFILL_HARDWARE", value_name = "NAME")]
    pub(crate) prefill_hw: Option<String>,
    /// Nested layout, multinode: `decode_hw` (given together with --prefill-hw).
    #[arg(long, env = "DECODE_HARDWARE", value_name = "NAME")]
    pub(crate) decode_hw: Option<String>,
}

impl From<IdentityArgs> for IdentityInput {
    fn from(args: IdentityArgs) -> Self {
        IdentityInput {
            hw: args.hw,
            conc: args.conc,
            image: args.image,
            model: args.model,
            model_prefix: args.model_prefix,
            framework: args.framework,
            precision: args.precision,
            spec_decoding: args.spec_decoding,
            disagg: args.disagg,
            is_multinode: args.is_multinode,
            tp: args.tp,
            ep: args.ep,
            dp_attention: args.dp_attention,
            kv_offloading: args.kv_offloading,
            prefill_num_workers: args.prefill_num_workers,
            prefill_tp: args.prefill_tp,
            prefill_ep: args.prefill_ep,
            prefill_dp_attention: args.prefill_dp_attention,
            decode_num_workers: args.decode_num_workers,
            decode_tp: args.decode_tp,
            decode_ep: args.decode_ep,
            decode_dp_attention: args.decode_dp_attention,
            prefill_pp: args.prefill_pp,
            prefill_dcp_size: args.prefill_dcp_size,
            prefill_pcp_size: args.prefill_pcp_size,
            decode_pp: args.decode_pp,
            decode_dcp_size: args.decode_dcp_size,
            decode_pcp_size: args.decode_pcp_size,
            pp: args.pp,
            dcp_size: args.dcp_size,
            pcp_size: args.pcp_size,
            recipe_fingerprint: args.recipe_fingerprint,
            kv_offload_backend: args.kv_offload_backend,
            kv_offload_backend_metadata: args.kv_offload_backend_metadata,
            allocated_cpu_dram_gb: args.allocated_cpu_dram_gb,
            router: args.router,
            kv_p2p_transfer: args.kv_p2p_transfer,
            prefill_hw: args.prefill_hw,
            decode_hw: args.decode_hw,
        }
    }
}

/// Runs `agentx-host report`.
pub(crate) fn main(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let identity = Identity::resolve(&args.identity.into())?;
    let mut json = bmk::render_dir(
        &args.artifact_dir,
        &identity,
        args.dataset.as_deref(),
        &OpenOptions::default(),
        args.layout.0,
    )?;
    json.push('\n');
    match &args.output {
        None => out!("{json}"),
        Some(path) => {
            crate::fsio::write_atomic(path, json.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            errln!("wrote {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `agentx-host plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// A run's artifact directory (or `artifacts`, for the newest run), or a sweep's directory
    /// (its Pareto view and page are drawn again).
    #[arg(value_name = "DIR")]
    pub(crate) dir: PathBuf,
    /// Write the PNG to FILE instead of DIR/metrics_plots.png.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// Write the HTML report to FILE instead of DIR/report.html.
    #[arg(long, value_name = "FILE", conflicts_with = "no_html")]
    pub(crate) html: Option<PathBuf>,
    /// Write only the PNG, not report.html.
    #[arg(long)]
    pub(crate) no_html: bool,
}

/// Runs `agentx-host plot`: a run's plot and page into the run's directory (the one `DIR` names:
/// itself, its `latest`, or its only run); a sweep's Pareto view and page for a sweep directory.
pub(crate) fn plot_main(args: &PlotArgs) -> anyhow::Result<ExitCode> {
    if args.dir.join(crate::export::sweep::SWEEP_JSON).is_file() {
        if args.output.is_some() || args.html.is_some() {
            anyhow::bail!(
                "{} is a sweep: its views (sweep_pareto.png, report.html) are written into it; drop -o/--html, or name one point (e.g. {}/conc_N)",
                args.dir.display(),
                args.dir.display()
            );
        }
        let sweep = crate::export::sweep_views::read_sweep(&args.dir)?;
        let root = crate::fsio::Root::open(&args.dir)
            .with_context(|| format!("cannot open the sweep directory {}", args.dir.display()))?;
        let files = crate::export::sweep_views::write_views(&root, &sweep);
        if files.is_empty() {
            anyhow::bail!(
                "no view of the sweep {} was written (see the log)",
                args.dir.display()
            );
        }
        for file in files {
            errln!("wrote {}", file.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let dir = bmk::locate(&args.dir)?;
    let path = crate::export::plot::plot_dir(&dir, args.output.as_deref())?;
    errln!("wrote {}", path.display());
    if !args.no_html {
        let path = crate::export::html::html_dir(&dir, args.html.as_deref())?;
        errln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `--layout`'s values: the layouts are `export`'s ([`Layout`]), their spelling on the command line
/// is here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LayoutArg(pub(crate) Layout);

impl clap::ValueEnum for LayoutArg {
    fn value_variants<'a>() -> &'a [Self] {
        &[LayoutArg(Layout::Flat), LayoutArg(Layout::Nested)]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(match self.0 {
            Layout::Flat => clap::builder::PossibleValue::new("flat")
                .help("The seed-era `bmk_agentic` keys (`mean_ttft`, `p90_e2el`, ...) at the top level"),
            Layout::Nested => clap::builder::PossibleValue::new("nested").help(
                "InferenceX's current result: identity, `request_accounting`, `request_metrics{...}` and `server_metrics{...}`",
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        report: ReportArgs,
    }

    #[test]
    fn layout_defaults_to_nested_and_flat_is_a_flag_away() {
        let a = Cli::try_parse_from(["report", "dir"]).unwrap().report;
        assert_eq!(a.layout.0, Layout::Nested);
        let a = Cli::try_parse_from([
            "report",
            "dir",
            "--layout",
            "flat",
            "--pp",
            "2",
            "--dcp-size",
            "4",
            "--pcp-size",
            "2",
        ])
        .unwrap()
        .report;
        assert_eq!(a.layout.0, Layout::Flat);
        let id = Identity::resolve(&a.identity.into()).unwrap();
        assert_eq!((id.pp, id.dcp_size, id.pcp_size), (2, 4, 2));
        assert!(Cli::try_parse_from(["report", "dir", "--layout", "tree"]).is_err());
    }
}
