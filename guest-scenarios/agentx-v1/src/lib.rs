//! The `inferencex-agentx-v1` scenario component (AgentX v1.0 session trees): the policy of
//! `policy_trees::agentx_v1` exported through the WIT world `agentx:scenario@0.2.0`. All logic and its
//! tests live in the policy-trees crate.

policy_trees::export_tree_scenario!(policy_trees::agentx_v1::AgentxV1);
