//! Result files of a run, written from its records and scraped server metrics: the aiperf-compatible
//! exports, the InferenceX `bmk_agentic` JSON, CSV, plots, the HTML report and the run manifest. It formats what
//! `metrics` computes and computes nothing of its own.

pub mod aiperf;
pub mod bmk;
pub mod html;
pub mod manifest;
pub mod plot;
pub mod run_summary;
pub mod server_metrics;
pub mod sweep;
pub mod sweep_views;
