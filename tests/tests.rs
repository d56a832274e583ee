//! Integration tests of the agentx-host binary and library: one test binary, one module per topic.

mod cli;
mod dataset;
mod export;
mod replay;
mod scenario;
mod sim;
