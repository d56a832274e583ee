//! The `agentx` scenario component: agentx-harness's `--scenario agentx` preset on the AgentX v1.0
//! session-tree rules, as `policy_harness::agentx` defines it, exported through the WIT world
//! `agentx:scenario@0.3.0`. All logic and its tests live in the policy-harness crate.

policy_harness::export_scenario_v3!(policy_harness::agentx::Agentx);
