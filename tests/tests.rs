//! Integration tests of the agentx-host binary and library: one test binary, one module per topic.

mod cli;
mod cli_reference;
mod dataset;
mod deploy;
mod differential;
mod export;
mod front_door;
mod html;
mod inferencex;
mod infx_bench;
mod replay;
mod report;
mod robustness;
mod scenario;
mod scenario_v2;
mod scenario_v3;
mod server_metrics;
mod shard;
mod sim;
mod support;
mod sweep;
mod tiling;
mod tree_fidelity;
mod tree_run;
